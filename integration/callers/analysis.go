package callers

import (
	"math"
	"slices"
	"sort"
	"time"
)

// Target names an instance in the records: by the id it answers with,
// and by its address, "host:port" (what a caller tried when no answer
// came, and what resolving callers are given).
type Target struct {
	ID, Addr string
}

// SentTo reports whether q went to t: it names t's instance or address.
func (t Target) SentTo(q Request) bool {
	return (t.ID != "" && q.Instance == t.ID) || (t.Addr != "" && q.Addr == t.Addr)
}

// Point is one sample of a series: seconds since the start, and a value.
type Point struct {
	T float64 `json:"t"`
	V float64 `json:"v"`
}

// Bucket is one interval of a population's requests.
type Bucket struct {
	// T is the interval's start, in seconds since the start.
	T                      float64
	Sent, Failed, TimedOut int
	// Skipped counts sends skipped because MaxInFlight requests were
	// still waiting: not sent, so not in Sent nor in the error rate.
	Skipped int
}

// ErrorRate is the share of the bucket's requests that failed or timed
// out; NaN with none sent (no data is not "no errors": a plot shows it
// as a gap).
func (b Bucket) ErrorRate() float64 {
	if b.Sent == 0 {
		return math.NaN()
	}
	return float64(b.Failed+b.TimedOut) / float64(b.Sent)
}

// Buckets counts every kind's requests sent in [start, end) per width
// (1 s for a timeline), empty intervals included. A record that kept
// every request is counted from its requests; one that dropped some
// (MaxRecorded) from its per-second counts, each second in the interval
// that holds its start (exact when start is on a whole second and width
// a whole number of seconds). Skipped sends come from the per-second
// counts.
func Buckets(recs []Record, start, end time.Time, width time.Duration) map[Kind][]Bucket {
	n := bucketCount(start, end, width)
	out := map[Kind][]Bucket{}
	for _, r := range recs {
		bs := out[r.Kind]
		if bs == nil {
			bs = make([]Bucket, n)
			for i := range bs {
				bs[i].T = (time.Duration(i) * width).Seconds()
			}
			out[r.Kind] = bs
		}
		for j, s := range r.Seconds {
			i := bucketOf(r.Origin.Add(time.Duration(j)*time.Second), start, end, width)
			if i < 0 {
				continue
			}
			bs[i].Skipped += s.Skipped
			if r.Dropped > 0 {
				bs[i].Sent += s.Sent
				bs[i].Failed += s.Failure
				bs[i].TimedOut += s.Timeout
			}
		}
		if r.Dropped > 0 {
			continue
		}
		for _, q := range r.Requests {
			i := bucketOf(q.At, start, end, width)
			if i < 0 {
				continue
			}
			bs[i].Sent++
			switch q.Result {
			case Failure:
				bs[i].Failed++
			case Timeout:
				bs[i].TimedOut++
			}
		}
	}
	return out
}

// ErrorRates is Buckets as the series of a timeline: per kind, each
// interval's error rate (failures and timeouts over requests sent), at
// the interval's start; NaN for an interval with nothing sent.
func ErrorRates(recs []Record, start, end time.Time, width time.Duration) map[Kind][]Point {
	out := map[Kind][]Point{}
	for k, bs := range Buckets(recs, start, end, width) {
		ps := make([]Point, len(bs))
		for i, b := range bs {
			ps[i] = Point{T: b.T, V: b.ErrorRate()}
		}
		out[k] = ps
	}
	return out
}

// bucketCount and bucketOf read every time by the wall clock (Round(0)
// drops the monotonic reading): a record's Origin is truncated to the
// second, so it has none, and comparing it with start and end by the
// wall clock while counting the intervals by the monotonic one put a
// send an hour into a run past the last interval once the two clocks
// had drifted a millisecond apart.
func bucketCount(start, end time.Time, width time.Duration) int {
	start, end = start.Round(0), end.Round(0)
	if width <= 0 || !end.After(start) {
		return 0
	}
	return int((end.Sub(start) + width - 1) / width)
}

func bucketOf(t, start, end time.Time, width time.Duration) int {
	t, start, end = t.Round(0), start.Round(0), end.Round(0)
	if t.Before(start) || !t.Before(end) || width <= 0 {
		return -1
	}
	return int(t.Sub(start) / width)
}

// Convergence is how a set of callers stopped sending to an instance
// after a fault.
type Convergence struct {
	// Callers is how many callers the figure is over.
	Callers int
	// Last is, per caller with evidence, its last send to the instance
	// after the fault, as time since the fault: 0 if it sent nothing
	// after it.
	Last map[string]time.Duration
	// Quiet is, per caller, the quiet period it was judged with: the
	// given one, or three times its largest gap between sends to the
	// instance before the fault if that is longer.
	Quiet map[string]time.Duration
	// StillSending names the callers whose last send was within their
	// quiet period before the end of the record: they had not stopped.
	StillSending []string
	// Unknown names the callers with no evidence either way: one that
	// sent nothing anywhere after fault+quiet (stuck, every send skipped
	// or its resolution failing, or past its record's cap), and a blind
	// caller without views. They count as not stopped.
	Unknown []string
	// P99 is the 99th percentile of Last over the callers (nearest
	// rank): the time until 99% of them stopped sending. Meaningless
	// unless Converged.
	P99 time.Duration
	// Converged is false when the 99th percentile falls on a caller
	// still sending or unknown, or there are no callers.
	Converged bool
}

