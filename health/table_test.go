package health

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

func (h *harness) slotOf(in wire.Instance) (int, bool) {
	return h.n.pub.Slot(in.Key().String())
}

// wantSlot checks that the current table holds in, in its slot, and
// returns the slot.
func (h *harness) wantSlot(in wire.Instance) int {
	h.t.Helper()
	slot, ok := h.slotOf(in)
	if !ok {
		h.t.Fatalf("%s has no slot", in.ID)
	}
	tb := h.pub.Acquire()
	defer tb.Release()
	if e := tb.Entry(slot); e.Key != status.KeyHash(in.Key().String()) || e.Incarnation != in.Incarnation {
		h.t.Fatalf("slot %d holds %+v, want %s#%d", slot, e, in.ID, in.Incarnation)
	}
	return slot
}

// used returns the slots of the current table that hold an instance.
func (h *harness) used() []int {
	tb := h.pub.Acquire()
	defer tb.Release()
	var out []int
	for i := range tb.Capacity() {
		if tb.Entry(i).Used() {
			out = append(out, i)
		}
	}
	return out
}

// TestTableSlots: every build writes every slot, so an instance that
// goes leaves an empty slot in every table after it; its slot goes to
// another instance only after a build has published it empty
// (Slots.Recycle); a full table leaves the newest out, counted.
func TestTableSlots(t *testing.T) {
	h := newHarness(t, nil, 3, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	a := h.register(reg(svc, "a", "10.0.0.1"))
	b := h.register(reg(svc, "b", "10.0.0.2"))
	h.tick(0)
	slotA, slotB := h.wantSlot(a), h.wantSlot(b)
	if got := h.used(); !slices.Equal(got, []int{slotA, slotB}) {
		t.Fatalf("used slots %v, want a's and b's %v", got, []int{slotA, slotB})
	}
	tb := h.pub.Acquire()
	if tb.StoreRevision() != h.st.Revision() {
		t.Errorf("table built from revision %d, store at %d", tb.StoreRevision(), h.st.Revision())
	}
	tb.Release()

	// a goes and c comes in the same round: c may not take a's slot yet.
	if _, err := h.st.Deregister(t.Context(), "admin", a.Key(), a.Incarnation); err != nil {
		t.Fatal(err)
	}
	c := h.register(reg(svc, "c", "10.0.0.3"))
	h.tick(time.Second)
	if e, ok := h.n.pub.Status(a.Key().String(), a.Incarnation); ok {
		t.Fatalf("deregistered a still has an entry: %+v", e)
	}
	if _, ok := h.slotOf(a); ok {
		t.Errorf("deregistered a still holds a slot")
	}
	if slotC := h.wantSlot(c); slotC == slotA {
		t.Fatalf("c took a's slot %d in the round a left, before a table showed it empty", slotA)
	}
	// Every one of the publisher's tables is rewritten in turn: none
	// shows a in its old slot again.
	for range 4 {
		if got := h.used(); slices.Contains(got, slotA) || len(got) != 2 {
			t.Fatalf("used slots %v: a's slot %d is not empty, or the table holds other than b and c", got, slotA)
		}
		h.tick(time.Second)
	}

	// Now a's slot is free again, and it is the only one.
	d := h.register(reg(svc, "d", "10.0.0.4"))
	h.tick(time.Second)
	if slotD := h.wantSlot(d); slotD != slotA {
		t.Errorf("d got slot %d, want a's recycled slot %d", slotD, slotA)
	}
	if got := h.wantSlot(b); got != slotB {
		t.Errorf("b moved from slot %d to %d", slotB, got)
	}

	// The table is full: e is left out and counted; the others stay.
	e := h.register(reg(svc, "e", "10.0.0.5"))
	h.tick(time.Second)
	if got, ok := h.n.pub.Status(e.Key().String(), e.Incarnation); ok {
		t.Errorf("e has an entry in a full table: %+v", got)
	}
	if got := h.metric("cairn_health_unslotted_total"); got < 1 {
		t.Errorf("cairn_health_unslotted_total = %v, want at least 1", got)
	}
	for _, in := range []wire.Instance{b, c, d} {
		h.wantEntry(in, status.Unknown, true)
	}
}

// TestTableNames: service and locality ids stay what they were when
// services and zones are added, whatever their order.
func TestTableNames(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	cart := tcpService("shop", "cart")
	h.apply(cart)
	ra := reg(cart, "a", "10.0.0.1")
	ra.Region, ra.Zone = "eu", "eu-1"
	a := h.register(ra)
	h.tick(0)
	before := h.entry(a)
	check := func(in wire.Instance, svc, region, zone string) status.Entry {
		t.Helper()
		e := h.entry(in)
		tb := h.pub.Acquire()
		defer tb.Release()
		if got := tb.Services().Name(e.Service); got != svc {
			t.Errorf("%s: service id %d names %q, want %q", in.ID, e.Service, got, svc)
		}
		if got := tb.Locality(e.Region); got != region {
			t.Errorf("%s: region id %d names %q, want %q", in.ID, e.Region, got, region)
		}
		if got := tb.Locality(e.Zone); got != zone {
			t.Errorf("%s: zone id %d names %q, want %q", in.ID, e.Zone, got, zone)
		}
		slot, _ := h.slotOf(in)
		if !slices.Contains(tb.Members(e.Service), uint32(slot)) {
			t.Errorf("%s: slot %d is not among its service's members %v", in.ID, slot, tb.Members(e.Service))
		}
		return e
	}
	check(a, "shop/cart", "eu", "eu-1")

	// A service that sorts first and new zones: a keeps its service id;
	// locality ids are per table (names come and go with instances), and
	// still name a's region and zone.
	first := tcpService("aaa", "first")
	h.apply(first)
	rx := reg(first, "x", "10.0.1.1")
	rx.Region, rx.Zone = "ap", "ap-1"
	x := h.register(rx)
	rb := reg(cart, "b", "10.0.0.2")
	rb.Region, rb.Zone = "eu", "eu-0"
	b := h.register(rb)
	h.tick(time.Second)
	after := check(a, "shop/cart", "eu", "eu-1")
	if after.Service != before.Service {
		t.Errorf("a's service id moved from %d to %d", before.Service, after.Service)
	}
	check(x, "aaa/first", "ap", "ap-1")
	check(b, "shop/cart", "eu", "eu-0")
}

// TestStatusAndEvidence: Status answers for one incarnation as the table
// holds it; Evidence lists each observer's latest, freshest first, probes
// before outcomes.
func TestStatusAndEvidence(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	a := h.register(reg(svc, "a", "10.0.0.1"))
	key := a.Key().String()
	if e, ok := h.n.pub.Status(key, a.Incarnation); ok {
		t.Fatalf("Status before the first table: %+v, want none", e)
	}
	h.tick(0)
	if !h.n.Leading() {
		t.Fatal("the single node's Node is not leading")
	}
	e, ok := h.n.pub.Status(key, a.Incarnation)
	if !ok || e.Key != status.KeyHash(key) || e.Incarnation != a.Incarnation || e.Lifecycle != status.Ready || e.BaseWeight != 100 {
		t.Fatalf("Status = %+v, %t; want a's ready entry", e, ok)
	}
	for _, q := range []struct {
		key string
		inc uint64
	}{{key, a.Incarnation + 1}, {key, a.Incarnation - 1}, {"shop/cart/zz", a.Incarnation}, {"", 0}} {
		if e, ok := h.n.pub.Status(q.key, q.inc); ok {
			t.Errorf("Status(%q, %d) = %+v, want none", q.key, q.inc, e)
		}
	}

	if ev, ok := h.n.Evidence(key, a.Incarnation); !ok || ev != nil {
		t.Fatalf("Evidence with none held: %+v, %t; want nil, true", ev, ok)
	}
	t1 := h.clk.Now()
	h.n.ProbeReport(wire.ProbeReport{Observer: "n1", Results: []wire.ProbeResult{{Target: TargetID(a.Key(), a.Incarnation), At: t1, Code: 503}}})
	h.clk.Advance(time.Second)
	t2 := h.clk.Now()
	h.n.ProbeReport(wire.ProbeReport{Observer: "n1", Results: []wire.ProbeResult{{Target: TargetID(a.Key(), a.Incarnation), At: t2, Error: "timeout"}}})
	rep := func(caller string, ok, failed int) {
		h.clk.Advance(time.Millisecond)
		h.n.Outcomes(caller, wire.OutcomeReport{Endpoints: []wire.EndpointOutcome{{Namespace: "shop", Service: "cart", Instance: "a",
			Incarnation: a.Incarnation, Success: ok, Failure: failed}}})
	}
	rep("caller-a", 1, 9)
	rep("caller-b", 5, 0)
	ev, ok := h.n.Evidence(key, a.Incarnation)
	want := []wire.ClassEvidence{
		{Class: "probe", Observer: "n1", At: t2, Detail: "timeout"},
		{Class: "outcome", Observer: "caller-b", At: h.clk.Now(), OK: true, Detail: "5 ok, 0 failed, 0 timed out"},
		{Class: "outcome", Observer: "caller-a", At: h.clk.Now().Add(-time.Millisecond), Detail: "1 ok, 9 failed, 0 timed out"},
	}
	if !ok || !slices.Equal(ev, want) {
		t.Errorf("Evidence =\n%+v\nwant\n%+v", ev, want)
	}
	if ev, ok := h.n.Evidence(key, a.Incarnation+1); !ok || ev != nil {
		t.Errorf("Evidence about another incarnation: %+v, want none", ev)
	}
}

func TestNewValidatesConfig(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	for _, c := range []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no store", func(c *Config) { c.Store = nil }, "Store is required"},
		{"no publisher", func(c *Config) { c.Publish = nil }, "Publish is required"},
		{"negative replicas", func(c *Config) { c.Replicas = -1 }, "Replicas"},
		{"negative live timeout", func(c *Config) { c.LiveTimeout = -time.Second }, "LiveTimeout"},
		{"negative outcome observers", func(c *Config) { c.MaxOutcomeObservers = -1 }, "MaxOutcomeObservers"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := Config{Store: h.st.Store, Publish: h.n.pub}
			c.mod(&cfg)
			if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "health: ") {
				t.Errorf("New: %v, want an error naming %s", err, c.want)
			}
		})
	}
	n, err := New(Config{Store: h.st.Store, Publish: h.n.pub})
	if err != nil {
		t.Fatal(err)
	}
	if n.cfg.Replicas != DefaultReplicas || n.cfg.LiveTimeout != DefaultLiveTimeout ||
		n.cfg.OutcomeHorizon != DefaultOutcomeHorizon || n.cfg.MaxOutcomeObservers != DefaultMaxOutcomeObservers {
		t.Errorf("defaults not applied: %+v", n.cfg)
	}
}

