package dnsserver

import (
	"hash/maphash"
	"math/bits"
	"net/netip"
	"sync"
	"time"
)

// Response-rate limiting (RRL), as Knot and NSD do it: a spoofed query
// makes the server send its answer to the victim whose address it forged,
// so each source prefix may get RRLConfig.Rate UDP responses a second.
// Past that, every Slip-th response is a truncated answer (the question
// only, TC set, no cookie: never bigger than the query, so useless to an
// attacker, while a real client behind the prefix asks again over TCP,
// which a spoofer cannot, and is answered) and the others are dropped. TCP is never
// limited; nor is a query whose server cookie verifies (cookie.go): its
// source address is proven.
//
// Each prefix's allowance is a GCRA cell (the generic cell rate
// algorithm, a token bucket kept as one time): tat is when the prefix's
// bucket will be full again, were nothing else sent. A response at now is
// allowed if tat, pushed one interval (1/Rate) on, is at most Burst
// intervals ahead of now; then tat moves on. A limited response leaves
// tat alone, so a flood is answered at the rate, not starved.
//
// The cells live in a table made once, at New: buckets of three cells,
// one cache line each, a power of two of them, chosen by a hash of the
// prefix keyed with a seed made at New (so that a sender cannot aim many
// prefixes at one bucket). A prefix not in its bucket takes the cell whose
// tat is earliest: the one that has been quiet longest, whose bucket has
// refilled the most; forgetting it costs nothing once its tat has passed.
// So the table is lossy, never grows, and a query costs one hash and one
// bucket, under the bucket's own lock.

// rrlVerdict is what becomes of a UDP response.
type rrlVerdict uint8

const (
	rrlPass rrlVerdict = iota // sent as answered
	rrlSlip                   // sent truncated (TC, the question only, no cookie)
	rrlDrop                   // not sent
)

// rrl is the limiter's table and settings.
type rrl struct {
	buckets   []rrlBucket
	mask      uint64 // len(buckets) − 1
	seed      maphash.Seed
	interval  int64 // ns between responses at the rate
	tolerance int64 // Burst intervals: how far tat may run ahead of now
	slip      uint16
	v4, v6    int // prefix lengths
	exempt    []netip.Prefix
	epoch     time.Time // times are ns since then (monotonic when the clock is)
}

// rrlBucket is one cache line: its lock and three cells.
type rrlBucket struct {
	mu    sync.Mutex
	_     [8]byte
	cells [3]rrlCell
}

// rrlCell is one prefix's allowance.
type rrlCell struct {
	// key is the prefix's hash, but for its low 16 bits, which count the
	// prefix's limited responses (for the slip).
	key uint64
	// tat is when the prefix's bucket is full again, in ns since epoch.
	tat int64
}

const rrlCountMask = 1<<16 - 1

func newRRL(c RRLConfig, epoch time.Time) *rrl {
	n := 1 << bits.Len(uint((c.TableSize+2)/3-1)) // buckets: a power of two
	interval := int64(time.Second) / int64(c.Rate)
	r := &rrl{buckets: make([]rrlBucket, n), mask: uint64(n - 1), seed: maphash.MakeSeed(),
		interval: interval, tolerance: interval * int64(c.Burst), v4: c.IPv4Prefix, v6: c.IPv6Prefix,
		exempt: c.Exempt, epoch: epoch}
	if c.Slip > 0 {
		r.slip = uint16(c.Slip)
	}
	return r
}

// account counts a response to a at now and says what becomes of it.
func (r *rrl) account(a netip.Addr, now time.Time) rrlVerdict {
	if !a.IsValid() {
		return rrlPass // nobody to send it to but the transport's own peer
	}
	for _, p := range r.exempt {
		if p.Contains(a) {
			return rrlPass
		}
	}
	h := r.hash(a)
	tag := h &^ rrlCountMask
	t := int64(now.Sub(r.epoch))
	b := &r.buckets[h&r.mask]
	b.mu.Lock()
	c := &b.cells[0]
	found := c.key&^rrlCountMask == tag
	for i := 1; i < len(b.cells) && !found; i++ {
		if b.cells[i].key&^rrlCountMask == tag {
			c, found = &b.cells[i], true
		} else if b.cells[i].tat < c.tat {
			c = &b.cells[i]
		}
	}
	if !found {
		*c = rrlCell{key: tag, tat: t}
	}
	if next := max(c.tat, t) + r.interval; next-t <= r.tolerance {
		c.tat = next
		b.mu.Unlock()
		return rrlPass
	}
	n := uint16(c.key+1) & rrlCountMask
	c.key = tag | uint64(n)
	b.mu.Unlock()
	if r.slip != 0 && n%r.slip == 0 {
		return rrlSlip
	}
	return rrlDrop
}

// hash is the keyed hash of a's prefix: its family and masked address.
func (r *rrl) hash(a netip.Addr) uint64 {
	var k [17]byte
	n, bits := 17, r.v6
	if a.Is4() {
		a4 := a.As4()
		copy(k[1:], a4[:])
		k[0], n, bits = 4, 5, r.v4
	} else {
		a16 := a.As16()
		copy(k[1:], a16[:])
		k[0] = 6
	}
	full := 1 + bits/8
	if bits%8 != 0 {
		k[full] &= 0xff << (8 - bits%8)
		full++
	}
	clear(k[full:n])
	return maphash.Bytes(r.seed, k[:n])
}

// limit decides what becomes of the UDP response to req (parsed: the
// query could be parsed, else it gets a header-only error): a query whose
// server cookie verifies is never limited, any other is counted against
// its source prefix. The cookie is checked here, once, for the answer.
func (s *Server) limit(req *request, parsed bool, remote netip.Addr) rrlVerdict {
	now := s.now(req)
	if parsed && req.hasCookie && req.hasOPT && req.version == 0 && s.cookies != nil {
		s.checkCookie(req, now)
		if req.cookieVerdict.verified() {
			return rrlPass
		}
	}
	v := s.rrl.account(remote, now)
	switch v {
	case rrlSlip:
		s.m.rrlSlipped.Inc()
	case rrlDrop:
		s.m.rrlDropped.Inc()
	}
	return v
}
