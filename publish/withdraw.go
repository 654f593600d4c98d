package publish

import (
	"context"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
)

// publishWithdrawals publishes at once what the store's applied entries
// took out of rotation, without waiting for the next build (SPEC §2:
// withdrawals are published on commit, admissions on the next build).
// The new table is the current one with the withdrawn instances no longer
// eligible: nothing is admitted, no weight rises, and the work is one
// copy of the table whatever was withdrawn. It runs on the loop's
// goroutine, between rounds.
func (n *Node) publishWithdrawals(ctx context.Context) { n.publishWithdrawalsFrom(ctx, true) }

// publishWithdrawalsFrom is publishWithdrawals; without rebuild, a
// withdrawal that needs the table rebuilt from the replica (the feed
// overflowed, or the copy would empty a service) publishes nothing: the
// round that called it builds from the replica before it ends, and a
// rebuild here would refresh the catalog the round is reading.
func (n *Node) publishWithdrawalsFrom(ctx context.Context, rebuild bool) {
	if n.restored.Load() {
		// The kept table's slots are not this node's yet: the first
		// build after the store has caught up has every withdrawal.
		return
	}
	// Every withdrawal up to the replica's revision now is in the feed
	// (the store feeds an entry's withdrawals before its revision shows),
	// or was taken before: the table published here is complete in
	// withdrawals up to rev.
	rev := n.cfg.Store.Revision()
	_, ws, overflow := n.cfg.Store.TakeWithdrawals()
	if overflow {
		if !n.cfg.Store.CaughtUp() {
			// A replica still catching up holds a partial state: the
			// first round after it has caught up builds the table.
			return
		}
		// More than the feed holds: rebuild from the replica now (no
		// evaluation: that keeps its cadence).
		if rebuild {
			n.rebuildNow()
		}
		return
	}
	start := time.Now()
	cur := n.cfg.Table.Acquire()
	if cur == nil {
		return
	}
	base := cur.StoreRevision()
	if rev <= base {
		cur.Release()
		return // the current table was built from a replica that had them
	}
	hits := n.withdrawnSlots(cur, base, ws)
	if emptiesService(cur, hits) && n.cfg.Store.CaughtUp() {
		cur.Release()
		// The copy would publish a service with nothing in rotation,
		// while the replica may hold its admissions the copy leaves
		// out (one instance re-registered, then another deregistered,
		// within one build interval): rebuild from the replica now, so
		// that no subscriber is sent an empty view of a service that
		// has instances (field notes X6). Rare: only a withdrawal that
		// takes a service's last eligible entry pays for a build.
		if rebuild {
			n.m.emptyingRebuilds.Inc()
			n.rebuildNow()
		}
		return
	}
	defer cur.Release()
	withdrawn := 0
	_, err := n.cfg.Table.Build(func(b *status.Builder) error {
		es := b.Entries()
		for slot := range es {
			es[slot] = cur.Entry(slot)
		}
		for _, h := range hits {
			if h.slot >= len(es) {
				continue
			}
			e := &es[h.slot]
			if l := h.lifecycle; l != status.Ready {
				e.Lifecycle = l
			}
			if e.Flags.Has(status.Eligible) {
				withdrawn++
			}
			e.Weight = 0
			e.Flags &^= status.Eligible | status.SlowStart | status.HealthDisregarded | status.WithdrawalDeferred
		}
		b.SetStoreRevision(rev)
		return nil
	})
	if err != nil {
		n.m.buildFailures.Inc()
		n.log.Error("publishing withdrawals", "err", err)
		return
	}
	n.m.fastWithdrawals.Add(float64(withdrawn))
	n.m.withdrawSeconds.Observe(time.Since(start).Seconds())
}

// withdrawnHit is a slot of the current table a withdrawal takes out,
// and the lifecycle it leaves the instance in.
type withdrawnHit struct {
	slot      int
	lifecycle status.Lifecycle
}

// withdrawnSlots finds the slots of cur that the withdrawals ws applied
// after base take out: those that still hold the withdrawn incarnation.
func (n *Node) withdrawnSlots(cur *status.Table, base uint64, ws []store.Withdrawal) []withdrawnHit {
	var hits []withdrawnHit
	for _, w := range ws {
		if w.Rev <= base {
			continue
		}
		k := w.Key.String()
		slot, ok := n.w.Lookup(k)
		if !ok {
			// A refresh that read the withdrawal before the loop took it
			// (it landed as a round began) has freed the key's slot; the
			// table still serves it where its own directory says.
			s, found := cur.Directory().SlotOfKey(k)
			slot, ok = int(s), found
		}
		if !ok || slot >= cur.Capacity() {
			continue // never published
		}
		if e := cur.Entry(slot); e.Key != status.KeyHash(k) || e.Incarnation != w.Incarnation {
			continue
		}
		hits = append(hits, withdrawnHit{slot: slot, lifecycle: w.Lifecycle})
	}
	return hits
}

