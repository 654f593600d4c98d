package dnsserver

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync/atomic"
	"time"
)

// EDNS Cookies (RFC 7873) with interoperable server cookies (RFC 9018).
// A client sends an 8-octet client cookie; the server answers with it and
// a server cookie it made for that client cookie and the client's address;
// when the client sends both back, the server cookie verifies only if the
// query really came from that address. Such a query is never rate-limited
// (rrl.go).
//
// A server cookie is 16 octets: version 1, three reserved octets (zero
// when made; as received when checked), a 32-bit timestamp in seconds,
// and the first 8 octets of SipHash-2-4, keyed with the secret, over the
// client cookie, version, reserved octets, timestamp and client address
// (4 or 16 octets). Any server given the same secret makes and accepts
// the same cookies, whatever its implementation.
//
// What a query gets:
//   - no COOKIE option: no COOKIE option;
//   - a malformed one (a client cookie other than 8 octets, a server
//     cookie other than 8 to 32): FORMERR (RFC 7873 §5.2.2);
//   - a client cookie only, or a server cookie that does not verify (made
//     with another secret, for another address or client cookie, altered,
//     of another version or length, more than an hour old or more than
//     five minutes ahead): a normal answer with a fresh server cookie —
//     never BADCOOKIE, which RFC 7873 §5.2.3–5.2.4 leaves to servers that
//     require cookies, and this one does not;
//   - a server cookie that verifies: a normal answer, exempt from rate
//     limiting, with the same server cookie, or a fresh one when it is
//     more than half an hour old or was made with the previous secret.

// cookieVerdict is what a query's COOKIE option was found to be.
type cookieVerdict uint8

const (
	cookieUnchecked  cookieVerdict = iota
	cookieMalformed                // FORMERR
	cookieClientOnly               // no server cookie: a fresh one is made
	cookieInvalid                  // a server cookie that does not verify: a fresh one is made
	cookieValid                    // verifies: echoed
	cookieRenew                    // verifies, but half an hour old or of the previous secret: a fresh one is made
)

// verified reports whether the query's server cookie verified.
func (v cookieVerdict) verified() bool { return v == cookieValid || v == cookieRenew }

const (
	clientCookieLen = 8
	serverCookieLen = 16 // ours: version, reserved, timestamp, hash
	maxCookieLen    = clientCookieLen + 32
	cookieVersion   = 1
	// RFC 9018 §4.3: a cookie is valid from five minutes ahead (clock
	// skew between replicas) to an hour old, and renewed past half an
	// hour.
	cookieMaxAge   = 3600
	cookieMaxAhead = 300
	cookieRenewAge = 1800
)

// cookieKeys holds the secrets server cookies are made and checked
// with, swapped whole when they are rolled (Server.SetCookieSecrets).
type cookieKeys struct {
	set atomic.Pointer[cookieSecrets]
}

// cookieSecrets is one set of secrets: the current one, and the previous
// one, accepted but never used to make a cookie.
type cookieSecrets struct {
	cur     sipKey
	prev    sipKey
	hasPrev bool
}

func newCookieKeys(c CookieConfig) *cookieKeys {
	var k cookieKeys
	k.set.Store(newCookieSecrets(c.Secret, c.PreviousSecret))
	return &k
}

// newCookieSecrets keys cur (nil: a random secret) and prev (nil: none).
// Both are cookieSecretSize octets (validated by the caller).
func newCookieSecrets(cur, prev []byte) *cookieSecrets {
	var k cookieSecrets
	var b [cookieSecretSize]byte
	if cur != nil {
		copy(b[:], cur)
	} else {
		_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	}
	k.cur = newSipKey(b)
	if prev != nil {
		copy(b[:], prev)
		k.prev, k.hasPrev = newSipKey(b), true
	}
	return &k
}

// SetCookieSecrets rolls the server-cookie secrets (RFC 9018 §5): from
// the next query on, cookies are made with cur and accepted when made
// with cur or prev (nil: none). To roll, give every replica the new
// secret with the old one as prev, and an hour later the new one alone.
// Each is 16 octets. It fails, changing nothing, when cookies are off.
func (s *Server) SetCookieSecrets(cur, prev []byte) error {
	if s.cookies == nil {
		return errors.New("dnsserver: cookies are off")
	}
	c := CookieConfig{Mode: ModeOn, Secret: cur, PreviousSecret: prev}
	if cur == nil {
		return errors.New("dnsserver: a cookie secret is required")
	}
	if err := c.validate(); err != nil {
		return err
	}
	s.cookies.set.Store(newCookieSecrets(cur, prev))
	return nil
}

