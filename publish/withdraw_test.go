package publish

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cairn-sd/cairn/status"
)

// TestWithdrawalsPublishedOnCommit: a drain, a deregistration and a
// re-registration are out of the table as soon as the store has applied
// them, before any build; an admission applied meanwhile waits for the
// next build; WaitPublished returns once the table has the revision.
func TestWithdrawalsPublishedOnCommit(t *testing.T) {
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	svc.Policy.MaxUnavailable = "2" // not a test of budgets: one drains, one goes
	h.apply(svc)
	fleet := h.fleet(svc, "a", 4)
	h.tick(0)
	for _, in := range fleet {
		if e := h.entry(in); !e.Flags.Has(status.Eligible) {
			t.Fatalf("%s not eligible before the drain: %+v", in.ID, e)
		}
	}
	ctx := t.Context()
	if _, err := h.st.Drain(ctx, "admin", fleet[0].Key(), fleet[0].Incarnation); err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.Deregister(ctx, "admin", fleet[1].Key(), fleet[1].Incarnation); err != nil {
		t.Fatal(err)
	}
	r := reg(svc, fleet[2].ID, "10.0.9.9") // a new address: a new incarnation
	r.Replaces = fleet[2].Incarnation
	h.register(r)
	late := h.register(reg(svc, "late", "10.0.0.99")) // an admission
	rev := h.st.Revision()

	select {
	case <-h.st.Withdrawn():
	default:
		t.Fatal("the store did not signal the withdrawals")
	}
	h.n.publishWithdrawals(ctx)
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := h.n.WaitPublished(wctx, rev); err != nil {
		t.Fatalf("WaitPublished(%d): %v", rev, err)
	}
	if e := h.entry(fleet[0]); e.Flags.Has(status.Eligible) || e.Lifecycle != status.Draining {
		t.Errorf("drained %s: %+v, want not eligible, draining", fleet[0].ID, e)
	}
	if e := h.entry(fleet[1]); e.Flags.Has(status.Eligible) || e.Lifecycle != status.Terminated {
		t.Errorf("deregistered %s: %+v, want not eligible, terminated", fleet[1].ID, e)
	}
	tbl := h.pub.Acquire()
	slot := h.wantSlot(fleet[2])
	if e := tbl.Entry(slot); e.Flags.Has(status.Eligible) {
		t.Errorf("replaced incarnation %d of %s is still eligible: %+v", fleet[2].Incarnation, fleet[2].ID, e)
	}
	tbl.Release()
	if e := h.entry(fleet[3]); !e.Flags.Has(status.Eligible) {
		t.Errorf("untouched %s: %+v, want eligible", fleet[3].ID, e)
	}
	if _, ok := h.n.Status(late.Key().String(), late.Incarnation); ok {
		t.Errorf("the admission of %s was published with the withdrawals", late.ID)
	}
	if got := testutil.ToFloat64(h.n.m.fastWithdrawals); got != 3 {
		t.Errorf("cairn_health_withdrawals_published_total = %v, want 3", got)
	}
	// The next round admits it.
	h.tick(0)
	if e := h.entry(late); !e.Flags.Has(status.Eligible) {
		t.Errorf("%s after the next build: %+v, want eligible", late.ID, e)
	}
}

// TestWithdrawalOfAnInstanceTheRefreshDropped: a deregistration the
// catalog refresh read before the loop took it from the feed (it landed
// as the round began) has no slot in the loop's map any more, but the
// published table still serves it: the withdrawal is published through
// the table's own directory. (It was skipped, in a table stamped with
// its revision: WaitPublished returned while the node still served the
// instance, until the build.)
func TestWithdrawalOfAnInstanceTheRefreshDropped(t *testing.T) {
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	fleet := h.fleet(svc, "a", 2)
	h.tick(0)
	if _, err := h.st.Deregister(t.Context(), "admin", fleet[0].Key(), fleet[0].Incarnation); err != nil {
		t.Fatal(err)
	}
	rev := h.st.Revision()
	h.n.Refresh() // the round's first refresh, before the loop took the withdrawal
	if _, ok := h.n.Slot(fleet[0].Key().String()); ok {
		t.Fatalf("the refresh kept %s's slot: the case is not made", fleet[0].ID)
	}
	h.n.publishWithdrawals(t.Context())
	tbl := h.pub.Acquire()
	got := tbl.StoreRevision()
	tbl.Release()
	if got < rev {
		t.Fatalf("published revision %d, want at least the deregistration's %d", got, rev)
	}
	if e := h.entry(fleet[0]); e.Flags.Has(status.Eligible) {
		t.Errorf("deregistered %s still eligible in a table of revision %d: %+v", fleet[0].ID, got, e)
	}
	h.wantEntry(fleet[1], status.Unknown, true)
}

