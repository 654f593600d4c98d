package publish

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestMain checks that no test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

// clock is the injected clock of the tests: the store of a harness
// shares it, so that registration times and the loop's now agree.
type clock = storetest.Clock

func newClock() *clock { return storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

// harness is one Node over a real store replica (a single-node
// cluster), with its own status table: what every node publishes, with
// no evaluation (verdicts are whatever the store holds).
type harness struct {
	t   *testing.T
	clk *clock
	st  *storetest.Node
	pub *status.Publisher
	n   *Node
}

// newHarness starts a single-node store on a fresh clock and a Node on
// it with a table of capacity slots (0: 64); mod may change the Node's
// Config.
func newHarness(t *testing.T, capacity int, mod func(*Config)) *harness {
	t.Helper()
	clk := newClock()
	st := storetest.Single(t, store.Config{Now: clk.Now})
	// The new leader records its own addresses just after it is ready;
	// wait for that, so that the revision holds still from here on.
	storetest.WaitFor(t, wait, func() error {
		if _, addr := st.Leader(); addr == "" {
			return errors.New("the leader's HTTP address is not recorded yet")
		}
		return nil
	})
	n := newNode(t, st.Store, clk, capacity, mod)
	return &harness{t: t, clk: clk, st: st, pub: n.cfg.Table, n: n}
}

// newNode returns a Node on s with a table of capacity slots (0: 64), a
// fresh registry, and clk (nil: the real clock).
func newNode(t *testing.T, s *store.Store, clk *clock, capacity int, mod func(*Config)) *Node {
	t.Helper()
	if capacity == 0 {
		capacity = 64
	}
	pub, err := status.New(status.Config{Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: s, Table: pub, Registerer: prometheus.NewRegistry(), Logger: storetest.Logger(t)}
	if clk != nil {
		cfg.Now = clk.Now
	}
	if mod != nil {
		mod(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("publish.New: %v", err)
	}
	return n
}

func (h *harness) apply(svcs ...wire.Service) {
	h.t.Helper()
	if _, err := h.st.ApplyServices(h.t.Context(), "admin", svcs); err != nil {
		h.t.Fatalf("ApplyServices: %v", err)
	}
}

func (h *harness) register(r wire.Registration) wire.Instance {
	h.t.Helper()
	in, _, err := h.st.Register(h.t.Context(), "registrar", r)
	if err != nil {
		h.t.Fatalf("Register %s: %v", r.ID, err)
	}
	return in
}

func tcpService(ns, name string) wire.Service {
	return wire.Service{Namespace: ns, Name: name,
		Ports:  []wire.Port{{Name: "main", Number: 8080}},
		Check:  &wire.Check{Type: "tcp"},
		Policy: wire.Policy{LeaseTTL: wire.Duration(time.Hour)}}
}

func reg(svc wire.Service, id, addr string) wire.Registration {
	return wire.Registration{Namespace: svc.Namespace, Service: svc.Name, ID: id,
		Addresses: []string{addr}, Ports: map[string]int{"main": 8080}}
}

// fleet registers n instances of svc, ids prefix0…, addresses
// 10.0.0.1…
func (h *harness) fleet(svc wire.Service, prefix string, n int) []wire.Instance {
	h.t.Helper()
	out := make([]wire.Instance, n)
	for i := range out {
		out[i] = h.register(reg(svc, fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf("10.0.0.%d", i+1)))
	}
	return out
}

// tick advances the clock by d and runs one round, with no evaluation
// in it.
func (h *harness) tick(d time.Duration) {
	h.t.Helper()
	h.clk.Advance(d)
	h.n.Tick(h.t.Context(), nil)
}

// entry returns in's entry in the current table, failing when the table
// does not hold it.
func (h *harness) entry(in wire.Instance) status.Entry {
	h.t.Helper()
	e, ok := h.n.Status(in.Key().String(), in.Incarnation)
	if !ok {
		h.t.Fatalf("the table holds no entry for %s#%d", in.Key(), in.Incarnation)
	}
	return e
}

// wantEntry checks in's entry's verdict and eligibility, and returns it.
func (h *harness) wantEntry(in wire.Instance, verdict status.Verdict, eligible bool) status.Entry {
	h.t.Helper()
	e := h.entry(in)
	if e.Verdict != verdict || e.Flags.Has(status.Eligible) != eligible || (e.Weight > 0) != eligible {
		h.t.Fatalf("%s: table entry %+v (flags %v), want %v, eligible=%t", in.ID, e, e.Flags, verdict, eligible)
	}
	return e
}

// wantSlot checks that the current table holds in, in its slot, and
// returns the slot.
func (h *harness) wantSlot(in wire.Instance) int {
	h.t.Helper()
	slot, ok := h.n.Slot(in.Key().String())
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
