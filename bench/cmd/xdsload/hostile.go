package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// hostile is -hostile streams that mean harm (issue 28): each declares a
// made-up locality of its own (a place no honest subscriber is in),
// subscribes to -hostile-real real assignment names and then
// -hostile-names junk ones (names of nothing, distinct per stream),
// -hostile-batch at a time, each batch sent once the last is answered,
// and then holds the stream open, acknowledging nothing. The first
// -hostile-sotw of them speak state of the world (each request names
// every name so far, with the last response's nonce: that is how state
// of the world subscribes, so those streams acknowledge as they grow).
// They come from their own source address (-hostile-src), so that a cap
// per peer address counts them apart from the honest subscribers.
//
// When the server ends a stream (a gRPC status: a cap, admission), the
// refusal is counted by code and message, and the stream reconnects
// after a backoff (full jitter, 100 ms doubling to 5 s, reset once a
// stream is answered), subscribes again to the names last accepted, and
// goes on growing in half the batch, until a batch of one is refused:
// so it sits at whatever cap there is. A stream refused before any
// answer 3 times in a row counts as settled (kept out), and goes on
// trying. Every loop ends with the run.
type hostile struct {
	o     options
	conns []*grpc.ClientConn
	salt  uint64
	real  [][]int // by stream: the services whose assignments it watches
	strs  []*hostileStream
	wg    sync.WaitGroup
	stop  context.CancelFunc

	mu       sync.Mutex
	refusals map[string]*refusal // by code and message, digits folded

	settled    atomic.Int64
	allSettled chan struct{}
	reconnects atomic.Int64
	responses  atomic.Int64
}

// hostileStream is one hostile stream's state across its reconnections.
type hostileStream struct {
	id           int
	sotw         bool
	region, zone string
	want         int // names it would hold: real, then junk
	// limit is the most names it will subscribe to: want, until a
	// batch of one is refused; safe the most a stream of it had
	// answered; batch what it grows by. Only its goroutine writes them.
	limit, safe, batch int
	// held is the names the open stream had answered (0 while none is
	// open); settled that it reached its limit once.
	held    atomic.Int64
	settled bool
}

// refusal is one kind of stream ending, and how often it came.
type refusal struct {
	code, msg string // msg with digit runs folded to #
	example   string
	n         int64
}

// answerTimeout bounds the wait for the answer to one request: a stream
// not answered in time is ended and counted as refused.
const answerTimeout = 60 * time.Second

// newHostile dials the hostile connections and picks each stream's real
// names and place.
func newHostile(o options, rng *rand.Rand, grpcAddr string) (*hostile, error) {
	h := &hostile{o: o, salt: rng.Uint64(), refusals: map[string]*refusal{}, allSettled: make(chan struct{})}
	src, err := netip.ParseAddr(o.hostileSrc)
	if o.hostileSrc != "" && err != nil {
		return nil, fmt.Errorf("-hostile-src %q: %w", o.hostileSrc, err)
	}
	for range o.hostileConns {
		cc, err := dialFrom(grpcAddr, src)
		if err != nil {
			h.close()
			return nil, err
		}
		h.conns = append(h.conns, cc)
	}
	for i := range o.hostile {
		s := &hostileStream{id: i, sotw: i < o.hostileSotw, want: o.hostileReal + o.hostileNames, batch: o.hostileBatch}
		s.limit = s.want
		// Made up, and distinct per stream: the id is in the zone.
		s.region = fmt.Sprintf("rg-%08x", rng.Uint32())
		s.zone = fmt.Sprintf("%s-z%d-%04x", s.region, i, rng.Uint32()&0xffff)
		h.strs = append(h.strs, s)
		h.real = append(h.real, rng.Perm(o.services)[:o.hostileReal])
	}
	return h, nil
}

// dialFrom is xdstest.Dial from source address src (any when invalid):
// the whole of 127.0.0.0/8 is the loopback on Linux, so a bench can
// stand for clients on many hosts.
func dialFrom(addr string, src netip.Addr) (*grpc.ClientConn, error) {
	if !src.IsValid() {
		return xdstest.Dial(addr)
	}
	d := &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(src, 0))}
	return xdstest.Dial(addr, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", a)
	}))
}

