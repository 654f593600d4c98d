package store_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestBudgetRefusalCommitsNothing: the leader refuses a drain or a
// deregistration past the budget before proposing it, so the revision
// does not move; ForceDrain goes through and is audited; Budget shows
// what holds the budget.
func TestBudgetRefusalCommitsNothing(t *testing.T) {
	n := storetest.Single(t, store.Config{})
	ctx := t.Context()
	svc := webService(time.Hour)
	svc.Policy.MaxUnavailable = "1"
	mustApply(t, n.Store, svc)
	a := mustRegister(t, n.Store, registration("a", "10.0.0.1"))
	b := mustRegister(t, n.Store, registration("b", "10.0.0.2"))
	if _, err := n.Drain(ctx, "admin", key("a"), a.Incarnation); err != nil {
		t.Fatal(err)
	}
	rev := n.Revision()
	if _, err := n.Drain(ctx, "admin", key("b"), b.Incarnation); !errors.Is(err, store.ErrBudget) ||
		!strings.Contains(err.Error(), "drain of prod/web/b refused: disruption budget max_unavailable 1 of 2 instances is used by a (draining)") {
		t.Errorf("drain past the budget: %v, want ErrBudget naming the budget", err)
	}
	if _, err := n.Deregister(ctx, "admin", key("b"), b.Incarnation); !errors.Is(err, store.ErrBudget) {
		t.Errorf("deregistration past the budget: %v, want ErrBudget", err)
	}
	if got := n.Revision(); got != rev {
		t.Errorf("refusals moved the revision from %d to %d", rev, got)
	}
	if _, err := n.ForceDrain(ctx, "admin", key("b"), b.Incarnation); err != nil {
		t.Fatalf("ForceDrain: %v", err)
	}
	ev := n.Events("prod", "web", 2)
	if len(ev) != 2 || ev[0].Kind != wire.EventBudgetOverridden || ev[0].Actor != "admin" || ev[1].Kind != wire.EventDrained {
		t.Errorf("events after the forced drain: %+v, want budget_overridden by admin, then drained", ev)
	}
	d, ok := n.Budget("prod", "web")
	if !ok || d.MaxUnavailable != "1" || d.Default || d.Instances != 2 || d.Limit != 1 || d.InUse != 2 ||
		d.Unavailable[0].InstanceID != "a" || d.Unavailable[1].Why != "draining" {
		t.Errorf("Budget = %+v, %t", d, ok)
	}
	if _, ok := n.Budget("prod", "nope"); ok {
		t.Error("Budget of an unknown service")
	}
}
