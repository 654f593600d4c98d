package health

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

func observers(list []obs) map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, o := range list {
		out[o.observer] = append(out[o.observer], o.at)
	}
	for _, ts := range out {
		slices.SortFunc(ts, time.Time.Compare)
	}
	return out
}

// TestPut: the evidence of one instance is bounded: perObserver
// observations per observer (the newest), and a fixed number of
// observers (the ones heard from most recently).
func TestPut(t *testing.T) {
	t0 := newClock().Now()
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var list []obs
	for s := range 6 {
		list = put(list, obs{observer: "n1", at: at(s)}, 3)
	}
	if got := observers(list)["n1"]; !slices.Equal(got, []time.Time{at(2), at(3), at(4), at(5)}) {
		t.Fatalf("n1's observations %v, want its newest %d", got, perObserver)
	}
	if got := put(list, obs{observer: "n1", at: at(1)}, 3); !slices.Equal(observers(got)["n1"], observers(list)["n1"]) {
		t.Errorf("an observation older than all kept replaced one: %v", observers(got)["n1"])
	}
	if got := put(list, obs{observer: "n1", at: at(5), ok: true}, 3); len(got) != len(list) {
		t.Errorf("the same observation again was added: %d observations", len(got))
	}

	list = put(list, obs{observer: "n2", at: at(3)}, 3)
	list = put(list, obs{observer: "n3", at: at(4)}, 3)
	// Full at 3 observers: n4 replaces the one heard from least recently
	// (n2, latest at 3s), all of its observations.
	list = put(list, obs{observer: "n4", at: at(6)}, 3)
	got := observers(list)
	if _, ok := got["n2"]; ok || len(got) != 3 || len(got["n4"]) != 1 {
		t.Fatalf("observers %v, want n1, n3 and n4", got)
	}
	// An observer whose only news is older than everyone's latest is
	// not let in.
	if got := observers(put(list, obs{observer: "n5", at: at(1)}, 3)); len(got) != 3 || got["n5"] != nil {
		t.Errorf("a stale newcomer displaced an observer: %v", got)
	}
}

// TestRecordAndPrune: evidence follows the newest incarnation reported;
// pruning drops what is about gone or replaced incarnations and what is
// older than the horizon, and forgets members not heard from since.
func TestRecordAndPrune(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	n := h.n
	t0 := h.clk.Now()
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.record("shop/cart/a", 2, eval.ClassProbe, obs{observer: "n1", at: t0}) {
		t.Fatal("first observation refused")
	}
	if n.record("shop/cart/a", 1, eval.ClassProbe, obs{observer: "n1", at: t0.Add(time.Second)}) {
		t.Error("an observation about an older incarnation was taken")
	}
	if !n.record("shop/cart/a", 3, eval.ClassOutcome, obs{observer: "c1", at: t0.Add(2 * time.Second), succ: 1}) {
		t.Fatal("an observation about a newer incarnation refused")
	}
	if e := n.evidence["shop/cart/a"]; e.inc != 3 || len(e.probes) != 0 || len(e.outcomes) != 1 {
		t.Fatalf("evidence %+v, want only incarnation 3's outcome", e)
	}
	if ss := n.samples(nil, "shop/cart/a", 3, t0.Add(time.Second), t0.Add(time.Second), nil, "", ""); len(ss) != 1 || !ss[0].Pending {
		t.Errorf("samples with a cutoff before the outcome %+v, want it pending", ss)
	}
	ss := n.samples(nil, "shop/cart/a", 3, t0.Add(2*time.Second), t0.Add(2*time.Second), nil, "", "")
	if len(ss) != 1 || ss[0] != (eval.Sample{Class: eval.ClassOutcome, Observer: "c1", Incarnation: 3, At: t0.Add(2 * time.Second), Successes: 1}) {
		t.Errorf("samples %+v, want the outcome", ss)
	}
	if ss := n.samples(nil, "shop/cart/a", 2, t0.Add(time.Hour), t0.Add(time.Hour), nil, "", ""); ss != nil {
		t.Errorf("samples of a replaced incarnation %+v, want none", ss)
	}

	n.record("shop/cart/b", 1, eval.ClassProbe, obs{observer: "n1", at: t0})
	n.record("shop/cart/b", 1, eval.ClassProbe, obs{observer: "n1", at: t0.Add(time.Minute)})
	n.record("shop/cart/c", 1, eval.ClassProbe, obs{observer: "n1", at: t0})
	n.heard["n1"], n.heard["n2"] = t0.Add(time.Minute), t0
	keep := func(key string) (uint64, bool) {
		switch key {
		case "shop/cart/a":
			return 4, true // re-registered
		case "shop/cart/b":
			return 1, true
		}
		return 0, false // gone
	}
	n.mu.Unlock() // prune takes it, a slice at a time
	n.prune(keep, t0.Add(time.Second))
	n.mu.Lock()
	if _, ok := n.evidence["shop/cart/a"]; ok {
		t.Error("evidence about a replaced incarnation survived pruning")
	}
	if _, ok := n.evidence["shop/cart/c"]; ok {
		t.Error("evidence about a gone instance survived pruning")
	}
	if e := n.evidence["shop/cart/b"]; e == nil || len(e.probes) != 1 || !e.probes[0].at.Equal(t0.Add(time.Minute)) {
		t.Errorf("b's evidence after pruning %+v, want only the observation after the horizon", e)
	}
	if _, ok := n.heard["n2"]; ok || n.heard["n1"].IsZero() {
		t.Errorf("heard after pruning %v, want only n1", n.heard)
	}
}

