package xdsserver

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	"google.golang.org/grpc/codes"
	grpcpeer "google.golang.org/grpc/peer"
	grpcstatus "google.golang.org/grpc/status"
)

// The caps' defaults (Config.Limits; docs/decisions.md says why these).
const (
	// DefaultMaxNames is how many names one stream may watch, all types
	// together: an Envoy watching every cluster of 2,000 services with
	// two ports each stays under it.
	DefaultMaxNames = 4096
	// DefaultMaxTypes is how many resource types one stream may ask for,
	// served or not: cairn serves four, Envoy asks for a few more.
	DefaultMaxTypes = 16
	// DefaultMaxStreamsPerToken is how many streams (ADS and LRS) one
	// token may hold open with ACLs on: a fleet sharing one token fits.
	DefaultMaxStreamsPerToken = 10000
	// DefaultMaxStreamsPerAddress is how many one peer address may hold
	// open with ACLs off: the proxies of one host, or behind one NAT.
	DefaultMaxStreamsPerAddress = 1000
)

// Limits bound what one client can make the server do (SPEC §4: "each
// stream's cost is bounded"): a stream past a cap ends, or is refused,
// with RESOURCE_EXHAUSTED naming the cap. Zero takes the default; a
// negative value turns the cap off. The places a table change is
// computed for need no cap: they are the table's own localities, not
// the clients' (see fold).
type Limits struct {
	MaxNames             int
	MaxTypes             int
	MaxStreamsPerToken   int
	MaxStreamsPerAddress int
}

func (l *Limits) defaults() {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&l.MaxNames, DefaultMaxNames)
	set(&l.MaxTypes, DefaultMaxTypes)
	set(&l.MaxStreamsPerToken, DefaultMaxStreamsPerToken)
	set(&l.MaxStreamsPerAddress, DefaultMaxStreamsPerAddress)
}

// capErr is the refusal of a stream past a cap: RESOURCE_EXHAUSTED, with
// what was asked, the cap and the flag that sets it, counted by cap.
func (s *Server) capErr(reason, flag string, cap int, what string) error {
	s.m.refused.WithLabelValues(reason).Inc()
	return grpcstatus.Errorf(codes.ResourceExhausted, "xdsserver: %s; the cap is %d (%s)", what, cap, flag)
}

// clients counts the open streams of each client: its token's identity
// with ACLs on, its address with them off.
type clients struct {
	mu   sync.Mutex
	open map[string]int
}

// claim counts a new stream of the client behind ctx (identity: its
// token's, "" with ACLs off) and returns what ends it, or refuses it
// when the client holds its cap of streams already.
func (s *Server) claim(ctx context.Context, identity string) (release func(), err error) {
	key, reason, flag, cap := "token "+identity, "streams_per_token", "--xds-max-streams-per-token", s.cfg.Limits.MaxStreamsPerToken
	if identity == "" {
		key, reason, flag, cap = "address "+peerAddress(ctx), "streams_per_address", "--xds-max-streams-per-address", s.cfg.Limits.MaxStreamsPerAddress
	}
	if cap < 0 {
		return func() {}, nil
	}
	c := &s.clients
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[key] >= cap {
		return nil, s.capErr(reason, flag, cap, fmt.Sprintf("%s holds %d streams open", key, c.open[key]))
	}
	if c.open == nil {
		c.open = map[string]int{}
	}
	c.open[key]++
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.open[key]--; c.open[key] <= 0 {
			delete(c.open, key)
		}
	}, nil
}

// peerAddress names the client behind a stream by its address, without
// its port (every connection from one host has another port): an IPv4
// address (an IPv4-mapped IPv6 one unmapped), or an IPv6 address's /64,
// which one host or one LAN holds whole.
func peerAddress(ctx context.Context) string {
	p, ok := grpcpeer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	ap, err := netip.ParseAddrPort(p.Addr.String())
	if err != nil {
		return p.Addr.String()
	}
	a := ap.Addr().Unmap()
	if a.Is4() {
		return a.String()
	}
	pfx, _ := a.WithZone("").Prefix(64)
	return pfx.String()
}

// typeSeen counts a resource type a stream asked for, and refuses the
// stream past the cap on types.
func (pe *peer) typeSeen(url string) error {
	if _, ok := pe.types[url]; ok || pe.s.cfg.Limits.MaxTypes < 0 {
		return nil
	}
	if len(pe.types) >= pe.s.cfg.Limits.MaxTypes {
		return pe.s.capErr("types_per_stream", "--xds-max-types-per-stream", pe.s.cfg.Limits.MaxTypes,
			fmt.Sprintf("the stream asked for %d resource types", len(pe.types)+1))
	}
	if pe.types == nil {
		pe.types = map[string]struct{}{}
	}
	pe.types[url] = struct{}{}
	return nil
}

// namesFit refuses a stream that would watch more names than the cap,
// all types together, were type i's count of names to become n.
func (pe *peer) namesFit(i, n int, counts [numTypes]int) error {
	capN := pe.s.cfg.Limits.MaxNames
	if capN < 0 {
		return nil
	}
	total := n
	for j, c := range counts {
		if j != i {
			total += c
		}
	}
	if total > capN {
		return pe.s.capErr("names_per_stream", "--xds-max-names-per-stream", capN,
			fmt.Sprintf("the stream would watch %d names", total))
	}
	return nil
}
