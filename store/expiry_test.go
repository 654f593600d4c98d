package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// manualCluster starts n nodes (n1 bootstrapping, the others joined as
// voters) on connected in-memory transports, each with edit applied to
// its Config, and returns them once n1 is a ready leader of all n.
func manualCluster(t *testing.T, n int, edit func(*store.Config)) []*node {
	t.Helper()
	var nodes []*node
	for i := 1; i <= n; i++ {
		cfg := storetest.Fast(store.Config{NodeID: fmt.Sprintf("n%d", i), HTTPAddr: fmt.Sprintf("127.0.0.1:%d", i), Bootstrap: i == 1})
		if edit != nil {
			edit(&cfg)
		}
		nodes = append(nodes, startNode(t, cfg))
	}
	for _, a := range nodes {
		for _, b := range nodes {
			if a != b {
				a.trans.Connect(b.trans.LocalAddr(), b.trans)
			}
		}
	}
	n1 := nodes[0]
	storetest.WaitFor(t, wait, func() error {
		if !n1.LeaderReady() {
			return fmt.Errorf("n1 is %s", n1.State())
		}
		return nil
	})
	for _, nd := range nodes[1:] {
		if err := n1.Join(t.Context(), "test", wire.Member{NodeID: nd.NodeID(), RaftAddr: nd.RaftAddr(), HTTPAddr: "127.0.0.1:9"}); err != nil {
			t.Fatalf("joining %s: %v", nd.NodeID(), err)
		}
	}
	return nodes
}

// rawDeadline is the lease deadline n's replica records for key, without
// the leader's unreplicated renewals.
func rawDeadline(n *node, k wire.InstanceKey) time.Time {
	for _, in := range n.AllInstances() {
		if in.Key() == k {
			return in.LeaseDeadline
		}
	}
	return time.Time{}
}

// housekept returns once leader has committed a housekeeping entry that
// judged every lease at the clock's present time or later: it renews
// sentinel (whose lease outlives the test) and waits until the renewal is
// replicated, because the entry that carries a renewal reads the clock
// after taking it. The clock must have moved since the last call.
func housekept(t *testing.T, leader *node, sentinel wire.Instance) {
	t.Helper()
	before := rawDeadline(leader, sentinel.Key())
	r, err := leader.Renew(t.Context(), sentinel.Key(), sentinel.Incarnation)
	if err != nil {
		t.Fatalf("renewing the sentinel: %v", err)
	}
	if !r.LeaseDeadline.After(before) {
		t.Fatalf("the sentinel's renewal did not move its deadline %v: the clock has not moved", before)
	}
	storetest.WaitFor(t, wait, func() error {
		if got := rawDeadline(leader, sentinel.Key()); got.Before(r.LeaseDeadline) {
			return fmt.Errorf("sentinel renewal to %v not checkpointed yet (recorded %v)", r.LeaseDeadline, got)
		}
		return nil
	})
}

func hardExpiries(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "cairn_store_hard_expiries_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("cairn_store_hard_expiries_total is not registered")
	return 0
}

func expiredEvents(n *node, id string) []wire.Event {
	var out []wire.Event
	for _, e := range n.Events("prod", "web", 0) {
		if e.Kind == wire.EventExpired && e.Instance == id {
			out = append(out, e)
		}
	}
	return out
}

