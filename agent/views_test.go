package agent

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/agentview"
	"github.com/cairn-sd/cairn/status"
)

// viewOf returns a view of n instances, the first up eligible, at rev.
func viewOf(rev uint64, n, up int) *agentview.View {
	v := &agentview.View{Revision: rev, Service: status.ServiceInfo{Namespace: "shop", Name: "cart", ShrinkCap: 0.33, ShrinkWindow: 10 * time.Second}}
	for i := range n {
		in := agentview.Instance{InstanceInfo: status.InstanceInfo{ID: fmt.Sprintf("i%02d", i), Incarnation: 1},
			Verdict: status.Unhealthy, Lifecycle: status.Ready, BaseWeight: 100}
		if i < up {
			in.Verdict, in.Flags, in.Weight = status.Healthy, status.Eligible, 100
		}
		v.Instances = append(v.Instances, in)
	}
	return v
}

// TestShrinkCapClientSide: a server that drops 90% of a view in one
// step is followed no faster than the cap allows — a third of the base
// per window, at least one — with the rest held, marked deferred, and
// let go window by window; a re-admission needs no window; a drain is
// never held back; a view that names no cap gets SPEC §2's default.
func TestShrinkCapClientSide(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v := &view{name: "cart.shop", got: viewOf(1, 20, 20)}
	v.serve(t0)
	if n := eligible(v.served); n != 20 {
		t.Fatalf("first view: %d eligible, want 20", n)
	}

	v.got = viewOf(2, 20, 2) // 90% gone in one step
	v.serve(t0.Add(time.Second))
	// The window opened at the drop with 20: at most ⌊0.33 × 20⌋ = 6 go.
	if n := eligible(v.served); n != 14 || v.deferred != 12 {
		t.Fatalf("after the drop: %d eligible, %d deferred; want 14 and 12", n, v.deferred)
	}
	for _, in := range v.served {
		if in.Eligible() && in.ID >= "i02" && !in.Flags.Has(status.WithdrawalDeferred) {
			t.Errorf("%s is held in rotation without the deferred flag", in.ID)
		}
	}
	// Within the window, nothing more goes.
	if v.serve(t0.Add(9 * time.Second)); eligible(v.served) != 14 {
		t.Fatalf("later in the window: %d eligible, want 14", eligible(v.served))
	}
	// Each new window (the first one ends at 11 s) lets a third of its
	// base go: 14 → 10 → 7 → 5 → 4 → 3 → 2.
	want := []int{10, 7, 5, 4, 3, 2, 2}
	for i, w := range want {
		v.serve(t0.Add(time.Duration(10*(i+2)) * time.Second))
		if n := eligible(v.served); n != w {
			t.Fatalf("window %d: %d eligible, want %d", i+1, n, w)
		}
	}
	if v.deferred != 0 {
		t.Errorf("all let go, yet %d deferred", v.deferred)
	}

	// Re-admissions are taken at once.
	v.got = viewOf(3, 20, 20)
	if v.serve(t0.Add(200 * time.Second)); eligible(v.served) != 20 {
		t.Errorf("re-admission: %d eligible, want 20", eligible(v.served))
	}
	// A drain is not capped: 15 of 20 draining go at once.
	drain := viewOf(4, 20, 5)
	for i := 5; i < 20; i++ {
		drain.Instances[i].Lifecycle = status.Draining
	}
	v.got = drain
	if v.serve(t0.Add(300 * time.Second)); eligible(v.served) != 5 {
		t.Errorf("drain: %d eligible, want 5", eligible(v.served))
	}
	// Instances gone from the view count as withdrawals too.
	v2 := &view{name: "cart.shop", got: viewOf(1, 9, 9)}
	v2.serve(t0)
	v2.got = viewOf(2, 1, 1)
	v2.got.Service.ShrinkCap, v2.got.Service.ShrinkWindow = 0, 0
	if v2.serve(t0.Add(time.Second)); eligible(v2.served) != 7 || len(v2.served) != 7 {
		t.Errorf("8 of 9 gone: %d served, %d eligible; want 7 and 7 (default cap 0.33 of 9: 2 go)", len(v2.served), eligible(v2.served))
	}
}

// TestOlderRevisionRefused: a view of a lower revision never replaces
// the one held; the same revision does.
func TestOlderRevisionRefused(t *testing.T) {
	v := &view{name: "cart.shop", got: viewOf(10, 3, 3)}
	if err := v.accept(viewOf(9, 3, 1)); err == nil {
		t.Error("an older revision was accepted")
	}
	if err := v.accept(viewOf(10, 3, 1)); err != nil {
		t.Errorf("the same revision: %v", err)
	}
	if err := v.accept(viewOf(11, 3, 1)); err != nil {
		t.Errorf("a newer revision: %v", err)
	}
}

// TestShrinkCapCountsFromTheMost: a view that grows within a window
// (instances registered one by one) and then loses nearly all of them in
// one step is capped from the most it had in the window, not from what
// it had when the window opened; a rolling replacement, one out and one
// in, is never held back.
func TestShrinkCapCountsFromTheMost(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	v := &view{name: "cart.shop", got: viewOf(1, 10, 1)}
	v.serve(t0)
	for up := 2; up <= 10; up++ {
		v.got = viewOf(uint64(up), 10, up)
		v.serve(t0.Add(time.Duration(up) * 100 * time.Millisecond))
	}
	v.got = viewOf(20, 10, 1)
	v.serve(t0.Add(2 * time.Second))
	if n := eligible(v.served); n != 7 {
		t.Fatalf("10 → 1 within the window it grew in: %d eligible, want 7", n)
	}

	r := &view{name: "cart.shop", got: viewOf(1, 11, 10)}
	r.serve(t0)
	for i := range 10 { // instance i out, instance 10 (then i) in
		next := viewOf(uint64(i+2), 11, 11)
		next.Instances[i].Flags, next.Instances[i].Weight = 0, 0
		r.got = next
		r.serve(t0.Add(time.Duration(i+1) * 100 * time.Millisecond))
		if n := eligible(r.served); n != 10 || r.deferred != 0 {
			t.Fatalf("rolling step %d: %d eligible, %d deferred; want 10 and none", i, n, r.deferred)
		}
	}
}
