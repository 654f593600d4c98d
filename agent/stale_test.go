package agent_test

import (
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/xdsserver"
)

// TestAgentMarksViewsStaleFromAStaleServer: a server past --stale-after
// without quorum ends the agent's stream, saying how old its view is;
// the agent's views are that old at once (stale in its status), not
// from the moment the stream ended, and stay so while the server
// refuses it (it holds a view). An agent that holds nothing is served
// the stale view, and marks it stale while connected. Once the server is
// fresh again both are connected and fresh.
func TestAgentMarksViewsStaleFromAStaleServer(t *testing.T) {
	var mu sync.Mutex
	fresh, frozen := true, time.Now()
	lastSync := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		if fresh {
			return time.Now()
		}
		return frozen
	}
	setFresh := func(f bool, at time.Time) { mu.Lock(); defer mu.Unlock(); fresh, frozen = f, at }
	s := startServerWith(t, func(c *xdsserver.Config) { c.LastSync, c.StaleAfter = lastSync, time.Second })
	s.publish(t, 100, 4, 4)
	f := startAgent(t, filepath.Join(t.TempDir(), "views.cairn"), s.addr)
	f.waitFor("the first view", f.has(4, 100))
	if st := f.a.Status(5 * time.Second); !st.Connected || len(st.Views) != 1 || st.Views[0].Stale {
		t.Fatalf("agent of a fresh server: %+v; want connected, one view, fresh", st)
	}

	// The server has not heard from a leader for 10 s.
	setFresh(false, time.Now().Add(-10*time.Second))
	staleHeld := func() bool {
		st := f.a.Status(5 * time.Second)
		return !st.Connected && len(st.Views) == 1 && st.Views[0].Stale && st.Views[0].AgeSeconds >= 9 && st.Views[0].Eligible == 4
	}
	f.waitFor("the views stale, as old as the server's", staleHeld)
	if !f.a.LastSync().Before(f.clock.Now().Add(-9 * time.Second)) {
		t.Errorf("LastSync %v, now %v: want the server's word, 10 s before", f.a.LastSync(), f.clock.Now())
	}

	// An agent that holds nothing is served the stale view, marked stale.
	bare := startAgent(t, "", s.addr)
	bare.waitFor("the stale view, connected and marked stale", func() bool {
		st := bare.a.Status(5 * time.Second)
		return st.Connected && len(st.Views) == 1 && st.Views[0].Stale && st.Views[0].AgeSeconds >= 9
	})
	if !staleHeld() {
		t.Errorf("the agent holding a view, server stale: %+v; want refused, still stale", f.a.Status(5*time.Second))
	}

	// Fresh again: both connected, fresh.
	setFresh(true, time.Time{})
	for _, x := range []*fixture{f, bare} {
		x.waitFor("fresh again", func() bool {
			st := x.a.Status(5 * time.Second)
			return st.Connected && len(st.Views) == 1 && !st.Views[0].Stale && !x.a.LastSync().Before(x.clock.Now())
		})
	}
}
