package publish

import (
	"fmt"
	"reflect"
	"testing"
	"unsafe"

	"github.com/cairn-sd/cairn/status"
)

// TestRefreshAllocations: re-reading the store at a new revision with no
// instance added or gone makes no allocation per instance (it used to
// copy every record and make every key anew, several hundred bytes an
// instance of garbage at every revision), and keeps each instance's key
// string; a catalog record stays a fraction of the store's record.
func TestRefreshAllocations(t *testing.T) {
	if got, limit := unsafe.Sizeof(Instance{}), uintptr(112); got > limit {
		t.Errorf("Instance is %d bytes, want at most %d: the catalog holds one per live instance", got, limit)
	}
	h := newHarness(t, 4096, nil)
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
		h.n.Refresh()
		return testing.AllocsPerRun(5, func() {
			h.n.cat.Rev = 0 // as if the store had moved on
			h.n.Refresh()
		})
	}
	grow(4, 10)
	small, n1 := measure(), total
	keys := map[string]*byte{}
	for _, cs := range h.n.cat.Services {
		for _, in := range cs.Instances {
			keys[in.Key] = unsafe.StringData(in.Key)
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
	for _, cs := range h.n.cat.Services {
		for _, in := range cs.Instances {
			if p, ok := keys[in.Key]; ok {
				if p != unsafe.StringData(in.Key) {
					t.Fatalf("%s: the key was made anew at a refresh", in.Key)
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
	h := newHarness(t, 64, nil)
	svc := tcpService("shop", "web")
	h.apply(svc)
	h.fleet(svc, "i", 3)
	odd := reg(svc, "odd", "10.0.0.9")
	odd.Ports = map[string]int{"main": 9090}
	h.register(odd)
	h.n.Refresh()
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
	h := newHarness(t, 256, nil)
	svc := tcpService("shop", "web")
	h.apply(svc)
	fleet := h.fleet(svc, "i", 3)
	instArrays := map[*Instance]bool{}
	for range 6 {
		h.n.cat.Rev = 0 // as if the store had moved on
		h.n.Refresh()
		instArrays[&h.n.cat.Services[0].Instances[0]] = true
		if got := len(h.n.cat.Services[0].Instances); got != 3 {
			t.Fatalf("catalog holds %d instances, want 3", got)
		}
	}
	if len(instArrays) != 1 {
		t.Errorf("six refreshes used %d instance arrays, want 1", len(instArrays))
	}
	if _, err := h.st.Deregister(t.Context(), "admin", fleet[1].Key(), fleet[1].Incarnation); err != nil {
		t.Fatal(err)
	}
	h.n.Refresh()
	cs := h.n.cat.Services[0]
	if len(cs.Instances) != 2 || cs.InstanceID(0) != fleet[0].ID || cs.InstanceID(1) != fleet[2].ID {
		t.Errorf("after a deregistration the catalog holds %+v, want %s and %s", cs.Instances, fleet[0].ID, fleet[2].ID)
	}
	for i := range cs.Instances {
		slot, ok := h.n.Slot(cs.Instances[i].Key)
		if ref, held := h.n.w.Ref(slot); !ok || !held || ref != (status.Ref{Service: 0, Instance: int32(i)}) {
			t.Errorf("%s: slot %d (%v) refers to %v, want instance %d", cs.Instances[i].Key, slot, ok, ref, i)
		}
	}
}
