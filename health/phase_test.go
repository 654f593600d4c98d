package health

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// TestOnPhase: OnPhase is told each phase of a round, in order, before
// the phase's work: the refresh before the catalog has read the store,
// the build before the table has the drain; idle once it has.
func TestOnPhase(t *testing.T) {
	type seen struct {
		p        Phase
		catRev   uint64 // the catalog's revision when the phase began
		eligible bool   // whether the table served the drained instance
	}
	var got []seen
	var h *harness
	watch := func() bool { return false }
	h = newHarness(t, nil, 0, func(c *Config) {
		c.OnPhase = func(p Phase) {
			// Tick runs on the test's goroutine: so does OnPhase.
			got = append(got, seen{p, h.n.cat.rev, watch()})
		}
	})
	svc := tcpService("shop", "cart")
	h.apply(svc)
	fleet := h.fleet(svc, "a", 2)
	h.tick(0)
	want := []Phase{PhaseRefresh, PhaseEvaluate, PhaseRefresh, PhaseBuild, PhaseIdle}
	if ps := phasesOf(got, func(s seen) Phase { return s.p }); !slices.Equal(ps, want) {
		t.Fatalf("first round: phases %v, want %v", ps, want)
	}
	h.wantEntry(fleet[0], status.Unknown, true)

	if _, err := h.st.Drain(t.Context(), "admin", fleet[0].Key(), fleet[0].Incarnation); err != nil {
		t.Fatal(err)
	}
	rev := h.st.Revision()
	watch = func() bool {
		pub := h.n.published()
		defer pub.release()
		_, e, ok := pub.lookup(fleet[0].Key().String())
		return ok && e.Flags.Has(status.Eligible)
	}
	got = nil
	h.tick(time.Second)
	if ps := phasesOf(got, func(s seen) Phase { return s.p }); !slices.Equal(ps, want) {
		t.Fatalf("second round: phases %v, want %v", ps, want)
	}
	if got[0].catRev >= rev {
		t.Errorf("refresh was told at catalog revision %d, after it had read the drain (%d)", got[0].catRev, rev)
	}
	if !got[3].eligible {
		t.Error("build was told after the table had the drain: want before the build's work")
	}
	if got[4].eligible {
		t.Error("idle was told while the table still served the drained instance")
	}
	h.wantEntry(fleet[0], status.Unknown, false)
}

// TestOnPhaseUnderRun: under Run, OnPhase is called on the loop's
// goroutine, and a withdrawal published between rounds leaves the loop
// idle (it is not a phase of the round).
func TestOnPhaseUnderRun(t *testing.T) {
	var mu sync.Mutex
	var got []Phase
	idle := make(chan struct{}, 1)
	h := newHarness(t, nil, 0, func(c *Config) {
		c.Interval = time.Hour // one round: the first
		c.OnPhase = func(p Phase) {
			mu.Lock()
			got = append(got, p)
			mu.Unlock()
			if p == PhaseIdle {
				select {
				case idle <- struct{}{}:
				default:
				}
			}
		}
	})
	svc := tcpService("shop", "cart")
	h.apply(svc)
	fleet := h.fleet(svc, "a", 2)
	run(t, h.n)
	select {
	case <-idle:
	case <-time.After(wait):
		t.Fatal("the first round never ended")
	}
	if _, err := h.st.Drain(t.Context(), "admin", fleet[0].Key(), fleet[0].Incarnation); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), wait)
	defer cancel()
	if err := h.n.WaitPublished(ctx, h.st.Revision()); err != nil {
		t.Fatal(err)
	}
	h.wantEntry(fleet[0], status.Unknown, false)
	mu.Lock()
	defer mu.Unlock()
	if want := []Phase{PhaseRefresh, PhaseEvaluate, PhaseRefresh, PhaseBuild, PhaseIdle}; !slices.Equal(got, want) {
		t.Errorf("phases %v, want %v (the withdrawal published in between, no phase)", got, want)
	}
}

func phasesOf[T any](xs []T, f func(T) Phase) []Phase {
	out := make([]Phase, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func TestPhaseString(t *testing.T) {
	for p, want := range map[Phase]string{PhaseIdle: "idle", PhaseRefresh: "refresh", PhaseEvaluate: "evaluate",
		PhaseBuild: "build", Phase(9): "unknown"} {
		if got := p.String(); got != want {
			t.Errorf("Phase(%d).String() = %q, want %q", p, got, want)
		}
	}
}
