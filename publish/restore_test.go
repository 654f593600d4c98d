package publish

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestSyncedFollowsBuilds: Synced is the time of the last table built,
// and no later than the store's last contact with a leader.
func TestSyncedFollowsBuilds(t *testing.T) {
	h := newHarness(t, 0, nil)
	if !h.n.Synced().IsZero() {
		t.Fatalf("Synced before the first table: %v, want zero", h.n.Synced())
	}
	h.tick(0)
	first := h.n.Synced()
	h.tick(3 * time.Second)
	if got := h.n.Synced(); !got.Equal(first.Add(3 * time.Second)) {
		t.Errorf("Synced after a build 3s later: %v, want %v", got, first.Add(3*time.Second))
	}
}

// TestRestoreServesTheKeptTable: a Node given the table it kept on disk
// publishes it at once, reports it restored and as synced when it was
// saved; the first round after the store has caught up replaces it with
// a table built from the store.
func TestRestoreServesTheKeptTable(t *testing.T) {
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	in := h.fleet(svc, "a", 1)[0]
	h.tick(0)
	kept := h.pub.Acquire()
	snap := tablefile.Take(kept, h.clk.Now().Add(-time.Minute), h.clk.Now())
	kept.Release()

	n := newNode(t, h.st.Store, h.clk, 0, func(c *Config) { c.Restore = snap })
	if !n.Restored() || !n.Synced().Equal(snap.Synced) {
		t.Fatalf("restored %v synced %v; want true, %v", n.Restored(), n.Synced(), snap.Synced)
	}
	tbl := n.cfg.Table.Acquire()
	slot := slices.IndexFunc(snap.Entries, func(se tablefile.SlotEntry) bool { return se.Instance.ID == in.ID })
	if tbl == nil || slot < 0 || tbl.Entry(snap.Entries[slot].Slot).Incarnation != in.Incarnation {
		t.Fatalf("the kept table is not published")
	}
	tbl.Release()
	n.Tick(t.Context(), nil)
	if n.Restored() {
		t.Errorf("still restored after a round with the store caught up")
	}
	if e, ok := n.Status(in.Key().String(), in.Incarnation); !ok || !e.Flags.Has(status.Eligible) {
		t.Errorf("after the round: %+v %v, want the instance from the store", e, ok)
	}
}

// TestRestoredUntilCaughtUp: a node whose store never hears from a leader
// keeps serving the table it kept on disk, round after round, and stamps
// nothing on it: WaitPublished does not pass on a table it has not built.
func TestRestoredUntilCaughtUp(t *testing.T) {
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	h.fleet(svc, "a", 1)
	h.tick(0)
	kept := h.pub.Acquire()
	snap := tablefile.Take(kept, h.clk.Now(), h.clk.Now())
	kept.Release()

	lone := storetest.Lone(t, store.Config{NodeID: "n9", Now: h.clk.Now})
	n := newNode(t, lone.Store, h.clk, 0, func(c *Config) { c.Restore = snap })
	for range 3 {
		h.clk.Advance(time.Second)
		n.Tick(t.Context(), nil)
		n.publishWithdrawals(t.Context())
	}
	if !n.Restored() {
		t.Fatal("no longer restored, with a store that never caught up")
	}
	tbl := n.cfg.Table.Acquire()
	if tbl.StoreRevision() != snap.Revision || tbl.Version() != 1 {
		t.Errorf("table at revision %d, version %d; want the kept one (revision %d, version 1)", tbl.StoreRevision(), tbl.Version(), snap.Revision)
	}
	tbl.Release()
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := n.WaitPublished(ctx, snap.Revision+1); err == nil {
		t.Errorf("WaitPublished(%d) passed on the kept table", snap.Revision+1)
	}
}

// TestRestoreSkipsAnEmptyTable: a table kept before the store had
// applied anything (revision 0: the node stopped within its first save
// interval) knows of no service; served, it would tell every DNS and xDS
// client that none exists. The node neither publishes it nor reports
// itself restored.
func TestRestoreSkipsAnEmptyTable(t *testing.T) {
	h := newHarness(t, 0, nil)
	snap := &tablefile.Snapshot{Revision: 0, Synced: h.clk.Now(), Saved: h.clk.Now(), Capacity: 8}
	lone := storetest.Lone(t, store.Config{NodeID: "n9", Now: h.clk.Now})
	n := newNode(t, lone.Store, h.clk, 0, func(c *Config) { c.Restore = snap })
	if n.Restored() {
		t.Error("a kept table of revision 0 is reported restored")
	}
	if tbl := n.cfg.Table.Acquire(); tbl != nil {
		tbl.Release()
		t.Error("a kept table of revision 0 is published")
	}
}

