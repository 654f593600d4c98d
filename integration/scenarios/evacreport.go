package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// What experiment 4 measures from the tracker's record, once the
// subscribers have stopped.

// ebCall is a call of `cairn evacuate`, in the churn's time.
type ebCall struct{ start, commit time.Duration }

// kindSum adds up the latencies of the changes of kind committed in
// seconds [from, to), as the subscribers of the zones zis saw them
// (none: every zone).
func (tr *ebTracker) kindSum(kind ChangeKind, from, to time.Duration, zis ...int) latSum {
	var s latSum
	if len(zis) == 0 {
		zis = []int{0, 1, 2}
	}
	for _, zi := range zis {
		h := tr.hist[kind][zi]
		for sec := max(int(from/time.Second), 0); sec < min(int(math.Ceil(to.Seconds())), len(h)); sec++ {
			s.merge(&h[sec])
		}
	}
	return s
}

// ebWithin5 is how many withdrawals committed in [from, to) reached 99%
// of their subscribers (those watching the service, less those that
// never saw it because an admission overtook it) within 5 s.
type ebWithin5 struct{ changes, reached int }

func (tr *ebTracker) within5(watchers map[string]int, from, to time.Duration) ebWithin5 {
	var w ebWithin5
	for id := range int32(tr.churn.Len()) {
		c := tr.churn.Change(id)
		if c.Kind != Withdrawal || c.Failed() || c.Commit() < from || c.Commit() >= to {
			continue
		}
		st := &tr.stats[id]
		n := watchers[AssignmentName(ServiceSpec{Name: tr.churn.Instances[c.Endpoint].Name})] - int(st.overtaken.Load())
		w.changes++
		if int(st.within5.Load()) >= int(math.Ceil(0.99*float64(n))) {
			w.reached++
		}
	}
	return w
}

// admissionsOf counts the admissions committed in [from, to), and the
// deliveries of them the subscribers saw and were shed.
func (tr *ebTracker) admissionsOf(from, to time.Duration) (changes, delivered, shed int) {
	for id := range int32(tr.churn.Len()) {
		c := tr.churn.Change(id)
		if c.Kind != Admission || c.Failed() || c.Commit() < from || c.Commit() >= to {
			continue
		}
		changes++
		delivered += int(tr.stats[id].delivered.Load())
		shed += int(tr.stats[id].shed.Load())
	}
	return changes, delivered, shed
}

// ebShift is how one shift (the evacuation, or the undo's first step)
// reached the subscribers.
type ebShift struct {
	// Pairs are the (subscriber, service) whose view held the zone as
	// `before` when the call began; Delivered those that then showed
	// `after`, Lost those that lost the zone first, Missing the rest.
	Pairs, Delivered, Lost, Missing int
	// Subscribers are those with a pair; T99 when 99% of them had the
	// shift in every pair, from the call's reply (-1: never); P99 the
	// pairs' p99.
	Subscribers int
	T99, P99    time.Duration
	// Last is when the last pair showed it.
	Last time.Duration
}

// shift measures call's shift from before to after in the pairs' moves.
func (tr *ebTracker) shift(call ebCall, before, after xdstest.Placement) ebShift {
	sh := ebShift{T99: -1}
	var pairs, subs []time.Duration
	for _, es := range tr.subs {
		worst, any, ok := time.Duration(0), false, true
		for _, p := range es.pairs {
			at := xdstest.ZoneAbsent
			i := 0
			for ; i < len(p.moves) && p.moves[i].at <= call.start; i++ {
				at = p.moves[i].to
			}
			if at != before {
				continue
			}
			sh.Pairs++
			j := slices.IndexFunc(p.moves[i:], func(m ebMove) bool { return m.to != before })
			switch {
			case j < 0:
				sh.Missing++
				any, ok = true, false
				continue
			case p.moves[i+j].to != after:
				sh.Lost++
				continue
			}
			sh.Delivered++
			any = true
			d := max(p.moves[i+j].at-call.commit, 0)
			pairs = append(pairs, d)
			worst = max(worst, d)
			sh.Last = max(sh.Last, p.moves[i+j].at)
		}
		if any {
			sh.Subscribers++
			if ok {
				subs = append(subs, worst)
			}
		}
	}
	slices.Sort(pairs)
	slices.Sort(subs)
	if need := int(math.Ceil(0.99 * float64(sh.Subscribers))); need > 0 && len(subs) >= need {
		sh.T99 = subs[need-1]
	}
	sh.P99 = -1
	if len(pairs) > 0 {
		sh.P99 = pairs[min(len(pairs)-1, int(math.Ceil(0.99*float64(len(pairs))))-1)]
	}
	return sh
}

