package eval

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"
)

// consume feeds an instance's new samples, in a fixed order, into its
// class states, and returns how many it discarded.
// cls holds st's class states.
func consume(p Policy, st *Recent, cls *[numSampleClasses]ClassState, in Instance, samples []Sample, now time.Time, buf *[]Sample) int {
	discarded := 0
	ss := (*buf)[:0]
	defer func() { *buf = ss[:0] }()
	for _, s := range samples {
		switch {
		case s.Class >= numSampleClasses, s.At.After(now),
			s.Incarnation != 0 && s.Incarnation != in.Incarnation:
			discarded++
		case s.Pending:
			observeSample(p, st, s)
		case !s.At.After(cls[s.Class].Last.At):
			// At or before the class's watermark: consumed already, or
			// held back behind another observer's later sample (a
			// refusal is not held back). It is no news for the class,
			// but it may be its observer's latest: whether probers
			// disagree, and whether callers reach their quorum, is
			// judged from every observer's latest.
			observeSample(p, st, s)
		default:
			ss = append(ss, s)
		}
	}
	slices.SortFunc(ss, func(a, b Sample) int {
		return cmp.Or(a.At.Compare(b.At), cmp.Compare(a.Class, b.Class), cmp.Compare(a.Observer, b.Observer),
			cmpBool(a.OK, b.OK), cmpBool(b.Hard, a.Hard),
			cmp.Compare(a.Successes, b.Successes), cmp.Compare(a.Failures, b.Failures), cmp.Compare(a.Timeouts, b.Timeouts))
	})
	var outcomes *Sample // the latest outcome sample consumed
	for i, s := range ss {
		if s.Class == ClassOutcome {
			// Each caller's window is its own judgement; the class
			// hears, once per evaluation, whether the callers reach
			// their quorum (below).
			if observeSample(p, st, s) {
				outcomes = &ss[i]
			}
			continue
		}
		ok := observeSample(p, st, s)
		feed(p, &cls[s.Class], EvidenceRef{Class: s.Class, Observer: s.Observer, At: s.At}, ok, s.Hard)
	}
	if outcomes != nil {
		failing, reporting := outcomeQuorum(p, st, outcomes.At)
		met := quorumMet(p, failing, reporting)
		feed(p, &cls[ClassOutcome], EvidenceRef{Class: ClassOutcome, Observer: outcomes.Observer, At: outcomes.At}, !met, false)
	}
	keep := max(p.Freshness, p.OutcomeWindow)
	st.Observers = slices.DeleteFunc(st.Observers, func(o ObserverState) bool { return now.Sub(o.At) > keep })
	return discarded
}

// observeSample records s as its observer's latest, if it is, and
// returns whether it passed (a probe) or counts at all (an outcome window
// with calls).
func observeSample(p Policy, st *Recent, s Sample) bool {
	if s.Class == ClassOutcome {
		n := s.Successes + s.Failures + s.Timeouts
		if n <= 0 {
			return false
		}
		fail := float64(s.Failures+s.Timeouts) / float64(n)
		observe(st, ObserverState{Class: ClassOutcome, Observer: s.Observer, At: s.At, OK: fail <= p.FailureThreshold})
		return true
	}
	ok := s.OK && !s.Hard
	observe(st, ObserverState{Class: s.Class, Observer: s.Observer, At: s.At, OK: ok})
	return ok
}

// maxObservers bounds Recent.Observers: the callers and probers
// heard from within the windows, the stalest dropped first.
const maxObservers = 32

// observe records o as its observer's latest sample in its class.
func observe(st *Recent, o ObserverState) {
	for i := range st.Observers {
		x := &st.Observers[i]
		if x.Class == o.Class && x.Observer == o.Observer {
			if o.At.After(x.At) {
				*x = o
			}
			return
		}
	}
	if len(st.Observers) >= maxObservers {
		oldest := 0
		for i, x := range st.Observers {
			if x.At.Before(st.Observers[oldest].At) {
				oldest = i
			}
		}
		st.Observers = slices.Delete(st.Observers, oldest, oldest+1)
	}
	st.Observers = append(st.Observers, o)
}