// TestServing: /readyz's test. A node serves once a table is published —
// built from its caught-up store, or the one kept on disk — and says why
// not before: the store not caught up, or the first table not built yet.
func TestServing(t *testing.T) {
	h := newHarness(t, 0, nil)
	err := h.n.Serving(0)
	if err == nil || !strings.Contains(err.Error(), "first table is being built") {
		t.Fatalf("Serving before the first round, store caught up: %v; want the first table being built", err)
	}
	svc := tcpService("shop", "cart")
	h.apply(svc)
	h.fleet(svc, "a", 1)
	h.tick(0)
	if err := h.n.Serving(0); err != nil {
		t.Fatalf("Serving after the first round: %v", err)
	}
	// Past max-stale DNS answers SERVFAIL: not serving.
	h.clk.Advance(time.Minute)
	if err := h.n.Serving(time.Minute); err != nil {
		t.Errorf("Serving a table a minute old, max-stale 1m: %v", err)
	}
	h.clk.Advance(time.Second)
	if err := h.n.Serving(time.Minute); err == nil || !strings.Contains(err.Error(), "past --max-stale") {
		t.Errorf("Serving a table 61s old, max-stale 1m: %v; want past max-stale", err)
	}
	kept := h.pub.Acquire()
	snap := tablefile.Take(kept, h.clk.Now(), h.clk.Now())
	kept.Release()

	// A node whose store never hears from a leader: not serving without a
	// kept table, serving (stale) with one.
	lone := storetest.Lone(t, store.Config{NodeID: "n9", Now: h.clk.Now})
	bare := newNode(t, lone.Store, h.clk, 0, nil)
	bare.Tick(t.Context(), nil)
	if err := bare.Serving(0); err == nil || !strings.Contains(err.Error(), "not caught up") {
		t.Errorf("Serving without a leader or a kept table: %v; want not caught up", err)
	}
	restored := newNode(t, lone.Store, h.clk, 0, func(c *Config) { c.Restore = snap })
	if err := restored.Serving(0); err != nil {
		t.Errorf("Serving the kept table: %v", err)
	}
}

// TestSignalOnTheKeptTable: a node restarted while its cluster has no
// quorum serves the table it kept; the out-of-band signal's failover of
// its region applies to that table all the same, once, and its end
// returns the region at the default shift_back.
func TestSignalOnTheKeptTable(t *testing.T) {
	h := newHarness(t, 0, nil)
	a1, x1 := h.inTwoRegions(tcpService("shop", "cart"))
	kept := h.pub.Acquire()
	snap := tablefile.Take(kept, h.clk.Now(), h.clk.Now())
	kept.Release()

	sig := &fakeSignal{fos: []wire.Evacuation{{Region: "r1", To: "r2"}}}
	lone := storetest.Lone(t, store.Config{NodeID: "n9", Now: h.clk.Now})
	n := newNode(t, lone.Store, h.clk, 0, func(c *Config) { c.Restore = snap; c.Signal = sig })
	entry := func(in wire.Instance) status.Entry {
		t.Helper()
		tbl := n.cfg.Table.Acquire()
		defer tbl.Release()
		i := slices.IndexFunc(snap.Entries, func(se tablefile.SlotEntry) bool { return se.Instance.ID == in.ID })
		return tbl.Entry(snap.Entries[i].Slot)
	}
	n.Tick(t.Context(), nil)
	if e := entry(a1); !e.Evacuated() {
		t.Fatalf("a1 of r1, failed over by the signal, on the kept table: %+v, want evacuated", e)
	}
	if e := entry(x1); e.Shift != 0 {
		t.Fatalf("x1 of r2: shift %d, want 0", e.Shift)
	}
	tbl := n.cfg.Table.Acquire()
	v := tbl.Version()
	tbl.Release()
	h.clk.Advance(time.Second)
	n.Tick(t.Context(), nil)
	if tbl := n.cfg.Table.Acquire(); tbl.Version() != v {
		t.Errorf("the same shifts published again: version %d after %d", tbl.Version(), v)
		tbl.Release()
	} else {
		tbl.Release()
	}
	sig.mu.Lock()
	sig.fos[0].EndedAt = h.clk.Now()
	sig.mu.Unlock()
	h.clk.Advance(wire.DefaultShiftBack / 2)
	n.Tick(t.Context(), nil)
	if e := entry(a1); e.Shift != 40 {
		t.Fatalf("a1 halfway through its return: shift %d, want 40", e.Shift)
	}
	if !n.Restored() {
		t.Fatal("no longer restored")
	}
}
