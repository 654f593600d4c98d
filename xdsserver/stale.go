package xdsserver

import (
	"context"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/internal/agentview"
)

// A server whose view of the store has stopped moving (past
// Config.StaleAfter without a leader's word: the DNS server's
// serve-stale rule) lets its subscribers go, so that they reconnect to a
// fresh server (SPEC §4): its streams end with UNAVAILABLE, and a new
// stream whose client holds a view is refused the same way; the client
// keeps that view meanwhile, and keeps it where no server is fresh. A
// client that holds nothing is served the stale view, since it has
// nothing else to route by (SPEC §7: a server restarted without quorum
// answers from its kept table): its stream is told so (agentview.StaleAgeKey
// in its header) and ends once the server is fresh again, so that no stream
// outlives the state it was admitted in. See docs/decisions.md.

// staleCheckEvery bounds how often the server looks at its view's age:
// a function call, and a wake-up of every stream only when the answer
// changes.
const staleCheckEvery = 100 * time.Millisecond

// freshness is the server's staleness as last checked, and a channel
// closed when it next changes, which every stream waits on.
type freshness struct {
	mu      sync.Mutex
	stale   bool
	age     time.Duration
	changed chan struct{}
}

func newFreshness() *freshness { return &freshness{changed: make(chan struct{})} }

// watch returns the staleness as last checked, the view's age then, and
// a channel closed at its next change.
func (f *freshness) watch() (stale bool, age time.Duration, changed <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stale, f.age, f.changed
}

// set records a check; it reports whether the staleness changed, and
// wakes the streams if so.
func (f *freshness) set(stale bool, age time.Duration) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.age = age
	if stale == f.stale {
		return false
	}
	f.stale = stale
	close(f.changed)
	f.changed = make(chan struct{})
	return true
}

// staleness says whether the server's view of the store is stale at
// now, and its age: older than StaleAfter (a view never synced counts
// from the server's start), or a table restored from disk that the
// store has not caught up with since.
func (s *Server) staleness(now time.Time) (bool, time.Duration) {
	if s.cfg.LastSync == nil {
		return false, 0
	}
	last := s.cfg.LastSync()
	if last.IsZero() {
		last = s.started
	}
	age := max(0, now.Sub(last))
	return age > s.cfg.StaleAfter || s.cfg.Restored != nil && s.cfg.Restored(), age
}

// checkStale looks at the view's age and, on a change, wakes every
// stream to end those admitted in the other state.
func (s *Server) checkStale() {
	stale, age := s.staleness(s.cfg.Now())
	if !s.fresh.set(stale, age) {
		return
	}
	if stale {
		s.m.stale.Set(1)
		s.log.Warn("the store view is stale: ending xDS streams so that subscribers move to a fresh server", "age", age.Round(time.Millisecond), "stale_after", s.cfg.StaleAfter)
	} else {
		s.m.stale.Set(0)
		s.log.Info("the store view is fresh again: admitting xDS streams", "age", age.Round(time.Millisecond))
	}
}

// followStaleness checks the view's age every staleCheckEvery until ctx
// is done.
func (s *Server) followStaleness(ctx context.Context) {
	if s.cfg.LastSync == nil {
		return
	}
	t := time.NewTicker(staleCheckEvery)
	defer t.Stop()
	for {
		s.checkStale()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// staleErr is how a stream ends, or is refused, on a stale server: the
// age in the trailer, the reason in the message.
func (s *Server) staleErr(ctx context.Context, age time.Duration, refused bool) error {
	_ = grpc.SetTrailer(ctx, metadata.Pairs(agentview.StaleAgeKey, agentview.FormatStaleAge(age)))
	verb := "ending this stream"
	if refused {
		verb = "refusing streams of clients that hold a view"
		s.m.refused.WithLabelValues("stale").Inc()
	} else {
		s.m.letGo.WithLabelValues("stale").Inc()
	}
	return grpcstatus.Errorf(codes.Unavailable,
		"xdsserver: this server's view of the store is stale (%s old, past --stale-after %s: no quorum); %s so that it moves to a fresh server; keep the view held and retry",
		age.Round(time.Millisecond), s.cfg.StaleAfter, verb)
}

// freshErr ends a stream served stale once the server is fresh again:
// its client reconnects and is sent what changed since.
func (s *Server) freshErr() error {
	s.m.letGo.WithLabelValues("fresh_again").Inc()
	return grpcstatus.Error(codes.Unavailable, "xdsserver: this stream was served a stale view and the server is fresh again; reconnect")
}

// markStale tells a client that holds nothing and is served the stale
// view how old it is (the stream's header).
func markStale(ctx context.Context, age time.Duration) {
	_ = grpc.SetHeader(ctx, metadata.Pairs(agentview.StaleAgeKey, agentview.FormatStaleAge(age)))
}