// honestSrc returns the source address of honest connection i: one of
// -honest-srcs addresses 127.0.1.1, 127.0.1.2, …, or any when 0.
func honestSrc(o options, i int) netip.Addr {
	if o.honestSrcs == 0 {
		return netip.Addr{}
	}
	n := i%o.honestSrcs + 1
	return netip.AddrFrom4([4]byte{127, 0, byte(1 + n/256), byte(n % 256)})
}

// startHostile opens the hostile streams, and waits until each has
// reached its names (or a cap), or -hostile-settle has passed. They run
// until close.
// serverRSS returns the server's resident set once they have.
func startHostile(ctx context.Context, o options, addr string, serverRSS func() (uint64, error)) (*hostile, *hostileReport, error) {
	// A source of its own: the honest subscriptions and changes are the
	// same with and without hostile streams.
	h, err := newHostile(o, rand.New(rand.NewPCG(o.seed, 28)), addr)
	if err != nil {
		return nil, nil, err
	}
	cpu0, t0 := selfCPU(), time.Now()
	hctx, stop := context.WithCancel(ctx)
	h.stop = stop
	for _, s := range h.strs {
		cc := h.conns[s.id%len(h.conns)]
		h.wg.Go(func() { h.run(hctx, cc, s) })
	}
	t := time.NewTimer(o.hostileSettle)
	defer t.Stop()
	select {
	case <-h.allSettled:
	case <-t.C:
	case <-ctx.Done():
		h.close()
		return nil, nil, ctx.Err()
	}
	r := &hostileReport{SettleSeconds: time.Since(t0).Seconds(), Settled: h.settled.Load(), SetupCPUSeconds: (selfCPU() - cpu0).Seconds()}
	m, err := serverRSS()
	if err != nil {
		h.close()
		return nil, nil, err
	}
	r.RSSMiB = mibOf(m)
	return h, r, nil
}

// close stops the streams, waits for them, and closes the connections.
// It may be called more than once.
func (h *hostile) close() {
	if h.stop != nil {
		h.stop()
	}
	h.wg.Wait()
	for _, cc := range h.conns {
		cc.Close()
	}
}

// name returns name j of stream s: its real names first, then junk.
func (h *hostile) name(s *hostileStream, j int) string {
	if j < len(h.real[s.id]) {
		return resourceName(h.real[s.id][j])
	}
	return fmt.Sprintf("junk-%x-%d-%d.bench:grpc", h.salt&0xffffff, s.id, j)
}

func (h *hostile) run(ctx context.Context, cc *grpc.ClientConn, s *hostileStream) {
	rng := rand.New(rand.NewPCG(h.salt, uint64(s.id)))
	wait := 100 * time.Millisecond
	shut := 0 // attempts in a row refused before any answer
	for {
		answered, err := h.attempt(ctx, cc, s)
		s.held.Store(0)
		if ctx.Err() != nil {
			return
		}
		h.refused(err)
		h.reconnects.Add(1)
		if answered {
			wait, shut = 100*time.Millisecond, 0
		} else if shut++; shut == settleRefusals {
			// Kept out (a cap on streams or places, admission): as
			// settled as it gets; it goes on trying.
			h.settle(s)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(rng.Int64N(int64(wait)) + 1)):
		}
		wait = min(2*wait, 5*time.Second)
	}
}

// settleRefusals is how many attempts in a row refused before any
// answer settle a stream: the server keeps it out, and the honest
// streams need not wait for it.
const settleRefusals = 3

// settle counts s settled, once: it reached its names or a cap, or the
// server keeps it out. Only s's goroutine calls it.
func (h *hostile) settle(s *hostileStream) {
	if s.settled {
		return
	}
	s.settled = true
	if h.settled.Add(1) == int64(len(h.strs)) {
		close(h.allSettled)
	}
}

// refused counts a stream's end.
func (h *hostile) refused(err error) {
	// The status itself, not its wrapping (xdstest's "receiving: …").
	st := grpcstatus.Convert(err)
	var gs interface{ GRPCStatus() *grpcstatus.Status }
	if errors.As(err, &gs) {
		st = gs.GRPCStatus()
	}
	code, msg := st.Code().String(), st.Message()
	key := code + " " + digits.ReplaceAllString(msg, "#")
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.refusals[key]
	if r == nil {
		r = &refusal{code: code, msg: digits.ReplaceAllString(msg, "#"), example: msg}
		h.refusals[key] = r
	}
	r.n++
}