// StopTime measures, over recs (one population, or all), the time from
// fault until 99% of the callers stopped sending to target. A caller
// still sending within its quiet period of end (the record's end: when
// the callers stopped) has not stopped and counts as never stopping; so
// does a caller with no evidence (Convergence.Unknown). A caller's quiet
// period is quiet, or three times its largest gap between sends to
// target before the fault when that is longer: a DNS caller spreading
// its requests over 50 instances at 5 req/s sends to each one every
// 10 s, and 2 s without a send to it says nothing. A blind caller
// (Envoy's) sees only the answers: its last send is the later of its
// last answer from target and the moment target left its view (Envoy
// routes only to what it holds); without views it is Unknown.
func StopTime(recs []Record, target Target, fault, end time.Time, quiet time.Duration) Convergence {
	c := Convergence{Callers: len(recs), Last: map[string]time.Duration{}, Quiet: map[string]time.Duration{}}
	vals := make([]time.Duration, 0, len(recs))
	for _, r := range recs {
		var last time.Time
		var before []time.Time
		evidence := r.Blind && len(r.Views) > 0
		for _, q := range r.Requests {
			if !r.Blind && (q.Addr != "" || q.Instance != "") && !q.At.Before(fault.Add(quiet)) {
				evidence = true
			}
			if !target.SentTo(q) {
				continue
			}
			if q.At.Before(fault) {
				before = append(before, q.At)
			} else if q.At.After(last) {
				last = q.At
			}
		}
		if !evidence {
			c.Unknown = append(c.Unknown, r.Caller)
			vals = append(vals, never)
			continue
		}
		if r.Blind {
			if left := leftView(r, target, fault, end); left.After(last) {
				last = left
			}
		}
		q := max(quiet, 3*largestGap(before))
		c.Quiet[r.Caller] = q
		d := time.Duration(0)
		if !last.IsZero() {
			d = last.Sub(fault)
		}
		c.Last[r.Caller] = d
		if !last.IsZero() && !last.Before(end.Add(-q)) {
			c.StillSending = append(c.StillSending, r.Caller)
			d = never
		}
		vals = append(vals, d)
	}
	c.finish(vals)
	return c
}

// never is the stop time of a caller that has not stopped.
const never = time.Duration(math.MaxInt64)

// finish sorts c's lists and sets its P99 and Converged from vals, each
// caller's stop time (never: still sending).
func (c *Convergence) finish(vals []time.Duration) {
	sort.Strings(c.StillSending)
	sort.Strings(c.Unknown)
	if len(vals) == 0 {
		return
	}
	slices.Sort(vals)
	c.P99 = vals[max(int(math.Ceil(0.99*float64(len(vals))))-1, 0)]
	c.Converged = c.P99 != never
	if !c.Converged {
		c.P99 = 0
	}
}

// largestGap returns the largest interval between consecutive times of
// ts (sorted here), 0 with fewer than two.
func largestGap(ts []time.Time) time.Duration {
	slices.SortFunc(ts, time.Time.Compare)
	g := time.Duration(0)
	for i := 1; i < len(ts); i++ {
		g = max(g, ts[i].Sub(ts[i-1]))
	}
	return g
}

// ByKind groups records by population.
func ByKind(recs []Record) map[Kind][]Record {
	out := map[Kind][]Record{}
	for _, r := range recs {
		out[r.Kind] = append(out[r.Kind], r)
	}
	return out
}

// Transition is a time target entered (Given) or left what a caller was
// given.
type Transition struct {
	Caller string
	Kind   Kind
	At     time.Time
	Given  bool
}

// step is whether target was given from At on.
type step struct {
	at    time.Time
	given bool
}

// given returns, for one record, when target was in what the caller was
// given: by its views when it resolves (Target.Addr in the addresses),
// and otherwise by where it sent, per width from start to end (given in
// an interval it sent a request to target in).
func given(r Record, target Target, start, end time.Time, width time.Duration) []step {
	var out []step
	put := func(at time.Time, g bool) {
		if n := len(out); n == 0 || out[n-1].given != g {
			out = append(out, step{at, g})
		}
	}
	if len(r.Views) > 0 {
		for _, v := range r.Views {
			put(v.At, slices.Contains(v.Addrs, target.Addr))
		}
		return out
	}
	sent := make([]bool, bucketCount(start, end, width))
	for _, q := range r.Requests {
		if i := bucketOf(q.At, start, end, width); i >= 0 && target.SentTo(q) {
			sent[i] = true
		}
	}
	for i, g := range sent {
		put(start.Add(time.Duration(i)*width), g)
	}
	return out
}