// TestMetricsLint runs promlint over the Node's metrics once each has a
// series.
func TestMetricsLint(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	a := h.register(reg(svc, "a", "10.0.0.1"))
	h.tick(0)
	h.probe("n9", a, true, false)
	h.tick(time.Second)
	problems, err := testutil.GatherAndLint(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("promlint: %s: %s", p.Metric, p.Text)
	}
	if n, err := testutil.GatherAndCount(h.reg); err != nil || n < 8 {
		t.Errorf("%d series gathered (%v), want the Node's metrics registered", n, err)
	}
}

// TestBeforeFirstTable: the API may ask between a round's refresh, which
// publishes the instances' slots, and its build, which publishes the
// first table. Regression: Status and Outcomes dereferenced the nil
// table.
func TestBeforeFirstTable(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	a := h.register(reg(svc, "a", "10.0.0.1"))
	h.n.pub.Refresh() // the start of the first Tick
	if _, ok := h.slotOf(a); !ok {
		t.Fatal("refresh gave a no slot")
	}
	if e, ok := h.n.pub.Status(a.Key().String(), a.Incarnation); ok {
		t.Errorf("Status before the first table = %+v, want none", e)
	}
	r := h.n.Outcomes("caller", wire.OutcomeReport{Endpoints: []wire.EndpointOutcome{{Namespace: "shop", Service: "cart",
		Instance: "a", Incarnation: a.Incarnation, Success: 1}}})
	if r.Accepted != 0 || r.Discarded["unknown_endpoint"] != 1 {
		t.Errorf("Outcomes before the first table = %+v, want the endpoint unknown", r)
	}
}