// ParseCookieSecrets reads a cookie-secret file: the current secret, and
// optionally the previous one on a second line, each 32 hex digits. The
// error names the line and the rule.
func ParseCookieSecrets(b []byte) (cur, prev []byte, err error) {
	lines := strings.Fields(string(b))
	if len(lines) < 1 || len(lines) > 2 {
		return nil, nil, errors.New("want one secret, or the current and the previous, one a line")
	}
	for i, l := range lines {
		k, err := hex.DecodeString(l)
		if err != nil || len(k) != cookieSecretSize {
			return nil, nil, fmt.Errorf("line %d is not %d hex digits", i+1, 2*cookieSecretSize)
		}
		if i == 0 {
			cur = k
		} else {
			prev = k
		}
	}
	return cur, prev, nil
}

// check judges req's COOKIE option at now, for answer to act on.
func (k *cookieKeys) check(req *request, now time.Time) {
	set := k.set.Load()
	req.cookieNow = uint32(now.Unix())
	n := req.cookieLen
	switch {
	case n < clientCookieLen || n > clientCookieLen && n < clientCookieLen+8 || n > maxCookieLen:
		req.cookieVerdict = cookieMalformed
		return
	case n == clientCookieLen:
		req.cookieVerdict = cookieClientOnly
		return
	}
	req.cookieVerdict = cookieInvalid
	c := req.cookie[:n]
	if n != clientCookieLen+serverCookieLen || c[clientCookieLen] != cookieVersion {
		return // another server's kind of cookie
	}
	ts := binary.BigEndian.Uint32(c[clientCookieLen+4:])
	age := int32(req.cookieNow - ts) // serial arithmetic: the timestamp wraps in 2106
	if age > cookieMaxAge || age < -cookieMaxAhead {
		return
	}
	mac := binary.BigEndian.Uint64(c[clientCookieLen+8:])
	switch {
	case cookieHash(set.cur, c[:clientCookieLen], c[clientCookieLen:clientCookieLen+8], req.remote) == mac:
		req.cookieVerdict = cookieValid
		if age > cookieRenewAge {
			req.cookieVerdict = cookieRenew
		}
	case set.hasPrev && cookieHash(set.prev, c[:clientCookieLen], c[clientCookieLen:clientCookieLen+8], req.remote) == mac:
		req.cookieVerdict = cookieRenew
	}
}

// cookieHash is the MAC of a server cookie: SipHash-2-4 under k over the
// client cookie, the server cookie's first 8 octets (version, reserved,
// timestamp) and the client's address, read as the first 8 octets of its
// output (the hash's little-endian bytes, as RFC 9018's examples show).
func cookieHash(k sipKey, client, head []byte, ip netip.Addr) uint64 {
	var b [clientCookieLen + 8 + 16]byte
	copy(b[:], client)
	copy(b[clientCookieLen:], head)
	n := clientCookieLen + 8
	if ip.Is4() {
		a := ip.As4()
		n += copy(b[n:], a[:])
	} else if ip.IsValid() {
		a := ip.As16()
		n += copy(b[n:], a[:])
	}
	var out [8]byte
	binary.LittleEndian.PutUint64(out[:], k.sum24(b[:n]))
	return binary.BigEndian.Uint64(out[:])
}

// mint writes into dst a fresh server cookie for client (8 octets) and
// ip at ts, made with the current secret.
func (k *cookieKeys) mint(dst []byte, client []byte, ts uint32, ip netip.Addr) {
	set := k.set.Load()
	dst[0] = cookieVersion
	dst[1], dst[2], dst[3] = 0, 0, 0
	binary.BigEndian.PutUint32(dst[4:], ts)
	binary.BigEndian.PutUint64(dst[8:], cookieHash(set.cur, client, dst[:8], ip))
}

// cookieOpt puts the answer's COOKIE option in o: the client cookie and
// the server cookie, echoed or fresh, as check judged; none for a query
// without one (or a malformed one, answered FORMERR without it).
func (k *cookieKeys) cookieOpt(req *request, o *opt) {
	switch req.cookieVerdict {
	case cookieValid:
		copy(o.cookie[:], req.cookie[:clientCookieLen+serverCookieLen])
	case cookieClientOnly, cookieInvalid, cookieRenew:
		copy(o.cookie[:clientCookieLen], req.cookie[:clientCookieLen])
		k.mint(o.cookie[clientCookieLen:], req.cookie[:clientCookieLen], req.cookieNow, req.remote)
	default:
		return
	}
	o.hasCookie = true
}

// checkCookie judges req's cookie at now (Config.Now) and counts it.
func (s *Server) checkCookie(req *request, now time.Time) {
	s.cookies.check(req, now)
	if c := s.m.cookies[req.cookieVerdict]; c != nil { // check never leaves it unchecked
		c.Inc()
	}
}
