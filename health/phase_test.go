package health

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestOnPhase: OnPhase is told each phase of a round, in order, before
// the phase's work: the refresh before the catalog has read the store,
// the build before the table it builds is published; idle once the
// table has the drain.
func TestOnPhase(t *testing.T) {
	type seen struct {
		p        publish.Phase
		catRev   uint64 // the catalog's revision when the phase began
		version  uint64 // the published table's version then
		eligible bool   // whether the table served the drained instance
	}
	var got []seen
	var h *harness
	watch := func() bool { return false }
	h = newHarnessWith(t, nil, 0, nil, func(c *publish.Config) {
		c.OnPhase = func(p publish.Phase) {
			// Tick runs on the test's goroutine: so does OnPhase.
			var v uint64
			if tbl := h.pub.Acquire(); tbl != nil {
				v = tbl.Version()
				tbl.Release()
			}
			got = append(got, seen{p, h.n.pub.Catalog().Rev, v, watch()})
		}
	})
	svc := tcpService("shop", "cart")
	h.apply(svc)
	fleet := h.fleet(svc, "a", 2)
	h.tick(0)
	want := []publish.Phase{publish.PhaseRefresh, publish.PhaseEvaluate, publish.PhaseRefresh, publish.PhaseBuild, publish.PhaseIdle}
	if ps := phasesOf(got, func(s seen) publish.Phase { return s.p }); !slices.Equal(ps, want) {
		t.Fatalf("first round: phases %v, want %v", ps, want)
	}
	h.wantEntry(fleet[0], status.Unknown, true)

	if _, err := h.st.Drain(t.Context(), "admin", fleet[0].Key(), fleet[0].Incarnation); err != nil {
		t.Fatal(err)
	}
	rev := h.st.Revision()
	watch = func() bool {
		pub := h.n.pub.Published()
		defer pub.Release()
		_, e, ok := pub.Lookup(fleet[0].Key().String())
		return ok && e.Flags.Has(status.Eligible)
	}
	got = nil
	h.tick(time.Second)
	if ps := phasesOf(got, func(s seen) publish.Phase { return s.p }); !slices.Equal(ps, want) {
		t.Fatalf("second round: phases %v, want %v", ps, want)
	}
	if got[0].catRev >= rev {
		t.Errorf("refresh was told at catalog revision %d, after it had read the drain (%d)", got[0].catRev, rev)
	}
	if !got[0].eligible {
		t.Error("refresh was told after the table had the drain")
	}
	if got[4].version <= got[3].version {
		t.Errorf("build was told at table version %d, idle at %d: want build told before it publishes", got[3].version, got[4].version)
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
	var got []publish.Phase
	idle := make(chan struct{}, 1)
	h := newHarnessWith(t, nil, 0, nil, func(c *publish.Config) {
		c.Interval = time.Hour // one round: the first
		c.OnPhase = func(p publish.Phase) {
			mu.Lock()
			got = append(got, p)
			mu.Unlock()
			if p == publish.PhaseIdle {
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
	if err := h.n.pub.WaitPublished(ctx, h.st.Revision()); err != nil {
		t.Fatal(err)
	}
	h.wantEntry(fleet[0], status.Unknown, false)
	mu.Lock()
	defer mu.Unlock()
	if want := []publish.Phase{publish.PhaseRefresh, publish.PhaseEvaluate, publish.PhaseRefresh, publish.PhaseBuild, publish.PhaseIdle}; !slices.Equal(got, want) {
		t.Errorf("phases %v, want %v (the withdrawal published in between, no phase)", got, want)
	}
}

func phasesOf[T any](xs []T, f func(T) publish.Phase) []publish.Phase {
	out := make([]publish.Phase, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

// TestRoundPublishesWithdrawalsBetweenItsPhases: on the leader, a
// withdrawal applied during the catalog refresh is published once the
// refresh ends, before the evaluation; one applied during the evaluation
// once it ends, before the second refresh; neither waits for the build.
// (They did: at 10,000 instances on a busy host, a drain applied early in
// the refresh reached the table some 200 ms later.) The evaluation here
// never pauses (pacing is off), so only the seams can publish.
func TestRoundPublishesWithdrawalsBetweenItsPhases(t *testing.T) {
	var h *harness
	var fleet []wire.Instance
	var refreshes int
	eligible := func(in wire.Instance) bool {
		pub := h.n.pub.Published()
		defer pub.Release()
		_, e, ok := pub.Lookup(in.Key().String())
		return ok && e.Flags.Has(status.Eligible)
	}
	drain := func(in wire.Instance) {
		if _, err := h.st.Drain(t.Context(), "admin", in.Key(), in.Incarnation); err != nil {
			t.Fatal(err)
		}
	}
	armed := false
	h = newHarnessWith(t, nil, 0, func(c *Config) { c.Slice = -1 }, func(c *publish.Config) {
		c.Slice = -1
		c.OnPhase = func(p publish.Phase) {
			if !armed {
				return
			}
			switch p {
			case publish.PhaseRefresh:
				refreshes++
				if refreshes == 1 {
					drain(fleet[0]) // during the first refresh
				} else if eligible(fleet[1]) {
					t.Errorf("%s, drained during the evaluation, still eligible when it ended", fleet[1].ID)
				}
			case publish.PhaseEvaluate:
				if eligible(fleet[0]) {
					t.Errorf("%s, drained during the refresh, still eligible when it ended", fleet[0].ID)
				}
				drain(fleet[1]) // during the evaluation
			}
		}
	})
	svc := tcpService("shop", "cart")
	svc.Policy.MaxUnavailable = "2" // not a test of budgets: two of three drain
	h.apply(svc)
	fleet = h.fleet(svc, "a", 3)
	h.tick(0)
	for _, in := range fleet {
		h.wantEntry(in, status.Unknown, true)
	}
	armed = true
	h.tick(time.Second)
	if refreshes != 2 {
		t.Fatalf("%d refreshes in the round, want 2", refreshes)
	}
	if got := h.metric("cairn_health_withdrawals_published_total"); got != 2 {
		t.Errorf("cairn_health_withdrawals_published_total = %v, want 2 (one at each seam)", got)
	}
	h.wantEntry(fleet[0], status.Unknown, false)
	h.wantEntry(fleet[1], status.Unknown, false)
	h.wantEntry(fleet[2], status.Unknown, true)
}