var digits = regexp.MustCompile(`[0-9]+`)

// attempt opens one stream of s, subscribes, and holds it until the
// server ends it or ctx is done; it returns whether the server answered
// it, and why it ended.
func (h *hostile) attempt(ctx context.Context, cc *grpc.ClientConn, s *hostileStream) (answered bool, err error) {
	var recv sync.WaitGroup
	defer recv.Wait() // after cancel, below: it ends the receiver
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	node := &corev3.Node{Id: fmt.Sprintf("hostile-%d", s.id), Locality: &corev3.Locality{Region: s.region, Zone: s.zone}}
	var c conversation
	if s.sotw {
		c, err = openSotw(ctx, cc, node)
	} else {
		c, err = openDelta(ctx, cc, node)
	}
	if err != nil {
		return false, err
	}
	// The receiver: tells of each response (at most one pending) and of
	// the end.
	got := make(chan struct{}, 1)
	ended := make(chan error, 1)
	recv.Go(func() {
		for {
			if err := c.recv(); err != nil {
				ended <- err
				return
			}
			h.responses.Add(1)
			select {
			case got <- struct{}{}:
			default:
			}
		}
	})
	// ask sends the names [from, to) and waits for an answer.
	ask := func(from, to int) error {
		select {
		case <-got: // a push that came before: not the answer
		default:
		}
		names := make([]string, 0, to-from)
		for j := from; j < to; j++ {
			names = append(names, h.name(s, j))
		}
		if err := c.send(names); err != nil {
			cancel() // ended or broken: the receiver says why, or that it was cancelled
			return <-ended
		}
		t := time.NewTimer(answerTimeout)
		defer t.Stop()
		select {
		case <-got:
			return nil
		case err := <-ended:
			return err
		case <-t.C:
			return grpcstatus.Errorf(codes.DeadlineExceeded, "xdsload: no answer within %s", answerTimeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// The first request: the real names (an honest-looking start).
	n := min(len(h.real[s.id]), s.limit)
	if err := ask(0, n); err != nil {
		return false, err
	}
	answered = true
	s.held.Store(int64(n))
	// Back to what was last accepted, -hostile-batch at a time, then on
	// growing by the stream's batch.
	for n < s.limit {
		b := s.batch
		if n < s.safe {
			b = min(h.o.hostileBatch, s.safe-n)
		}
		next := min(n+b, s.limit)
		if err := ask(n, next); err != nil {
			// UNAVAILABLE says "later" (admission, a stale server), not
			// "too many": only other refusals change what is tried.
			if ctx.Err() == nil && grpcstatus.Code(err) != codes.Unavailable {
				switch {
				case n < s.safe: // refused what was accepted before: less now
					s.safe = n
				case next-n <= 1: // a single name more refused: stay
					s.limit = n
				default: // grow by half as much
					s.batch = max(1, (next-n)/2)
				}
			}
			return true, err
		}
		n = next
		s.safe = max(s.safe, n)
		s.held.Store(int64(n))
	}
	h.settle(s)
	select {
	case err := <-ended:
		return true, err
	case <-ctx.Done():
		return true, ctx.Err()
	}
}

// conversation is one stream of either protocol, as a hostile stream
// uses it: send subscribes to more names; recv reads one response.
type conversation struct {
	send func(names []string) error
	recv func() error
}

// openDelta opens a delta stream: each request subscribes to the names
// it adds.
func openDelta(ctx context.Context, cc *grpc.ClientConn, node *corev3.Node) (conversation, error) {
	st, err := xdstest.Open(ctx, cc, xdstest.Options{Node: node})
	if err != nil {
		return conversation{}, err
	}
	return conversation{
		send: func(names []string) error { return st.Subscribe(resourcev3.EndpointType, names, nil) },
		recv: func() error { _, err := st.Recv(); return err },
	}, nil
}

// openSotw opens a state-of-the-world stream: each request names every
// name so far and the last response's nonce and version.
func openSotw(ctx context.Context, cc *grpc.ClientConn, node *corev3.Node) (conversation, error) {
	st, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		return conversation{}, fmt.Errorf("opening a state-of-the-world stream: %w", err)
	}
	var mu sync.Mutex
	var nonce, version string
	var all []string
	first := true
	return conversation{
		send: func(names []string) error {
			all = append(all, names...)
			req := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: all}
			if first {
				req.Node, first = node, false
			}
			mu.Lock()
			req.ResponseNonce, req.VersionInfo = nonce, version
			mu.Unlock()
			return st.Send(req)
		},
		recv: func() error {
			resp, err := st.Recv()
			if err != nil {
				return err
			}
			mu.Lock()
			nonce, version = resp.Nonce, resp.VersionInfo
			mu.Unlock()
			return nil
		},
	}, nil
}

// hostileReport is what the hostile streams did.
type hostileReport struct {
	Streams         int             `json:"streams"`
	Sotw            int             `json:"sotw"`
	Conns           int             `json:"conns"`
	Src             string          `json:"src"`
	Real            int             `json:"real_names"`
	Junk            int             `json:"junk_names"`
	Batch           int             `json:"batch"`
	Settled         int64           `json:"settled"` // streams that reached their names (or the cap) before the honest ones opened
	SettleSeconds   float64         `json:"settle_seconds"`
	HeldAtChanges   int64           `json:"names_held_at_changes"`
	HeldAfter       int64           `json:"names_held_after"`
	OpenAtChanges   int             `json:"open_at_changes"`
	Capped          int             `json:"capped"` // streams that stopped below their names: a batch of one refused
	Reconnects      int64           `json:"reconnects"`
	Responses       int64           `json:"responses"`
	Refusals        []refusalReport `json:"refusals"`
	SetupCPUSeconds float64         `json:"generator_setup_cpu_s"`
	RSSMiB          float64         `json:"server_rss_hostile_mib"`
}

type refusalReport struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Example string `json:"example"`
	Count   int64  `json:"count"`
}