// rampFull returns, for the pairs of subscribers outside the zone and
// inside it, when the first and 99% of them showed the zone fully back,
// from the undo's call (-1: never), and how many pairs there are.
func (tr *ebTracker) rampFull(undo time.Duration) (outside, inside [2]time.Duration, nOut, nIn int) {
	var out, in []time.Duration
	for _, es := range tr.subs {
		for _, p := range es.pairs {
			var at time.Duration = -1
			if p.fullAt >= 0 {
				at = p.fullAt - undo
			}
			if es.zone == ebZone {
				in = append(in, at)
			} else {
				out = append(out, at)
			}
		}
	}
	firstAnd99 := func(v []time.Duration) [2]time.Duration {
		r := [2]time.Duration{-1, -1}
		var got []time.Duration
		for _, d := range v {
			if d >= 0 {
				got = append(got, d)
			}
		}
		slices.Sort(got)
		if len(got) > 0 {
			r[0] = got[0]
		}
		if need := int(math.Ceil(0.99 * float64(len(v)))); need > 0 && len(got) >= need {
			r[1] = got[need-1]
		}
		return r
	}
	return firstAnd99(out), firstAnd99(in), len(out), len(in)
}

// endsWhole counts the (subscriber, service, churned endpoint) whose
// last view did not hold the endpoint: the churn put every one back.
func (tr *ebTracker) endsWhole(dead map[int32]bool) (missing int) {
	for _, es := range tr.subs {
		for _, p := range es.pairs {
			for k, st := range p.eps {
				if !st.present && !dead[tr.svcEPs[p.name][k]] {
					missing++
				}
			}
		}
	}
	return missing
}

// ebSample is one sample of the zone's share over time.
type ebSample struct {
	t                 float64
	p0, sMean, sMax   float64
	inZone, outOfZone int
}

// sample averages the subscribers' shares every interval until ctx is
// done, and returns the samples.
func (tr *ebTracker) sample(ctx context.Context, interval time.Duration) []ebSample {
	var out []ebSample
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		s := ebSample{t: tr.churn.Now().Seconds()}
		for _, es := range tr.subs {
			if !es.aggregateSet.Load() {
				continue
			}
			if es.zone == ebZone {
				s.p0 += math.Float64frombits(es.p0.Load())
				s.inZone++
				continue
			}
			s.sMean += math.Float64frombits(es.sMean.Load())
			s.sMax = max(s.sMax, math.Float64frombits(es.sMax.Load()))
			s.outOfZone++
		}
		if s.inZone > 0 {
			s.p0 /= float64(s.inZone)
		}
		if s.outOfZone > 0 {
			s.sMean /= float64(s.outOfZone)
		}
		out = append(out, s)
		select {
		case <-ctx.Done():
			return out
		case <-tick.C:
		}
	}
}

// msOr formats d in ms, or "—" when negative (none).
func msOr(d time.Duration) string {
	if d < 0 {
		return "—"
	}
	return fmt.Sprintf("%d ms", d.Milliseconds())
}

// schedLag measures how late a 10 ms timer fires in this process, the
// subscribers' and the churn's, until ctx is done: the worst of each
// second, in seconds since epoch. A receipt is timed late by as much.
func schedLag(ctx context.Context, epoch time.Time) []Point {
	var out []Point
	sec, worst := -1, time.Duration(0)
	for {
		want := time.Now().Add(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			return out
		case <-time.After(10 * time.Millisecond):
			// Read once running again, not the timer's own time: the
			// wait for a CPU after it fired is lateness too.
			now := time.Now()
			late := now.Sub(want)
			if s := int(now.Sub(epoch) / time.Second); s != sec {
				if sec >= 0 {
					out = append(out, Point{T: float64(sec) + 0.5, V: worst.Seconds()})
				}
				sec, worst = s, 0
			}
			worst = max(worst, late)
		}
	}
}

// histQuantiles reads a Prometheus histogram from two snapshots of its
// cumulative buckets (series → count; the series carry le="…"): the
// upper bounds of the buckets holding quantiles qs of what was observed
// between them (+Inf past the last bound), and how many were.
func histQuantiles(before, after map[string]float64, qs ...float64) ([]float64, float64) {
	type bucket struct{ le, n float64 }
	var bs []bucket
	for series, n := range after {
		_, rest, ok := strings.Cut(series, `le="`)
		v, _, ok2 := strings.Cut(rest, `"`)
		le, err := strconv.ParseFloat(v, 64) // "+Inf" too
		if !ok || !ok2 || err != nil {
			continue
		}
		bs = append(bs, bucket{le, n - before[series]})
	}
	slices.SortFunc(bs, func(a, b bucket) int { return cmp.Compare(a.le, b.le) })
	out := make([]float64, len(qs))
	if len(bs) == 0 || bs[len(bs)-1].n <= 0 {
		return out, 0
	}
	total := bs[len(bs)-1].n
	for i, q := range qs {
		for _, b := range bs {
			if b.n >= q*total {
				out[i] = b.le
				break
			}
		}
	}
	return out, total
}

// secondsOr is a bucket bound in seconds, readably.
func secondsOr(s float64) string {
	if math.IsInf(s, 1) {
		return "+Inf"
	}
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}
