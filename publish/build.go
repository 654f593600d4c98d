package publish

import (
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// build writes every slot of the next status table from the catalog
// (through the writer, which holds its layout): the
// committed verdicts, with weights recomputed now so that slow start
// keeps rising between commits. An instance without a committed verdict
// (the evaluator has not run yet) is unknown and eligible when ready.
func (n *Node) build(now time.Time) {
	start := time.Now()
	n.pacer.Begin()
	nowNS := now.UnixNano()
	var signalled []wire.Evacuation // the out-of-band signal's failovers, applied at each build
	if n.cfg.Signal != nil {
		signalled = n.cfg.Signal.Failovers(now)
	}
	_, err := n.w.Build(func(slot int, ref status.Ref, e *status.Entry) {
		cs := &n.cat.Services[ref.Service]
		if int(ref.Instance) >= len(cs.Instances) {
			return // another region's, published as its view says (layoutPeers)
		}
		in := &cs.Instances[ref.Instance]
		e.Verdict, e.Flags, e.Weight, e.Shift = status.Unknown, 0, 0, in.Shift
		if len(signalled) > 0 {
			e.Shift = max(e.Shift, shiftFor(cs, in, signalled))
		}
		since := FromNanos(in.RegisteredAt)
		eligible := in.Lifecycle == status.Ready
		if h := in.Health; h != nil && h.Incarnation() == in.Incarnation {
			e.Verdict = h.Verdict()
			e.Flags = h.Flags() &^ (status.Eligible | status.SlowStart)
			eligible = eligible && h.Eligible()
			since = h.EligibleSince()
		}
		if eligible {
			w, slow := eval.Weight(cs.Policy, int(in.Weight), in.Ramp(), since, e.Flags, now)
			e.Weight = uint16(w)
			e.Flags |= status.Eligible
			if slow {
				e.Flags |= status.SlowStart
			}
			n.served[slot].Store(nowNS)
		} else {
			e.Flags &^= status.HealthDisregarded | status.WithdrawalDeferred
		}
	})
	if err != nil {
		// Readers keep the last table; Synced stops moving, so they
		// answer from it as stale once it is older than stale-after.
		n.m.buildFailures.Inc()
		n.log.Error("building the status table", "err", err)
		return
	}
	n.built.Store(now.UnixNano())
	n.m.buildSeconds.Observe(time.Since(start).Seconds())
}