// emptiesService reports whether taking hits out of cur leaves a
// service that had an eligible entry among them with none.
func emptiesService(cur *status.Table, hits []withdrawnHit) bool {
	out := make(map[int]bool, len(hits))
	for _, h := range hits {
		out[h.slot] = true
	}
	checked := map[uint32]bool{}
	for _, h := range hits {
		e := cur.Entry(h.slot)
		if !e.Flags.Has(status.Eligible) || checked[e.Service] {
			continue
		}
		checked[e.Service] = true
		left := false
		for _, m := range cur.Members(e.Service) {
			if !out[int(m)] && cur.Entry(int(m)).Flags.Has(status.Eligible) {
				left = true
				break
			}
		}
		if !left {
			return true
		}
	}
	return false
}

// publishShift rebuilds the table from the replica at once, without an
// evaluation, after the store applied an entry that moved an evacuation
// (store.Shifted): an evacuation reaches the answers within a second
// (issue 30), not at the next round, and every node publishes a
// return's step when it applies it. It runs on the loop's goroutine,
// between rounds; it builds nothing when the last build's catalog was
// read at or after the shift (a round's build read it first). It asks
// the catalog, not the table: a withdrawal published on commit stamps
// a copy of the table with a newer revision without reading the replica,
// so the table's revision says nothing of the shift.
func (n *Node) publishShift() {
	if n.restored.Load() || !n.cfg.Store.CaughtUp() {
		return // the first round after the replica has caught up builds it
	}
	if n.laidOut && n.cat.Rev >= n.cfg.Store.ShiftRevision() {
		return
	}
	n.rebuildNow()
}

// publishOutside publishes a change from outside the store at once, not
// at the next round: another region's view (a withdrawal there reaches
// this region's callers as soon as its view does), or the out-of-band
// failover signal. Like publishShift, it waits for the first round
// after the replica has caught up.
func (n *Node) publishOutside() {
	if n.restored.Load() || !n.cfg.Store.CaughtUp() || !n.laidOut {
		n.signalRestored(n.cfg.Now())
		return
	}
	n.rebuildNow()
}

// rebuildNow refreshes the catalog from the replica and builds a table
// from it at once, outside the round's cadence (no evaluation), in the
// phases the bench and the metrics see.
func (n *Node) rebuildNow() {
	prev := n.Enter(PhaseRefresh)
	n.Refresh()
	n.Enter(PhaseBuild)
	n.build(n.cfg.Now())
	n.Enter(prev)
}

// PublishPending publishes, from the leader's round, the withdrawals
// (and answers the WaitPublished nudge) that arrived since the round
// began or last published: after the first catalog refresh, at the
// evaluation's pauses and after it. Paced, a round of many instances
// lasts tens of milliseconds or more, and a withdrawal is published on
// commit, not after the round (SPEC §2: within 100 ms). Only the round
// calls it, and only where a refresh follows before the build: a table
// built from a catalog read before a withdrawal published would put it
// back. The refreshes and the build are not at a point where a table may
// be published; what is applied during the second refresh and the
// build waits for the build's end.
//
// It never refreshes the catalog: the round reads it (the evaluation
// pauses in the middle of a service list), and a refresh writes the new
// catalog over the old one's instances. A withdrawal that needs a
// rebuild from the replica (the feed overflowed, or the copy would
// leave a service nothing in rotation) waits for the round's own build:
// in a burst that empties services, rebuilding here once rewrote the
// instances under the evaluation, which panicked (an id out of range)
// and hung the node.
func (n *Node) PublishPending(ctx context.Context) {
	select {
	case <-n.cfg.Store.Withdrawn():
	case <-n.nudge:
	default:
		return
	}
	n.publishWithdrawalsFrom(ctx, false)
}

// WaitPublished waits until this node's published table reflects the
// store up to revision rev, withdrawals at least (see publishWithdrawals),
// or ctx is done. The API calls it before it answers a drain or a
// deregistration, so that the call returns only once this node no longer
// serves the instance.
func (n *Node) WaitPublished(ctx context.Context, rev uint64) error {
	for nudged := false; ; {
		t := n.cfg.Table.Acquire()
		var v uint64
		if t != nil {
			if t.StoreRevision() >= rev {
				t.Release()
				return nil
			}
			v = t.Version()
			t.Release()
		}
		if !nudged {
			// Entries without withdrawals may have come after the
			// write: have the loop stamp the table now rather than at
			// the next build.
			select {
			case n.nudge <- struct{}{}:
			default:
			}
			nudged = true
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-n.cfg.Table.Changed(v):
		}
	}
}