// TestClusterHardExpiry: a ready instance of a readiness: self service
// whose lease is never renewed is terminated on every node, with an audit
// event saying why, once its lease is 5 × TTL past its last renewal, and
// not a moment before; a renewal just before the hard expiry prevents it;
// and a renewal after it is refused.
func TestClusterHardExpiry(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	regs := map[string]*prometheus.Registry{}
	nodes := manualCluster(t, 3, func(c *store.Config) {
		c.Now = clk.Now
		regs[c.NodeID] = prometheus.NewRegistry()
		c.Registerer = regs[c.NodeID]
	})
	leader := nodes[0]
	ctx := t.Context()
	mustApply(t, leader.Store, webService(time.Hour)) // readiness: self, lease_ttl 30s
	a := mustRegister(t, leader.Store, registration("a", "10.0.0.1"))
	b := mustRegister(t, leader.Store, registration("b", "10.0.0.2"))
	long := registration("sentinel", "10.0.0.3")
	long.LeaseTTL = wire.Duration(wire.MaxLeaseTTL)
	sentinel := mustRegister(t, leader.Store, long)
	if a.Lifecycle != status.Ready || b.Lifecycle != status.Ready {
		t.Fatalf("registered %s and %s, want both ready", a.Lifecycle, b.Lifecycle)
	}

	// The hard expiry is 5 TTLs after the last renewal (the registration):
	// the deadline plus 4 TTLs.
	hx := leader.HardExpiry(a)
	if want := a.LeaseDeadline.Add(4 * a.LeaseTTL.D()); !hx.Equal(want) || !hx.Equal(a.RegisteredAt.Add(5*30*time.Second)) {
		t.Fatalf("HardExpiry = %v, want %v (5 × 30s after the registration at %v)", hx, want, a.RegisteredAt)
	}

	// Just before it: housekeeping judges both expired leases and leaves
	// them; b renews, reviving its lease.
	clk.Advance(hx.Sub(clk.Now()) - time.Millisecond)
	housekept(t, leader, sentinel)
	for _, id := range []string{"a", "b"} {
		if got, _ := leader.Instance(key(id)); got.Lifecycle != status.Ready {
			t.Fatalf("instance %s is %s 1ms before its hard expiry, want ready", id, got.Lifecycle)
		}
		if evs := expiredEvents(leader, id); len(evs) != 0 {
			t.Fatalf("instance %s expired before its hard expiry: %+v", id, evs)
		}
	}
	renewed, err := leader.Renew(ctx, key("b"), b.Incarnation)
	if err != nil {
		t.Fatalf("renewing b just before its hard expiry: %v", err)
	}

	// At the hard expiry: a is terminated everywhere, b is not.
	clk.Advance(time.Millisecond)
	for _, nd := range nodes {
		storetest.WaitFor(t, wait, func() error {
			got, _ := nd.Instance(key("a"))
			if got.Lifecycle != status.Terminated {
				return fmt.Errorf("%s: instance a is %s at its hard expiry", nd.NodeID(), got.Lifecycle)
			}
			if got.TerminatedAt.Before(hx) {
				t.Fatalf("%s: instance a terminated at %v, before its hard expiry %v", nd.NodeID(), got.TerminatedAt, hx)
			}
			return nil
		})
		if n := hardExpiries(t, regs[nd.NodeID()]); n != 1 {
			t.Errorf("%s: cairn_store_hard_expiries_total = %g, want 1", nd.NodeID(), n)
		}
		evs := expiredEvents(nd, "a")
		if len(evs) != 1 {
			t.Fatalf("%s: expiry events of a %+v, want one", nd.NodeID(), evs)
		}
		e := evs[0]
		if e.Incarnation != a.Incarnation || e.From != status.Ready.String() || e.To != status.Terminated.String() ||
			e.Actor != "node:n1" || !strings.Contains(e.Reason, "hard expiry") || !strings.Contains(e.Reason, "5 × lease_ttl") {
			t.Errorf("%s: expiry event %+v; want incarnation %d ready → terminated by node:n1, the reason naming the hard expiry",
				nd.NodeID(), e, a.Incarnation)
		}
	}
	housekept(t, leader, sentinel)
	for _, nd := range nodes {
		got, _ := nd.Instance(key("b"))
		if got.Lifecycle != status.Ready || got.LeaseDeadline.Before(renewed.LeaseDeadline) {
			t.Errorf("%s: b, renewed 1ms before its hard expiry, is %s with deadline %v; want ready, %v",
				nd.NodeID(), got.Lifecycle, got.LeaseDeadline, renewed.LeaseDeadline)
		}
		if evs := expiredEvents(nd, "b"); len(evs) != 0 {
			t.Errorf("%s: b expired although renewed: %+v", nd.NodeID(), evs)
		}
	}

	// The registration is over: a renewal is refused, a new registration
	// needs nothing from the old one.
	if _, err := leader.Renew(ctx, key("a"), a.Incarnation); !errors.Is(err, store.ErrFenced) {
		t.Errorf("renewing a after its hard expiry: %v, want ErrFenced", err)
	}
	again := mustRegister(t, leader.Store, registration("a", "10.0.0.9"))
	if again.Incarnation <= a.Incarnation || again.Lifecycle != status.Ready {
		t.Errorf("registering a again after its hard expiry: %+v", again)
	}
}

// TestRenewPastHardExpiryIsRefused: between the hard expiry and the
// housekeeping entry that records it, a renewal cannot revive the
// registration.
func TestRenewPastHardExpiryIsRefused(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	// Housekeeping too rare to run during the test (but once, on taking
	// over).
	n := manualCluster(t, 1, func(c *store.Config) { c.Now, c.LeaseCheckpoint = clk.Now, time.Hour })[0]
	mustApply(t, n.Store, webService(time.Hour))
	a := mustRegister(t, n.Store, registration("a", "10.0.0.1"))
	clk.Advance(n.HardExpiry(a).Sub(clk.Now()))
	if _, err := n.Renew(t.Context(), key("a"), a.Incarnation); !errors.Is(err, store.ErrFenced) || !strings.Contains(err.Error(), "hard expiry") {
		t.Fatalf("renewal at the hard expiry: %v, want ErrFenced naming the hard expiry", err)
	}
	if got, _ := n.Instance(key("a")); !got.LeaseDeadline.Equal(a.LeaseDeadline) {
		t.Errorf("a refused renewal moved the deadline from %v to %v", a.LeaseDeadline, got.LeaseDeadline)
	}
}
