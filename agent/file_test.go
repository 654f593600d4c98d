package agent_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/agent"
	"github.com/cairn-sd/cairn/status/tablefile"
)

// TestAgentFileKeepsTimeOfLastRefresh: views that do not change are
// written again when the stream that kept them current ends, and every
// TouchInterval while it is open, so that an agent restarted with no
// server reachable takes their age from the time of the last refresh,
// not from the last change, which may be far older (and count against
// the DNS server's max-stale).
func TestAgentFileKeepsTimeOfLastRefresh(t *testing.T) {
	synced := func(t *testing.T, path string) time.Time {
		t.Helper()
		s, err := tablefile.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if s == nil {
			return time.Time{}
		}
		return s.Synced
	}

	t.Run("the stream ends", func(t *testing.T) {
		s := startServer(t)
		s.publish(t, 100, 4, 4)
		path := filepath.Join(t.TempDir(), "views.cairn")
		f := startAgent(t, path, s.addr)
		f.waitFor("the first view", f.has(4, 100))
		t0 := f.clock.Now()
		// Two quiet hours connected (the default TouchInterval, a minute
		// of real time, does not pass), then the server goes.
		f.clock.add(2 * time.Hour)
		s.stop()
		f.waitFor("the file to say when the stream ended", func() bool { return synced(t, path).Equal(t0.Add(2 * time.Hour)) })
		f.clock.add(time.Hour)
		f.stop()
		if got := synced(t, path); !got.Equal(t0.Add(2 * time.Hour)) {
			t.Fatalf("after the agent stopped, an hour into the outage, the file says its views were current at %v; want %v, when the stream ended", got, t0.Add(2*time.Hour))
		}

		// Restarted three hours and a minute after t0, with no server.
		g := startAgent(t, path, s.addr)
		g.clock.add(3*time.Hour + time.Minute)
		st := g.a.Status(5 * time.Second)
		if !st.Restored || st.Connected || len(st.Views) != 1 {
			t.Fatalf("restarted agent: %+v; want one view, restored, not connected", st)
		}
		v := st.Views[0]
		if want := t0.Add(2 * time.Hour); !v.Refreshed.Equal(want) || v.AgeSeconds != (time.Hour+time.Minute).Seconds() || !v.Stale {
			t.Errorf("restored view refreshed %v, age %vs, stale %v; want refreshed %v (the end of the stream), age %vs, stale",
				v.Refreshed, v.AgeSeconds, v.Stale, want, (time.Hour + time.Minute).Seconds())
		}
	})

	t.Run("connected and quiet", func(t *testing.T) {
		s := startServer(t)
		s.publish(t, 100, 4, 4)
		path := filepath.Join(t.TempDir(), "views.cairn")
		f := startAgentWith(t, func(c *agent.Config) { c.TouchInterval = 10 * time.Millisecond }, path, s.addr)
		f.waitFor("the first view", f.has(4, 100))
		t0 := f.clock.Now()
		f.clock.add(time.Hour)
		f.waitFor("the file to follow an open stream", func() bool { return synced(t, path).Equal(t0.Add(time.Hour)) })
	})
}
