package health

import (
	"cmp"
	"slices"
	"strconv"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/wire"
)

// obs is one observer's latest observation of one instance in one class.
type obs struct {
	observer string
	at       time.Time
	ok, hard bool
	// soft: no answer at all (timeout, unreachable), which counts only
	// while the observer reaches most of the target's zone; aside: it was
	// set aside for that reason, and stays so (it still counts towards
	// the observer's reach, never as evidence).
	soft, aside bool
	code        int
	err         string
	// outcome counts
	succ, fail, tmo int
}

// instEvidence is the evidence the leader holds about one instance: the
// latest probe result of each observer and the latest outcome window of
// each caller, for its latest incarnation.
type instEvidence struct {
	inc      uint64
	probes   []obs
	outcomes []obs
}

// perObserver is how many recent observations of each observer are
// kept: the evaluator holds back the newest for one interval (see
// evaluate), so the ones before must still be there when it looks.
const perObserver = 4

// put records o in list: at most perObserver observations per observer
// (the oldest goes) and at most observers observers (the one heard from
// least recently goes).
func put(list []obs, o obs, observers int) []obs {
	count := 0
	oldest := -1
	for i := range list {
		if list[i].observer != o.observer {
			continue
		}
		if list[i].at.Equal(o.at) {
			return list // the same result again (batches repeat it)
		}
		count++
		if oldest < 0 || list[i].at.Before(list[oldest].at) {
			oldest = i
		}
	}
	if count >= perObserver {
		if !o.at.After(list[oldest].at) {
			return list
		}
		list[oldest] = o
		return list
	}
	if count == 0 {
		latest := map[string]time.Time{}
		for _, x := range list {
			if x.at.After(latest[x.observer]) {
				latest[x.observer] = x.at
			}
		}
		if len(latest) >= observers {
			stalest := ""
			for who, at := range latest {
				if stalest == "" || at.Before(latest[stalest]) || at.Equal(latest[stalest]) && who < stalest {
					stalest = who
				}
			}
			if !o.at.After(latest[stalest]) {
				return list
			}
			list = slices.DeleteFunc(list, func(x obs) bool { return x.observer == stalest })
		}
	}
	return append(list, o)
}

// record adds an observation of instance key (incarnation inc) in the
// class, under n.mu. An observation about an older incarnation than one
// already seen is dropped and reported false.
func (n *Node) record(key string, inc uint64, class eval.Class, o obs) bool {
	e := n.evidence[key]
	switch {
	case e == nil:
		e = &instEvidence{inc: inc}
		n.evidence[key] = e
	case inc < e.inc:
		return false
	case inc > e.inc:
		*e = instEvidence{inc: inc}
	}
	if class == eval.ClassProbe {
		e.probes = put(e.probes, o, max(n.cfg.Replicas+2, 4))
	} else {
		e.outcomes = put(e.outcomes, o, n.cfg.MaxOutcomeObservers)
	}
	return true
}

// samples appends to out the evidence about one incarnation as eval
// samples, those observed after cutoff (a refused connection excepted)
// pending, and a probe that got no answer pending until softCutoff. A
// probe that got no answer from an observer whose evidence about the
// instance's zone is set aside (aside, by observer and the instance's
// region and zone) is left out: silence, not failure. Under n.mu.
//
// softCutoff is a check interval and a round back: an observer cut off from a zone
// learns it one target at a time, as each target's next probe times out
// within the interval, and its reach falls under the correlated fraction
// only part way through. Held back that long, the first timeouts of a
// cut are set aside with the rest instead of being consumed as failures
// first (which kept an instance "healthy" on a failed probe for a
// freshness window, and counted in its run of failures). Every later
// result of the instance waits with a held timeout, so that the
// evaluator consumes them in order. An isolated timeout counts one
// interval and a round later: a hung instance is withdrawn after the
// same run of failures, that much later; a refusal is never held.
func (n *Node) samples(out []eval.Sample, key string, inc uint64, cutoff, softCutoff time.Time, aside map[asideKey]bool, region, zone string) []eval.Sample {
	e := n.evidence[key]
	if e == nil || e.inc != inc {
		return out
	}
	// held is the earliest timeout still held back: every result from
	// it on waits with it (below), so that none moves the class's
	// watermark past it (the evaluator would then drop it as old news,
	// and a timeout followed by a pass would never count).
	var held time.Time
	from := len(out)
	for i, o := range e.probes {
		if o.soft && (o.aside || aside[asideKey{o.observer, region, zone}]) {
			e.probes[i].aside = true
			continue
		}
		if o.soft && !o.hard && o.at.After(softCutoff) && (held.IsZero() || o.at.Before(held)) {
			held = o.at
		}
		// A result younger than cutoff is only pending: its observer's
		// latest, but not yet the class's, so that a slower observer's
		// result is not behind the watermark when it comes. A refused
		// connection withdraws whatever came before it, so it need not
		// wait: no hold-back.
		out = append(out, eval.Sample{Class: eval.ClassProbe, Observer: o.observer, Incarnation: inc,
			At: o.at, OK: o.ok, Hard: o.hard, Pending: !o.hard && o.at.After(cutoff)})
	}
	if !held.IsZero() {
		for i := range out[from:] {
			if s := &out[from+i]; !s.Hard && !s.At.Before(held) {
				s.Pending = true
			}
		}
	}
	for _, o := range e.outcomes {
		out = append(out, eval.Sample{Class: eval.ClassOutcome, Observer: o.observer, Incarnation: inc,
			At: o.at, Successes: o.succ, Failures: o.fail, Timeouts: o.tmo, Pending: o.at.After(cutoff)})
	}
	return out
}