// Transitions returns every time target left or entered what each
// caller was given, after the caller's first view (or interval), in
// time order. Callers that do not resolve show it by where they sent,
// at width's resolution.
func Transitions(recs []Record, target Target, start, end time.Time, width time.Duration) []Transition {
	var out []Transition
	for _, r := range recs {
		for i, s := range given(r, target, start, end, width) {
			if i > 0 {
				out = append(out, Transition{Caller: r.Caller, Kind: r.Kind, At: s.at, Given: s.given})
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Transition) int { return a.At.Compare(b.At) })
	return out
}

// Presence returns, per population and per width from start to end, the
// share of its callers that were given target at the interval's end: a
// timeline of withdrawals and admissions as each population saw them.
func Presence(recs []Record, target Target, start, end time.Time, width time.Duration) map[Kind][]Point {
	n := bucketCount(start, end, width)
	sums := map[Kind][]float64{}
	callers := map[Kind]int{}
	for _, r := range recs {
		s := sums[r.Kind]
		if s == nil {
			s = make([]float64, n)
			sums[r.Kind] = s
		}
		callers[r.Kind]++
		steps := given(r, target, start, end, width)
		j := -1
		for i := range n {
			at := start.Add(time.Duration(i+1) * width)
			for j+1 < len(steps) && steps[j+1].at.Before(at) {
				j++
			}
			if j >= 0 && steps[j].given {
				s[i]++
			}
		}
	}
	out := map[Kind][]Point{}
	for k, s := range sums {
		ps := make([]Point, n)
		for i, v := range s {
			ps[i] = Point{T: (time.Duration(i+1) * width).Seconds(), V: v / float64(callers[k])}
		}
		out[k] = ps
	}
	return out
}

// leftView returns when target was last in r's view from fault on: the
// time of the first view after fault without it (the fault itself if it
// was not in the view then), or end if it never left. With no view at or
// before the fault it judges from the first view after it: target left
// at the latest by that view if it lacks it. r has views.
func leftView(r Record, target Target, fault, end time.Time) time.Time {
	in := func(v View) bool { return slices.Contains(v.Addrs, target.Addr) }
	i := 0
	for i < len(r.Views) && !r.Views[i].At.After(fault) {
		i++
	}
	if i == 0 {
		// The first view comes after the fault.
		if !in(r.Views[0]) {
			return r.Views[0].At
		}
	} else if !in(r.Views[i-1]) {
		// Not given at the fault: re-entering later would be an
		// admission, not a send to a failed instance.
		return fault
	}
	for ; i < len(r.Views); i++ {
		if !in(r.Views[i]) {
			return r.Views[i].At
		}
	}
	return end
}

// StopGiven measures, over callers that record what they were given
// (Record.Views: a DNS caller's answers, an Envoy caller's routed hosts,
// a subscriber's assignments), the time from fault until 99% of them
// were no longer given target and sent it nothing. A caller sends only
// to what it was given, so no quiet period is needed: per caller, its
// stop is the later of the last view after the fault that took target
// out (none putting it back after) and its last send to target from the
// fault on, as time since the fault (0 if target was not in its view
// from the fault on and it sent nothing to it); a caller whose view at
// end still holds target has not stopped (StillSending), and one
// without views is Unknown: both count as never stopping. Convergence's
// Quiet is empty.
func StopGiven(recs []Record, target Target, fault, end time.Time) Convergence {
	c := Convergence{Callers: len(recs), Last: map[string]time.Duration{}, Quiet: map[string]time.Duration{}}
	vals := make([]time.Duration, 0, len(recs))
	for _, r := range recs {
		if len(r.Views) == 0 {
			c.Unknown = append(c.Unknown, r.Caller)
			vals = append(vals, never)
			continue
		}
		in := func(v View) bool { return slices.Contains(v.Addrs, target.Addr) }
		var last time.Time
		given := false
		for _, v := range r.Views {
			if v.At.After(end) {
				break
			}
			if v.At.After(fault) && given && !in(v) {
				last = v.At
			}
			given = in(v)
		}
		for _, q := range r.Requests {
			if target.SentTo(q) && !q.At.Before(fault) && !q.At.After(end) && q.At.After(last) {
				last = q.At
			}
		}
		d := time.Duration(0)
		if !last.IsZero() {
			d = last.Sub(fault)
		}
		c.Last[r.Caller] = d
		if given {
			c.StillSending = append(c.StillSending, r.Caller)
			d = never
		}
		vals = append(vals, d)
	}
	c.finish(vals)
	return c
}

// SentTo counts r's requests to target sent in [from, to).
func SentTo(r Record, target Target, from, to time.Time) int {
	n := 0
	for _, q := range r.Requests {
		if target.SentTo(q) && !q.At.Before(from) && q.At.Before(to) {
			n++
		}
	}
	return n
}
