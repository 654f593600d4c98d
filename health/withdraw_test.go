package health

import (
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestRoundPublishesWithdrawalsInItsPauses: a paced round pauses between
// services, and a withdrawal applied meanwhile is published from the
// pause, not after the round (SPEC §2: within 100 ms; a round of many
// instances lasts longer than that once paced).
func TestRoundPublishesWithdrawalsInItsPauses(t *testing.T) {
	h, clk, carts := pacedFleet(t)
	if _, err := h.st.Drain(t.Context(), "admin", carts[0].Key(), carts[0].Incarnation); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	h.n.evaluate(t.Context(), h.n.cfg.Now()) // the round alone: no build after it
	if e := h.entry(carts[0]); e.Flags.Has(status.Eligible) {
		t.Errorf("drained %s still eligible after a round that paused: %+v", carts[0].ID, e)
	}
	if got := h.metric("cairn_health_withdrawals_published_total"); got != 1 {
		t.Errorf("cairn_health_withdrawals_published_total = %v, want 1", got)
	}
}

// TestRoundBuildsFromTheReplicaItPublished: a drain applied after a
// round took its catalog is published from the round's pause; the table
// the round then builds keeps it withdrawn and is stamped no older than
// the revision already published. (The round once built from the
// catalog it began with when it committed nothing itself: the drained
// instance went back into rotation for a round, in a table whose store
// revision went backwards.)
func TestRoundBuildsFromTheReplicaItPublished(t *testing.T) {
	h, clk, carts := pacedFleet(t)
	clk.Advance(time.Second)
	h.n.pub.Refresh() // the round's catalog, taken before the drain
	if _, err := h.st.Drain(t.Context(), "admin", carts[0].Key(), carts[0].Incarnation); err != nil {
		t.Fatal(err)
	}
	drained := h.st.Revision()
	h.n.round(t.Context(), h.n.cfg.Now())
	if got := h.metric("cairn_health_withdrawals_published_total"); got != 1 {
		t.Errorf("cairn_health_withdrawals_published_total = %v, want 1 (from the round's pause)", got)
	}
	tbl := h.n.pub.Table().Acquire()
	defer tbl.Release()
	if got := tbl.StoreRevision(); got < drained {
		t.Errorf("the round's table is stamped revision %d, older than the drain's %d it published before", got, drained)
	}
	if e := h.entry(carts[0]); e.Flags.Has(status.Eligible) || e.Lifecycle != status.Draining {
		t.Errorf("drained %s after the round: %+v; want draining, not eligible", carts[0].ID, e)
	}
}

// pacedFleet is a node whose rounds pause after every service, with two
// services of two instances each, all eligible after a first round.
// Every slice is spent at once; the clock moves a nanosecond a read, so
// that the pacer sees time pass, and the evaluation's seconds do not
// notice.
func pacedFleet(t *testing.T) (*harness, *clock, []wire.Instance) {
	t.Helper()
	clk := newClock()
	var ticks time.Duration
	h := newHarness(t, clk, 0, func(c *Config) {
		c.Slice = time.Nanosecond
		c.Now = func() time.Time { ticks++; return clk.Now().Add(ticks) }
	})
	cart, pay := tcpService("shop", "cart"), tcpService("shop", "pay")
	h.apply(cart, pay)
	carts := h.fleet(cart, "c", 2)
	h.fleet(pay, "p", 2)
	h.tick(0)
	if e := h.entry(carts[0]); !e.Flags.Has(status.Eligible) {
		t.Fatalf("%s not eligible before the drain: %+v", carts[0].ID, e)
	}
	return h, clk, carts
}