// TestOutcomeObserversBounded: an instance keeps the outcomes of at most
// MaxOutcomeObservers callers, the most recent.
func TestOutcomeObserversBounded(t *testing.T) {
	h := newHarness(t, nil, 0, func(c *Config) { c.MaxOutcomeObservers = 3 })
	svc := tcpService("shop", "cart")
	h.apply(svc)
	a := h.register(reg(svc, "a", "10.0.0.1"))
	h.tick(0)
	for i := range 5 {
		h.clk.Advance(time.Millisecond)
		h.n.Outcomes(fmt.Sprintf("caller-%d", i), wire.OutcomeReport{Endpoints: []wire.EndpointOutcome{{Namespace: "shop", Service: "cart",
			Instance: "a", Incarnation: a.Incarnation, Success: 1}}})
	}
	ev, _ := h.n.Evidence(a.Key().String(), a.Incarnation)
	var got []string
	for _, e := range ev {
		got = append(got, e.Observer)
	}
	if want := []string{"caller-4", "caller-3", "caller-2"}; !slices.Equal(got, want) {
		t.Errorf("outcome observers %v, want the 3 most recent %v", got, want)
	}
}

// TestNeverDisregard: min_healthy_fraction 0 switches the guard off: with
// 3 of 4 instances failing, they leave at the shrink cap's rate and
// health is never disregarded.
func TestNeverDisregard(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	zero := 0.0
	svc.Policy.MinHealthyFraction = &zero
	h.apply(svc)
	fleet := h.fleet(svc, "d", 4)
	h.tick(0)
	for _, in := range fleet[:3] {
		h.probe("n1", in, false, true)
	}
	h.tick(2 * time.Second)
	withdrawn, deferred := 0, 0
	for _, in := range fleet[:3] {
		e := h.entry(in)
		switch {
		case !e.Flags.Has(status.Eligible):
			withdrawn++
		case e.Flags.Has(status.WithdrawalDeferred):
			deferred++
		}
		if e.Flags.Has(status.HealthDisregarded) {
			t.Errorf("%s: flags %v, want health never disregarded", in.ID, e.Flags)
		}
	}
	if withdrawn != 1 || deferred != 2 {
		t.Fatalf("%d withdrawn, %d deferred; want 1 and 2 (the first window allows one)", withdrawn, deferred)
	}
	if got := h.instance(fleet[1]).Health; got == nil || !status.Flags(got.Flags).Has(status.WithdrawalDeferred) {
		t.Errorf("committed %+v, want withdrawal_deferred recorded", got)
	}
	if evs := events(h.st.Store, svc.Key(), wire.EventHealthDisregarded, ""); len(evs) != 0 {
		t.Errorf("health_disregarded events %+v, want none", evs)
	}
	// Each new window takes one more.
	for _, in := range fleet[:3] {
		h.probe("n1", in, false, true)
	}
	h.tick(10 * time.Second)
	for _, in := range fleet[:3] {
		h.probe("n1", in, false, true)
	}
	h.tick(10 * time.Second)
	for _, in := range fleet[:3] {
		h.wantEntry(in, status.Unhealthy, false)
	}
	h.wantEntry(fleet[3], status.Unknown, true)
}
