package health

import (
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/status"
)

// build writes every slot of the next status table from the catalog: the
// committed verdicts, with weights recomputed now so that slow start
// keeps rising between commits. An instance without a committed verdict
// (the evaluator has not run yet) is unknown and eligible when ready.
func (n *Node) build(now time.Time) {
	start := time.Now()
	n.pacer.Begin()
	nowNS := now.UnixNano()
	_, err := n.cfg.Table.Build(func(b *status.Builder) error {
		b.SetStoreRevision(n.cat.rev)
		b.SetServices(n.svcs)
		b.SetLocalities(n.locs)
		b.SetDirectory(n.cat.dir)
		es := b.Entries()
		for slot := range es {
			n.pacer.Step() // see evaluate
			e := &es[slot]
			ref := n.cat.bySlot[slot]
			if ref.svc < 0 {
				*e = status.Entry{}
				continue
			}
			cs := &n.cat.services[ref.svc]
			in := &cs.instances[ref.inst]
			_, hash, _ := n.slots.Key(slot)
			e.Key = hash
			e.Incarnation = in.incarnation
			e.Service = cs.id
			e.BaseWeight = uint16(min(max(in.weight, 1), 65535))
			r, _ := n.locs.ID(in.loc.region)
			z, _ := n.locs.ID(in.loc.zone)
			e.Region, e.Zone = uint16(r), uint16(z)
			e.Lifecycle = in.lifecycle
			e.Verdict, e.Flags, e.Weight = status.Unknown, 0, 0
			since := fromNanos(in.registeredAt)
			eligible := in.lifecycle == status.Ready
			if h := in.health; h != nil && h.Incarnation() == in.incarnation {
				e.Verdict = parseVerdict(h.Name())
				e.Flags = status.Flags(h.Flags()) &^ (status.Eligible | status.SlowStart)
				eligible = eligible && h.Eligible()
				since = h.EligibleSince()
			}
			if eligible {
				w, slow := eval.Weight(cs.policy, int(in.weight), since, e.Flags, now)
				e.Weight = uint16(w)
				e.Flags |= status.Eligible
				if slow {
					e.Flags |= status.SlowStart
				}
				n.served[slot].Store(nowNS)
			} else {
				e.Flags &^= status.HealthDisregarded | status.WithdrawalDeferred
			}
		}
		return nil
	})
	if err != nil {
		// Readers keep the last table; Synced stops moving, so they
		// answer from it as stale once it is older than stale-after.
		n.m.buildFailures.Inc()
		n.log.Error("building the status table", "err", err)
		return
	}
	n.built.Store(now.UnixNano())
	n.slots.Recycle()
	n.m.buildSeconds.Observe(time.Since(start).Seconds())
}