// prune drops evidence about instances that are gone or reincarnated
// (keep reports the current incarnation of a key) and observations older
// than horizon. It is paced, and takes n.mu a slice
// at a time.
func (n *Node) prune(keep func(key string) (uint64, bool), horizon time.Time) {
	old := func(o obs) bool { return o.at.Before(horizon) }
	n.mu.Lock()
	keys := n.pruneKeys[:0]
	for k := range n.evidence {
		keys = append(keys, k)
	}
	for o, t := range n.heard {
		if t.Before(horizon) {
			delete(n.heard, o)
		}
	}
	for _, k := range keys {
		if n.pacer.Due() {
			n.mu.Unlock()
			n.pacer.Pause()
			n.mu.Lock()
		}
		e := n.evidence[k]
		if e == nil {
			continue
		}
		if inc, ok := keep(k); !ok || inc != e.inc {
			delete(n.evidence, k)
			continue
		}
		e.probes = slices.DeleteFunc(e.probes, old)
		e.outcomes = slices.DeleteFunc(e.outcomes, old)
	}
	n.mu.Unlock()
	clear(keys) // keep no key alive past its instance
	n.pruneKeys = keys[:0]
}

// Evidence returns the evidence this node holds about one incarnation of
// an instance, freshest first within each class (probes, then outcomes),
// and whether this node holds evidence at all: only the leader does.
func (n *Node) Evidence(key string, inc uint64) ([]wire.ClassEvidence, bool) {
	if !n.cfg.Store.LeaderReady() {
		return nil, false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	e := n.evidence[key]
	if e == nil || e.inc != inc {
		return nil, true
	}
	var out []wire.ClassEvidence
	for _, o := range sortedObs(e.probes) {
		ce := wire.ClassEvidence{Class: "probe", Observer: o.observer, At: o.at, OK: o.ok && !o.hard, Detail: o.err}
		if o.code != 0 && ce.Detail == "" {
			ce.Detail = "status " + strconv.Itoa(o.code)
		}
		out = append(out, ce)
	}
	for _, o := range sortedObs(e.outcomes) {
		out = append(out, wire.ClassEvidence{Class: "outcome", Observer: o.observer, At: o.at,
			OK:     outcomeOK(o),
			Detail: strconv.Itoa(o.succ) + " ok, " + strconv.Itoa(o.fail) + " failed, " + strconv.Itoa(o.tmo) + " timed out"})
	}
	return out, true
}

func outcomeOK(o obs) bool {
	n := o.succ + o.fail + o.tmo
	return n == 0 || float64(o.fail+o.tmo) <= eval.DefaultFailureThreshold*float64(n)
}

// sortedObs returns each observer's latest observation, freshest first.
func sortedObs(list []obs) []obs {
	latest := map[string]obs{}
	for _, o := range list {
		if l, ok := latest[o.observer]; !ok || o.at.After(l.at) {
			latest[o.observer] = o
		}
	}
	out := make([]obs, 0, len(latest))
	for _, o := range latest {
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b obs) int { return cmp.Or(b.at.Compare(a.at), cmp.Compare(a.observer, b.observer)) })
	return out
}
