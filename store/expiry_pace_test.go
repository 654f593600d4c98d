package store_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

func heldEvents(n *store.Store) []wire.Event {
	var out []wire.Event
	for _, e := range n.Events("prod", "web", 0) {
		if e.Kind == wire.EventExpiryHeld {
			out = append(out, e)
		}
	}
	return out
}

func allExpired(n *store.Store) []string {
	var out []string
	for _, e := range n.Events("prod", "web", 0) {
		if e.Kind == wire.EventExpired {
			out = append(out, e.Instance)
		}
	}
	return out
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("%s is not registered", name)
	return 0
}

// TestHardExpiriesPacedByShrinkCap: when every registration of a service
// is past its hard expiry at once, the leader ends them a shrink cap's
// worth per window (at least one), says so in one audit event per window,
// and ends the rest in later windows: none is kept for ever. A lease
// already past its hard expiry when the control plane went quiet gets no
// grace from the next leader.
func TestHardExpiriesPacedByShrinkCap(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	cfg := store.Config{DataDir: dir, Now: clk.Now, Registerer: reg}
	n := storetest.Single(t, cfg)
	mustApply(t, n.Store, webService(time.Hour)) // lease_ttl 30s, shrink_cap 0.33
	for _, id := range []string{"a", "b", "c", "d"} {
		mustRegister(t, n.Store, registration(id, "10.0.0.1"))
	}

	// All four past their hard expiry (2m30s) together: 0.33 × 4 rounds
	// to one a window.
	clk.Advance(3 * time.Minute)
	storetest.WaitFor(t, wait, func() error {
		if got := heldEvents(n.Store); len(got) != 1 {
			return fmt.Errorf("%d expiry_held events, want 1", len(got))
		}
		return nil
	})
	if got := allExpired(n.Store); len(got) != 1 {
		t.Fatalf("expired in the first window: %v, want exactly one (the shrink cap's share of 4, at least one)", got)
	}
	e := heldEvents(n.Store)[0]
	if !strings.Contains(e.Reason, "3 hard expiries held back by the shrink cap") || !strings.Contains(e.Reason, "at most 1 of 4") || e.Actor != "node:n1" {
		t.Errorf("held event %+v: want the count held back, the cap and the actor", e)
	}
	if g := gauge(t, reg, "cairn_store_hard_expiries_held"); g != 3 {
		t.Errorf("cairn_store_hard_expiries_held = %g, want 3", g)
	}
	// A held registration is over all the same: its renewal is refused,
	// and registering it again starts a new incarnation, never revives
	// the old one.
	held := ""
	for _, id := range []string{"a", "b", "c", "d"} {
		if !slices.Contains(allExpired(n.Store), id) {
			held = id
			break
		}
	}
	old, _ := n.Instance(key(held))
	if _, err := n.Renew(t.Context(), key(held), old.Incarnation); !errors.Is(err, store.ErrFenced) {
		t.Errorf("renewing %s, held back past its hard expiry: %v, want ErrFenced", held, err)
	}
	again, created, err := n.Register(t.Context(), "registrar", registration(held, "10.0.0.1"))
	if err != nil || !created || again.Incarnation <= old.Incarnation {
		t.Fatalf("registering %s again: incarnation %d created %t err %v; want a new incarnation after %d", held, again.Incarnation, created, err, old.Incarnation)
	}

	// The next window ends one more (the registration ended another).
	clk.Advance(store.ExpiryWindow)
	storetest.WaitFor(t, wait, func() error {
		if got := allExpired(n.Store); len(got) != 3 {
			return fmt.Errorf("expired after the second window opened: %v, want three", got)
		}
		if got := heldEvents(n.Store); len(got) != 2 {
			return fmt.Errorf("%d expiry_held events, want one a window", len(got))
		}
		return nil
	})

	// The node stops and comes back much later: the one left was past
	// its hard expiry before it went quiet, so it gets no grace and ends;
	// the new incarnation, live when it went quiet, gets its grace.
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Hour)
	n = storetest.Single(t, store.Config{DataDir: dir, Now: clk.Now})
	storetest.WaitFor(t, wait, func() error {
		if got := allExpired(n.Store); len(got) != 4 {
			return fmt.Errorf("expired after the restart: %v, want four", got)
		}
		return nil
	})
	seen := map[string]bool{}
	for _, id := range allExpired(n.Store) {
		seen[id] = true
	}
	if len(seen) != 4 {
		t.Errorf("expired %v, want each of a, b, c, d once", allExpired(n.Store))
	}
	if got, _ := n.Instance(key(held)); got.Incarnation != again.Incarnation || got.Lifecycle == status.Terminated {
		t.Errorf("%s re-registered before the outage: %+v; want incarnation %d live, with the takeover's grace", held, got, again.Incarnation)
	}
}
