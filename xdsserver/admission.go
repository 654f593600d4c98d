package xdsserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-sd/cairn/internal/durable"
)

// After a restart every subscriber reconnects at once (grpc-go's backoff
// starts at 1 s and resets on the first message), and when a server
// dies, or lets its subscribers go because it is stale, they reconnect
// at once to the survivors. Answering them all would spend the server
// on building and sending full views, while withdrawals wait. So a
// stream whose client holds a view (a reconnection: it names versions
// it holds) is admitted at most admitFraction of the expected
// subscriber count per admitWindow, and at least admitFloor, at all
// times; and after a restart every new stream is, until the count
// before the restart (kept on disk) has come back. The others are
// refused with UNAVAILABLE, which clients retry with backoff and
// jitter, keeping their views meanwhile (SPEC §4). A client that holds
// nothing is not held back outside a restart: it has nothing to route
// by, and a first deployment must not wait on a cap sized for a fleet
// it has not got yet. The expected count is the larger of the one kept
// from before the restart and the most streams this server has had
// open at once since: a survivor expects its own subscribers, and
// takes a dead server's share at 5% of that per 10 s (see
// docs/decisions.md).
const (
	admitWindow   = 10 * time.Second
	admitFraction = 0.05
	admitFloor    = 50
	// persistEvery is how often the count of open streams is written
	// down, when it changed.
	persistEvery = 10 * time.Second
)

// subscribers is the file that keeps the count of open streams across a
// restart.
type subscribers struct {
	Count int       `json:"subscribers"`
	At    time.Time `json:"at"`
}

// admission decides whether a new stream may open now.
type admission struct {
	now   func() time.Time
	start time.Time
	// expected is the count of streams before the restart: every stream
	// is capped while fewer than that have been admitted since. most
	// returns the most streams open at once since the start.
	expected int
	most     func() int

	mu       sync.Mutex
	window   int64 // index of the current window since start
	inWindow int   // capped streams admitted in it
	admitted int   // since start
}

func newAdmission(now func() time.Time, expected int, most func() int) *admission {
	return &admission{now: now, start: now(), expected: expected, most: most}
}

// perWindow is how many capped streams may open per admitWindow.
func (a *admission) perWindow() int {
	return max(int(admitFraction*float64(max(a.expected, a.most()))+0.999), admitFloor)
}

// admit reports whether a new stream may open, and counts it if so;
// held says its client holds a view (a reconnection).
func (a *admission) admit(held bool) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !held && a.admitted >= a.expected {
		a.admitted++ // a new client, past the restart's reconnection: no cap
		return true
	}
	w := int64(a.now().Sub(a.start) / admitWindow)
	if w != a.window {
		a.window, a.inWindow = w, 0
	}
	if a.inWindow >= a.perWindow() {
		return false
	}
	a.inWindow++
	a.admitted++
	return true
}

// loadSubscribers reads the count kept at path; a missing file is 0 (a
// first start: nothing to cap).
func loadSubscribers(path string) (int, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("xdsserver: reading the subscriber count: %w", err)
	}
	var s subscribers
	if err := json.Unmarshal(b, &s); err != nil || s.Count < 0 {
		return 0, fmt.Errorf("xdsserver: %s: not a subscriber count (%v)", path, err)
	}
	return s.Count, nil
}

// Run follows the published tables, bringing the streams' views up to
// date and waking the streams whose resources changed, until ctx is
// done; streams see no change while it is not running. It also writes
// the count of open streams (the most seen since the last write) to
// Config.SubscribersFile every persistEvery when it changed, so that the
// next start knows how many subscribers to expect; nothing at shutdown,
// when the streams are closing and the count of those about to reconnect
// is the one already written. With Config.LastSync set, it checks the
// store view's age every staleCheckEvery, and ends the streams of a
// stale server (stale.go). With Config.Outcomes set, it hands on what
// load reports said once a second.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.hub.run(ctx) })
	wg.Go(func() { s.gate.run(ctx, s.cfg.Now) })
	wg.Go(func() { s.followStaleness(ctx) })
	if s.cfg.Outcomes != nil {
		wg.Go(func() { s.forwardOutcomes(ctx) })
	}
	if s.cfg.SubscribersFile == "" {
		<-ctx.Done()
		return nil
	}
	t := time.NewTicker(persistEvery)
	defer t.Stop()
	last := -1
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			n, err := s.persist(last)
			if err != nil {
				s.log.Warn("keeping the xDS subscriber count", "err", err)
				continue
			}
			last = n
		}
	}
}

// persist writes the most streams open at once since the last call,
// unless it is last, and returns it.
func (s *Server) persist(last int) (int, error) {
	n := int(s.peak.Swap(s.open.Load()))
	if n == last {
		return n, nil
	}
	b, err := json.Marshal(subscribers{Count: n, At: s.cfg.Now().UTC()})
	if err != nil {
		return last, err
	}
	if err := durable.WriteFile(s.cfg.SubscribersFile, b, 0o600); err != nil {
		return last, err
	}
	return n, nil
}

// opened counts a stream that opened, and closed (to defer) one that
// closed.
func (s *Server) opened() (closed func()) {
	n := s.open.Add(1)
	for _, p := range []*atomic.Int64{&s.peak, &s.most} {
		for {
			m := p.Load()
			if n <= m || p.CompareAndSwap(m, n) {
				break
			}
		}
	}
	s.m.streams.Inc()
	s.m.opened.Inc()
	return func() {
		s.open.Add(-1)
		s.m.streams.Dec()
	}
}
