package xdsserver

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// serveLoop runs one stream, whose first request (first) has come,
// until the client closes it, the server stops, or the server's
// staleness changes from what it was when the stream was admitted
// (stale; watch is closed at its next change, see stale.go): one
// goroutine receives; this one hands each request to request and each
// wake-up (a resource the stream watches changed) to changed, so that
// requests and changes are handled in one order, and a stream's
// requests in the order sent. A wake-up is never lost to a request
// answered in between: changed sends every open type's differences from
// what the stream last sent, whatever woke it.
func serveLoop[Req any](ctx context.Context, pe *peer, first Req, stale bool, watch <-chan struct{},
	recv func() (Req, error), request func(Req) error, changed func() error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := request(first); err != nil {
		return err
	}
	reqs := make(chan Req)
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	// held fires when admissions held back are due (pe.lane.due); made
	// the first time some are, as most streams never hold one back.
	var held *time.Timer
	var heldC <-chan time.Time
	defer func() {
		if held != nil {
			held.Stop()
		}
	}()
	var armed time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return endOf(err)
		case <-watch:
			var age time.Duration
			var cur bool
			cur, age, watch = pe.s.fresh.watch()
			switch {
			case cur && !stale:
				return pe.s.staleErr(ctx, age, false)
			case !cur && stale:
				return pe.s.freshErr()
			}
		case req := <-reqs:
			if err := request(req); err != nil {
				return err
			}
		case <-pe.sig.ch:
			if err := changed(); err != nil {
				return err
			}
		case <-heldC:
			armed = time.Time{}
			pe.lane.due = time.Time{}
			if err := changed(); err != nil {
				return err
			}
		}
		if due := pe.lane.due; !due.Equal(armed) {
			if held != nil {
				held.Stop()
			}
			if armed = due; !due.IsZero() {
				if held == nil {
					held = time.NewTimer(max(0, due.Sub(pe.s.cfg.Now())))
					heldC = held.C
				} else {
					held.Reset(max(0, due.Sub(pe.s.cfg.Now())))
				}
			}
		}
	}
}

// peer is what every stream knows of its subscriber, whatever its
// protocol: the node and place its first request named, and its
// registration with the hub.
type peer struct {
	s     *Server
	node  *corev3.Node
	place place // as the node declared it
	nonce uint64
	sig   *signal // woken when a resource the stream watches changes
	// mem is the stream's registration with the hub (at its first
	// request): nil until then.
	mem  *member
	book *ackBook
	// types is the resource types the stream asked for (typeSeen).
	types map[string]struct{}
	// tracks says the hub records what the stream is woken for (member).
	tracks bool
	// lane holds back admissions of assignments (endpoints added,
	// weights changed) while withdrawals go at once. queued (under the
	// gate's lock) says the stream waits in the gate's queue; granted
	// that the gate handed it a token.
	lane    lane
	queued  bool
	granted atomic.Bool
	// allow says which services' resources the stream's token may see:
	// those of others are, to it, resources that do not exist.
	allow allowFunc
	// sentRev is the highest store revision of a table the stream sent
	// anything from: it sends nothing from an older one (a view never
	// goes back on one stream).
	sentRev uint64
}

func newPeer(s *Server) peer { return peer{s: s, sig: newSignal()} }

// begin handles what every request starts with: the first one names the
// node, whose locality is the stream's place from then on, and
// registers the stream with the hub. It returns the index of the
// request's type, or false for a type cairn does not serve (never
// answered, as the protocol allows: the client's does-not-exist timer
// runs out).
func (pe *peer) begin(node *corev3.Node, typeURL string) (int, bool, error) {
	if pe.node == nil && node != nil {
		pe.node = node
		pe.place = place{region: node.GetLocality().GetRegion(), zone: node.GetLocality().GetZone()}
	}
	if pe.mem == nil {
		m, err := pe.s.hub.join(pe.place, pe.sig, pe.tracks)
		if err != nil {
			return 0, false, grpcstatus.Errorf(codes.Internal, "xdsserver: building resources: %v", err)
		}
		pe.mem = m
		pe.book = pe.s.books.open(m)
	}
	if err := pe.typeSeen(typeURL); err != nil {
		return 0, false, err
	}
	i, ok := typeIndex(typeURL)
	if !ok {
		pe.s.log.Debug("xDS request for a type not served", "type", typeURL, "node", pe.node.GetId())
	}
	return i, ok, nil
}

// leave unregisters the stream from the hub.
func (pe *peer) leave() {
	if pe.mem != nil {
		pe.s.hub.leave(pe.mem)
		pe.s.books.close(pe.book)
	}
}

// older reports whether a view of store revision rev is older than one
// the stream already sent from; if so, the stream is woken once the
// view passes it.
func (pe *peer) older(rev uint64) bool {
	if rev >= pe.sentRev {
		return false
	}
	pe.waitRev(pe.sentRev)
	return true
}

// waitRev has the stream woken once its view is built from a
// table of store revision rev or later.
func (pe *peer) waitRev(rev uint64) { pe.s.hub.waitRev(pe.mem, rev) }

// view returns the view the stream is served from (nil before its
// first request).
func (pe *peer) view() *view {
	if pe.mem == nil {
		return nil
	}
	return pe.s.hub.view(pe.mem)
}

// nextNonce returns the nonce of the stream's next response.
func (pe *peer) nextNonce() string {
	pe.nonce++
	return strconv.FormatUint(pe.nonce, 10)
}

// endOf is what a stream returns when receiving failed: nothing when
// the client closed it.
func endOf(err error) error {
	if errors.Is(err, io.EOF) || grpcstatus.Code(err) == codes.Canceled {
		return nil
	}
	return err
}

// serve admits a new stream of either protocol and runs it until it
// ends: the checks every stream passes, its count, and its loop. Its
// first request decides what the stream is (holds: its client names
// versions it holds, a reconnection): a stale server refuses a client
// that holds a view and serves one that holds nothing (stale.go), and
// the admission cap holds reconnections back.
func serve[Req any](s *Server, ctx context.Context, pe *peer,
	recv func() (Req, error), holds func(Req) bool, request func(Req) error, changed func() error) error {
	allow, identity, err := s.authorize(ctx)
	if err != nil {
		return err
	}
	pe.allow = allow
	release, err := s.claim(ctx, identity)
	if err != nil {
		return err
	}
	defer release()
	if err := s.ready(); err != nil {
		return err
	}
	first, err := recv()
	if err != nil {
		return endOf(err)
	}
	held := holds(first)
	stale, age, watch := s.fresh.watch()
	if stale && held {
		return s.staleErr(ctx, age, true)
	}
	if err := s.admit(held); err != nil {
		return err
	}
	if stale {
		markStale(ctx, age)
	}
	defer s.opened()()
	defer pe.leave()
	return serveLoop(ctx, pe, first, stale, watch, recv, request, changed)
}