// TestWaitPublishedWaits: WaitPublished returns only once a table at the
// revision is published, and asks the loop for one.
func TestWaitPublishedWaits(t *testing.T) {
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	h.fleet(svc, "a", 2)
	h.tick(0)
	h.register(reg(svc, "b", "10.0.5.5")) // an entry with no withdrawal
	rev := h.st.Revision()
	done := make(chan error, 1)
	go func() { done <- h.n.WaitPublished(t.Context(), rev) }()
	select {
	case err := <-done:
		t.Fatalf("WaitPublished(%d) returned %v before a table at it was published", rev, err)
	case <-h.n.nudge: // it asked the loop to publish
	case <-time.After(10 * time.Second):
		t.Fatal("WaitPublished never asked the loop to publish")
	}
	h.n.publishWithdrawals(t.Context()) // what the loop does when asked
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("WaitPublished did not return once the table had the revision")
	}
}

// TestWithdrawalNeverEmptiesAServiceWithInstances: one instance
// re-registered (a new incarnation: its old one is withdrawn on commit,
// the new one admitted at the next build), then the other deregistered,
// both before a build. Copying the table with the withdrawals would
// publish the service with nothing in rotation while the store has an
// instance of it (the xDS tier restart scenario sent 134 subscribers an
// empty assignment that way: field notes X6): the table is rebuilt from
// the replica instead, with the new incarnation in it.
func TestWithdrawalNeverEmptiesAServiceWithInstances(t *testing.T) {
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	svc.Policy.MaxUnavailable = "2" // not a test of budgets
	h.apply(svc)
	fleet := h.fleet(svc, "a", 2)
	h.tick(0)
	ctx := t.Context()
	r := reg(svc, fleet[0].ID, "10.0.9.9") // a new address: a new incarnation
	r.Replaces = fleet[0].Incarnation
	again := h.register(r)
	if _, err := h.st.Deregister(ctx, "admin", fleet[1].Key(), fleet[1].Incarnation); err != nil {
		t.Fatal(err)
	}
	rev := h.st.Revision()
	h.n.publishWithdrawals(ctx)
	tbl := h.pub.Acquire()
	got := tbl.StoreRevision()
	tbl.Release()
	if got < rev {
		t.Fatalf("published revision %d, want at least the deregistration's %d", got, rev)
	}
	if e, ok := h.n.Status(again.Key().String(), again.Incarnation); !ok || !e.Flags.Has(status.Eligible) {
		t.Errorf("the new incarnation %d of %s: %+v (%v), want published eligible", again.Incarnation, again.ID, e, ok)
	}
	if e, ok := h.n.Status(fleet[1].Key().String(), fleet[1].Incarnation); ok && e.Flags.Has(status.Eligible) {
		t.Errorf("deregistered %s still eligible: %+v", fleet[1].ID, e)
	}
	if got := testutil.ToFloat64(h.n.m.emptyingRebuilds); got != 1 {
		t.Errorf("cairn_health_withdrawal_rebuilds_total = %v, want 1", got)
	}
}

// TestPublishPendingLeavesTheCatalogAlone: the round's PublishPending,
// called while the evaluation reads the catalog, never refreshes it: a
// withdrawal that would empty a service (one that needs a rebuild from
// the replica) publishes nothing then, and the round's own build
// publishes it. A refresh there wrote the new catalog over the
// instances the evaluation was reading (in the xDS bench's burst the
// evaluator panicked on an id out of range, and the node hung).
func TestPublishPendingLeavesTheCatalogAlone(t *testing.T) {
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	svc.Policy.MaxUnavailable = "2" // not a test of budgets
	h.apply(svc)
	fleet := h.fleet(svc, "a", 1)
	h.tick(0)
	before := h.n.Catalog().Rev
	svcs := h.n.Catalog().Services // what the round ranges over
	var keys []string
	for _, cs := range svcs {
		for _, in := range cs.Instances {
			keys = append(keys, in.Key)
		}
	}
	ctx := t.Context()
	if _, err := h.st.Deregister(ctx, "admin", fleet[0].Key(), fleet[0].Incarnation); err != nil {
		t.Fatal(err)
	}
	h.n.PublishPending(ctx) // the round's call, mid-evaluation
	if got := h.n.Catalog().Rev; got != before {
		t.Errorf("PublishPending refreshed the catalog: revision %d, was %d", got, before)
	}
	var after []string
	for _, cs := range svcs {
		for _, in := range cs.Instances {
			after = append(after, in.Key)
		}
	}
	if !slices.Equal(after, keys) {
		t.Errorf("the catalog the round holds was written over: its instances %v, were %v", after, keys)
	}
	if got := testutil.ToFloat64(h.n.m.emptyingRebuilds); got != 0 {
		t.Errorf("cairn_health_withdrawal_rebuilds_total = %v, want 0 (the round builds)", got)
	}
	// The round's build publishes the withdrawal.
	h.tick(0)
	if e, ok := h.n.Status(fleet[0].Key().String(), fleet[0].Incarnation); ok && e.Flags.Has(status.Eligible) {
		t.Errorf("deregistered %s still eligible after the round: %+v", fleet[0].ID, e)
	}
}