// held returns the names the open hostile streams had answered, and how
// many were open.
func (h *hostile) held() (names int64, open int) {
	for _, s := range h.strs {
		if n := s.held.Load(); n > 0 {
			names += n
			open++
		}
	}
	return names, open
}

// report fills what the streams did; call it once they have stopped.
func (h *hostile) report(r *hostileReport) {
	r.Streams, r.Sotw, r.Conns, r.Src = h.o.hostile, h.o.hostileSotw, h.o.hostileConns, h.o.hostileSrc
	r.Real, r.Junk, r.Batch = h.o.hostileReal, h.o.hostileNames, h.o.hostileBatch
	r.Reconnects, r.Responses = h.reconnects.Load(), h.responses.Load()
	for _, s := range h.strs {
		if s.limit < s.want {
			r.Capped++
		}
	}
	h.mu.Lock()
	for _, f := range h.refusals {
		r.Refusals = append(r.Refusals, refusalReport{Code: f.code, Message: f.msg, Example: f.example, Count: f.n})
	}
	h.mu.Unlock()
	slices.SortFunc(r.Refusals, func(a, b refusalReport) int { return int(b.Count - a.Count) })
}

func (r *hostileReport) print() {
	fmt.Printf("\nHostile: %d streams (%d state of the world) over %d connections from %s, each a made-up locality, %d real + %d junk names in batches of %d; %d of %d settled in %.1f s; at the changes %s names held on %d open streams, after %s; %d capped below their names; %d reconnections; server RSS with them %.0f MiB; generator CPU subscribing %.1f s.\n",
		r.Streams, r.Sotw, r.Conns, cmpStr(r.Src, "any"), r.Real, r.Junk, r.Batch, r.Settled, r.Streams, r.SettleSeconds,
		thousands(r.HeldAtChanges), r.OpenAtChanges, thousands(r.HeldAfter), r.Capped, r.Reconnects, r.RSSMiB, r.SetupCPUSeconds)
	if len(r.Refusals) == 0 {
		fmt.Println("Hostile refusals: none.")
		return
	}
	fmt.Println("Hostile refusals (streams ended by the server, by code and message, digits as #):")
	for _, f := range r.Refusals {
		fmt.Printf("- %d × %s %q (e.g. %q)\n", f.Count, f.Code, f.Message, f.Example)
	}
}

func cmpStr(s, dflt string) string {
	if s == "" {
		return dflt
	}
	return s
}

// thousands formats n with commas.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
