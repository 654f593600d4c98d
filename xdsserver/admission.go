package xdsserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync"
	"time"

	"github.com/cairn-sd/cairn/durable"
)

// After a restart every subscriber reconnects at once (grpc-go's backoff
// starts at 1 s and resets on the first message). Answering them all
// would spend the restarted server on building and sending full views,
// while withdrawals wait. So, for as long as it takes the expected
// subscribers to come back, new streams are admitted at most
// admitFraction of the count before the restart (kept on disk) per
// admitWindow, and at least admitFloor; the others are refused with
// UNAVAILABLE, which clients retry with backoff and jitter (SPEC §4).
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
	// expected is the count of streams before the restart; capped while
	// fewer than that have been admitted since.
	expected, perWindow int

	mu       sync.Mutex
	window   int64 // index of the current window since start
	inWindow int   // streams admitted in it
	admitted int   // since start
}

func newAdmission(now func() time.Time, expected int) *admission {
	return &admission{now: now, start: now(), expected: expected,
		perWindow: max(int(admitFraction*float64(expected)+0.999), admitFloor)}
}

// admit reports whether a new stream may open, and counts it if so.
func (a *admission) admit() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.admitted >= a.expected {
		a.admitted++ // past the reconnection: no cap
		return true
	}
	w := int64(a.now().Sub(a.start) / admitWindow)
	if w != a.window {
		a.window, a.inWindow = w, 0
	}
	if a.inWindow >= a.perWindow {
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
// is the one already written. With Config.Outcomes set, it hands on what
// load reports said once a second.
func (s *Server) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() { s.hub.run(ctx) })
	wg.Go(func() { s.gate.run(ctx, s.cfg.Now) })
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
	for {
		p := s.peak.Load()
		if n <= p || s.peak.CompareAndSwap(p, n) {
			break
		}
	}
	s.m.streams.Inc()
	s.m.opened.Inc()
	return func() {
		s.open.Add(-1)
		s.m.streams.Dec()
	}
}
