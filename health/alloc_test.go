package health

import (
	"fmt"
	"reflect"
	"runtime"
	"testing"
	"time"
	"unsafe"

	"github.com/cairn-sd/cairn/status"
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

// TestRefreshAllocations: re-reading the store at a new revision with no
// instance added or gone makes no allocation per instance (it used to
// copy every record and make every key anew, several hundred bytes an
// instance of garbage at every revision), and keeps each instance's key
// string; a catalog record stays a fraction of the store's record.
func TestRefreshAllocations(t *testing.T) {
	if got, limit := unsafe.Sizeof(catInstance{}), uintptr(112); got > limit {
		t.Errorf("catInstance is %d bytes, want at most %d: the catalog holds one per live instance", got, limit)
	}
	h := newHarness(t, nil, 4096, nil)
	total := 0
	grow := func(services, each int) {
		for s := range services {
			svc := tcpService("shop", fmt.Sprintf("svc%d-%d", total, s))
			h.apply(svc)
			h.fleet(svc, "i", each)
			total += each
		}
	}
	measure := func() float64 {
		h.n.refresh()
		return testing.AllocsPerRun(5, func() {
			h.n.cat.rev = 0 // as if the store had moved on
			h.n.refresh()
		})
	}
	grow(4, 10)
	small, n1 := measure(), total
	keys := map[string]*byte{}
	for _, cs := range h.n.cat.services {
		for _, in := range cs.instances {
			keys[in.key] = unsafe.StringData(in.key)
		}
	}
	grow(4, 100)
	large, n2 := measure(), total
	perInstance := (large - small) / float64(n2-n1)
	t.Logf("allocations per refresh: %.0f with %d instances, %.0f with %d: %.3f per added instance", small, n1, large, n2, perInstance)
	if perInstance > 0.05 {
		t.Errorf("a refresh allocates %.3f times per instance (%.0f with %d instances, %.0f with %d); want none",
			perInstance, small, n1, large, n2)
	}
	kept := 0
	for _, cs := range h.n.cat.services {
		for _, in := range cs.instances {
			if p, ok := keys[in.key]; ok {
				if p != unsafe.StringData(in.key) {
					t.Fatalf("%s: the key was made anew at a refresh", in.key)
				}
				kept++
			}
		}
	}
	if kept != len(keys) {
		t.Errorf("%d of the first %d instances' keys found after the refreshes", kept, len(keys))
	}
}

// TestDirectorySharesPorts: the directory's instances of a service with
// the same port numbers share one map (a map each was some 200 bytes an
// instance), and one with other numbers gets its own.
func TestDirectorySharesPorts(t *testing.T) {
	h := newHarness(t, nil, 64, nil)
	svc := tcpService("shop", "web")
	h.apply(svc)
	h.fleet(svc, "i", 3)
	odd := reg(svc, "odd", "10.0.0.9")
	odd.Ports = map[string]int{"main": 9090}
	h.register(odd)
	h.n.refresh()
	maps := map[uintptr]int{}
	for _, info := range h.n.w.Directory().Instances {
		if info == nil {
			continue
		}
		want := uint16(8080)
		if info.ID == "odd" {
			want = 9090
		}
		if p, ok := info.Port("main"); !ok || p != want {
			t.Errorf("%s: port main = %d, %v; want %d", info.ID, p, ok, want)
		}
		maps[reflect.ValueOf(info.Ports).Pointer()]++
	}
	if len(maps) != 2 {
		t.Errorf("the 4 instances hold %d ports maps, want 2 (3 shared, 1 of its own): %v", len(maps), maps)
	}
}

// TestRefreshReusesInstances: a refresh writes the catalog over the
// previous one, each service's instances into the slice it had, instead
// of making them anew at every store revision beside the previous
// catalog (the writer's per-slot layout is reused likewise: see
// status.TestWriterReusesLayout); what it writes is the store's current
// state.
func TestRefreshReusesInstances(t *testing.T) {
	h := newHarness(t, nil, 256, nil)
	svc := tcpService("shop", "web")
	h.apply(svc)
	fleet := h.fleet(svc, "i", 3)
	instArrays := map[*catInstance]bool{}
	for range 6 {
		h.n.cat.rev = 0 // as if the store had moved on
		h.n.refresh()
		instArrays[&h.n.cat.services[0].instances[0]] = true
		if got := len(h.n.cat.services[0].instances); got != 3 {
			t.Fatalf("catalog holds %d instances, want 3", got)
		}
	}
	if len(instArrays) != 1 {
		t.Errorf("six refreshes used %d instance arrays, want 1", len(instArrays))
	}
	if _, err := h.st.Deregister(t.Context(), "admin", fleet[1].Key(), fleet[1].Incarnation); err != nil {
		t.Fatal(err)
	}
	h.n.refresh()
	cs := h.n.cat.services[0]
	if len(cs.instances) != 2 || cs.instanceID(0) != fleet[0].ID || cs.instanceID(1) != fleet[2].ID {
		t.Errorf("after a deregistration the catalog holds %+v, want %s and %s", cs.instances, fleet[0].ID, fleet[2].ID)
	}
	for i := range cs.instances {
		slot, ok := h.n.w.Lookup(cs.instances[i].key)
		if ref, held := h.n.w.Ref(slot); !ok || !held || ref != (status.Ref{Service: 0, Instance: int32(i)}) {
			t.Errorf("%s: slot %d (%v) refers to %v, want instance %d", cs.instances[i].key, slot, ok, ref, i)
		}
	}
}
