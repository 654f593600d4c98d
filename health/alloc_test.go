package health

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// TestRoundAllocations: an evaluation round in the steady state (every
// instance probed healthy, no verdict changing) allocates nothing per
// instance: ten times the instances cost no more allocations than a few
// per service. Garbage per instance per round is what made a one-core
// server's DNS tail jump once a second (issue 9).
func TestRoundAllocations(t *testing.T) {
	h := newHarness(t, nil, 4096, nil)
	var all []wire.Instance
	grow := func(services, each int) {
		for s := range services {
			svc := tcpService("shop", fmt.Sprintf("svc%d-%d", len(all), s))
			h.apply(svc)
			all = append(all, h.fleet(svc, "i", each)...)
		}
	}
	// The evidence of a round: every instance probed by two observers
	// since the last, then a second of time.
	round := func() {
		for _, in := range all {
			h.probe("n1", in, true, false)
			h.probe("n2", in, true, false)
		}
		h.tick(time.Second)
	}
	measure := func() float64 {
		for range 8 { // past the first verdicts and slow start's commits
			round()
		}
		// Only the round is counted, not the reports before it.
		var total uint64
		const runs = 5
		for range runs {
			for _, in := range all {
				h.probe("n1", in, true, false)
				h.probe("n2", in, true, false)
			}
			h.clk.Advance(time.Second)
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			if h.n.evaluate(t.Context(), h.clk.Now()) {
				t.Fatal("a steady round committed: the measure is not of the steady state")
			}
			runtime.ReadMemStats(&after)
			total += after.Mallocs - before.Mallocs
		}
		return float64(total) / runs
	}
	grow(4, 10)
	small, n1 := measure(), len(all)
	grow(4, 100)
	large, n2 := measure(), len(all)
	perInstance := (large - small) / float64(n2-n1)
	t.Logf("allocations per round: %.0f with %d instances, %.0f with %d: %.3f per added instance", small, n1, large, n2, perInstance)
	if perInstance > 0.05 {
		t.Errorf("a round allocates %.3f times per instance (%.0f with %d instances, %.0f with %d); want none",
			perInstance, small, n1, large, n2)
	}
	// Between rounds the loop holds one evaluator state an instance: the
	// States the last round replaced hold none.
	held := 0
	for _, st := range h.n.states {
		held += len(st.Instances)
	}
	for k, st := range h.n.spareStates {
		if st.Instances != nil {
			t.Errorf("%s: the previous round's State still holds %d states", k, cap(st.Instances))
		}
	}
	if held != len(all) {
		t.Errorf("the current States hold %d instances' states, want %d", held, len(all))
	}
}
