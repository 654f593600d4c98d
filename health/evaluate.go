package health

import (
	"context"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// evaluate runs the evaluator over every service (on the leader) and
// commits the verdicts that changed. It reports whether it committed.
//
// The round is paced (see package pace): it pauses between services once
// its slice is spent, and holds n.mu, which evidence reports wait on,
// only while it reads one service's evidence. A round allocates nothing
// per instance: the evaluator, the samples and the per-service maps are
// the loop's, reused.
func (n *Node) evaluate(ctx context.Context, now time.Time) bool {
	start := time.Now()
	n.pacer.Begin()
	// Evidence younger than one interval waits for the next round, so
	// that a late batch from another observer is not behind the class's
	// watermark when it arrives.
	cutoff := now.Add(-n.pub.Interval())
	states := n.spareStates
	if states == nil {
		states = make(map[wire.ServiceKey]*eval.State, len(n.pub.Catalog().Services))
	}
	clear(states)
	var ups []store.HealthUpdate
	var evs []store.ServiceEvent
	disregarded := 0
	actor := "evaluator@" + n.cfg.Store.NodeID()

	prevAside := n.aside
	n.prune(n.currentInc, now.Add(-2*n.cfg.OutcomeHorizon))
	counts := n.correlation(now)
	aside := make(map[wire.ServiceKey]map[asideKey]bool, len(n.pub.Catalog().Services))
	asidePairs := map[asideKey]bool{}
	if n.samplesBy == nil {
		n.samplesBy = map[string][]eval.Sample{}
		n.stored = map[string]*store.Verdict{}
		n.trans = map[string]eval.Transition{}
	}
	for _, cs := range n.pub.Catalog().Services {
		if n.pacer.Due() {
			n.pacer.Pause()
			n.pub.PublishPending(ctx)
		}
		prev := n.states[cs.Key]
		if prev == nil {
			prev = &eval.State{}
		}
		var cur map[asideKey]bool
		for k, r := range counts {
			if setAside(r, cs.Policy.CorrelatedFailureFraction) && cs.HasZone(k.region, k.zone) {
				if cur == nil {
					cur = map[asideKey]bool{}
				}
				cur[k], asidePairs[k] = true, true
			}
		}
		aside[cs.Key] = cur
		// A probe that got no answer waits a check interval (samples).
		softCutoff := now.Add(-max(cs.Policy.CheckInterval, n.pub.Interval()))
		for _, e := range asideEvents(cs.Key, n.aside[cs.Key], cur, counts) {
			evs = append(evs, e)
			n.log.Warn("probe evidence", "service", cs.Key, "kind", e.Kind, "detail", e.Detail)
		}
		ins := n.insBuf[:0]
		if cap(n.reportBuf) < len(cs.Instances) {
			n.reportBuf = make([]eval.Report, len(cs.Instances))
		}
		samples, stored := n.samplesBy, n.stored
		clear(samples)
		clear(stored)
		buf := n.sampleBuf[:0]
		n.mu.Lock()
		for i := range cs.Instances {
			in, id := &cs.Instances[i], cs.InstanceID(i)
			ins = append(ins, n.evalInstance(&cs, i, &n.reportBuf[i]))
			stored[id] = in.Health
			if in.Health != nil && in.Health.Incarnation() == in.Incarnation && prev.Instance(id) == nil {
				// A new term: resume from the committed verdict. The
				// instances come in id order, so on a fresh State this
				// appends.
				prev.Set(eval.Resume(in.Health.Health(), id, in.Lifecycle, now))
				if in.Health.Flags().Has(status.HealthDisregarded) {
					prev.HealthDisregarded = true
				}
			}
			from := len(buf)
			buf = n.samples(buf, in.Key, in.Incarnation, cutoff, softCutoff, cur, in.Loc.Region, in.Loc.Zone)
			if len(buf) > from {
				samples[id] = buf[from:len(buf):len(buf)]
			}
		}
		n.mu.Unlock()
		n.insBuf, n.sampleBuf = ins[:0], buf[:0]
		pol := cs.Policy
		pol.Freshness = n.freshness(pol)
		res, next := n.ev.Evaluate(pol, ins, samples, *prev, now)
		n.ev.Recycle(*prev)
		// The replaced State stays in the previous round's map until
		// the next round clears it: it must not keep its list, or the
		// loop holds two rounds of states.
		*prev = eval.State{}
		states[cs.Key] = &next
		if res.HealthDisregarded {
			disregarded++
		}
		n.m.discarded.WithLabelValues("unattributable").Add(float64(res.Discarded))
		trans := n.trans
		clear(trans)
		for _, t := range res.Transitions {
			trans[t.ID] = t
		}
		for i, r := range res.Instances {
			st := &next.Instances[i] // the state of r (eval.State)
			if old := stored[r.ID]; old != nil && old.Incarnation() == r.Incarnation && n.ev.Unchanged(old.Health(), r, *st) {
				continue // the common case: nothing to build, nothing to commit
			}
			h := eval.Commit(r, *st, now)
			u := store.HealthUpdate{Key: wire.InstanceKey{Namespace: cs.Key.Namespace, Service: cs.Key.Name, ID: r.ID}, Health: h}
			if t, ok := trans[r.ID]; ok {
				u.Transition = &store.Transition{From: t.From.String(), To: t.To.String(), Reason: t.Reason}
				if stored[r.ID] == nil || stored[r.ID].Incarnation() != r.Incarnation {
					u.Transition.From = "new" // its first verdict: it was never withdrawn
				}
			}
			ups = append(ups, u)
		}
		for _, e := range res.Events {
			se := store.ServiceEvent{Namespace: cs.Key.Namespace, Service: cs.Key.Name, Instance: e.ID, Detail: e.Detail}
			switch e.Kind {
			case eval.EventHealthDisregarded:
				se.Kind = wire.EventHealthDisregarded
			case eval.EventHealthRestored:
				se.Kind = wire.EventHealthRestored
			case eval.EventQuarantined:
				se.Kind = wire.EventQuarantined
				if st := next.Instance(e.ID); st != nil {
					se.Incarnation = st.Incarnation
				}
			}
			evs = append(evs, se)
			n.log.Info("health event", "service", cs.Key, "kind", se.Kind, "instance", e.ID, "detail", e.Detail)
		}
	}
	// The states replaced were recycled one by one above; their map is
	// the next round's.
	n.spareStates = n.states
	n.states = states
	n.aside = aside
	n.m.setAside.Set(float64(len(asidePairs)))
	n.m.disregarded.Set(float64(disregarded))
	n.m.evaluations.Inc()
	n.m.evalSeconds.Observe(time.Since(start).Seconds())

	committed := false
	for len(ups) > 0 || len(evs) > 0 {
		k := min(len(ups), store.MaxHealthUpdates)
		var batchEvs []store.ServiceEvent
		if k == len(ups) {
			batchEvs, evs = evs, nil
		}
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := n.cfg.Store.CommitHealth(ctx, actor, ups[:k], batchEvs)
		cancel()
		if err != nil {
			// Start the next round from what the store holds.
			n.m.commitErrors.Inc()
			n.log.Warn("committing verdicts", "updates", len(ups), "err", err)
			n.states, n.spareStates = nil, nil
			n.aside = prevAside // their events were not committed either
			return committed
		}
		n.m.commits.Inc()
		committed = true
		for _, u := range ups[:k] {
			if u.Transition != nil {
				n.m.transitions.WithLabelValues(eligibility(u.Health.Eligible)).Inc()
			}
		}
		ups = ups[k:]
	}
	return committed
}

// freshness is how old evidence about an instance of a service of
// policy p may be and still count: the policy's (3 × its check
// interval), but never less than three rounds. Every result but a
// refusal waits out a round's hold-back before the evaluator consumes
// it (evaluate), so the newest consumed is always at least a round old:
// a check more frequent than the round is judged as one at the round's
// interval would be, or none of its evidence would ever be fresh
// (docs/decisions.md).
func (n *Node) freshness(p eval.Policy) time.Duration {
	return max(p.Freshness, 3*n.pub.Interval())
}

func eligibility(e bool) string {
	if e {
		return "eligible"
	}
	return "withdrawn"
}

// currentInc reports the current incarnation of a live instance, for
// pruning evidence.
func (n *Node) currentInc(key string) (uint64, bool) { return n.pub.CurrentIncarnation(key) }

// evalInstance copies what the evaluator needs of the service's instance
// i; a self-report goes into rep, the loop's (one per instance of the
// service).
func (n *Node) evalInstance(cs *publish.Service, i int, rep *eval.Report) eval.Instance {
	in := &cs.Instances[i]
	e := eval.Instance{ID: cs.InstanceID(i), Incarnation: in.Incarnation, Region: in.Loc.Region, Zone: in.Loc.Zone,
		BaseWeight: int(in.Weight), Ramp: in.Ramp(), Lifecycle: in.Lifecycle, LeaseDeadline: publish.FromNanos(in.LeaseDeadline)}
	if in.LeaseTTL > 0 {
		e.LeaseExpiry = n.cfg.Store.LeaseExpiry(cs.Record(i))
	}
	if r := in.Report; r != nil {
		*rep = eval.Report{Ready: r.Ready, At: r.At}
		if len(r.Dependencies) > 0 {
			rep.Dependencies = make(map[string]string, len(r.Dependencies))
			for k, v := range r.Dependencies {
				rep.Dependencies[k] = string(v)
			}
		}
		e.Report = rep
	}
	return e
}