// disagreement returns, when the probe class is failing, an observer whose
// latest fresh probe passed no earlier than one check interval before the
// newest fresh failure of another observer (SPEC §2: two probers that
// disagree degrade the instance, they do not withdraw it), with that
// failing observer; empty strings when the probers agree.
func disagreement(p Policy, st *Recent, now time.Time) (passed, failed string) {
	var newest ObserverState
	for _, o := range st.Observers {
		if o.Class == ClassProbe && !o.OK && now.Sub(o.At) <= p.Freshness && o.At.After(newest.At) {
			newest = o
		}
	}
	if newest.Observer == "" {
		return "", ""
	}
	for _, o := range st.Observers {
		if o.Class == ClassProbe && o.OK && o.Observer != newest.Observer && now.Sub(o.At) <= p.Freshness &&
			!o.At.Before(newest.At.Add(-p.CheckInterval)) {
			return o.Observer, newest.Observer
		}
	}
	return "", ""
}

// quorumMet reports whether failing callers of reporting ones make the
// outcome quorum (SPEC §2): at least p.OutcomeQuorum, and at least a
// third of those that reported.
func quorumMet(p Policy, failing, reporting int) bool {
	return failing >= p.OutcomeQuorum && 3*failing >= reporting
}

// outcomeQuorum counts the callers whose latest outcome window within
// OutcomeWindow reports the instance failing, and all those that
// reported on it there.
func outcomeQuorum(p Policy, st *Recent, now time.Time) (failing, reporting int) {
	for _, o := range st.Observers {
		if o.Class == ClassOutcome && now.Sub(o.At) <= p.OutcomeWindow {
			reporting++
			if !o.OK {
				failing++
			}
		}
	}
	return failing, reporting
}

// feed runs one sample through a class's score and hysteresis.
func feed(p Policy, c *ClassState, ref EvidenceRef, ok, hard bool) {
	fail := 0.0
	if !ok {
		fail = 1
	}
	if !c.Last.At.IsZero() {
		d := math.Pow(0.5, float64(ref.At.Sub(c.Last.At))/float64(p.ScoreHalfLife))
		c.FailMass *= d
		c.TotalMass *= d
	}
	c.FailMass += fail
	c.TotalMass++
	c.Last, c.LastOK = ref, ok
	if ok {
		if c.ConsecutiveOK == 0 {
			c.RunStart = ref.At
		}
		c.ConsecutiveOK++
		c.ConsecutiveFail = 0
	} else {
		c.ConsecutiveFail++
		c.ConsecutiveOK = 0
	}
	if !c.Failing {
		why := ""
		switch {
		case hard && ref.Class == ClassProbe:
			why = "hard failure (connection refused)"
		case c.ConsecutiveFail >= p.WithdrawAfter:
			why = fmt.Sprintf("%d consecutive failures", c.ConsecutiveFail)
		case !ok && c.TotalMass >= p.ScoreMinWeight && c.Score() > p.FailureThreshold:
			why = fmt.Sprintf("failure score %.2f above %.2f", c.Score(), p.FailureThreshold)
		}
		if why != "" {
			if ref.Class == ClassOutcome {
				why = "a quorum of callers report failures: " + why
			}
			c.Failing, c.FailingSince, c.Hard, c.Why, c.Trigger = true, ref.At, hard, why, ref
		}
	} else if ok && c.ConsecutiveOK >= p.AdmitAfter && ref.At.Sub(c.RunStart) >= p.AdmitMin {
		// Re-admitted: the score starts afresh so old failures do not
		// withdraw the instance again on its first miss.
		c.Failing, c.Hard, c.Why, c.Trigger = false, false, "", ref
		c.FailMass, c.TotalMass = 0, 0
	}
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case !a:
		return -1
	}
	return 1
}
