package eval

import (
	"slices"
	"testing"
	"time"
	"unsafe"
)

// TestStateIsCompact: an evaluator keeps one InstanceState per instance
// for as long as the instance lives, so its size is guarded (its times
// are Nanos, its id is the caller's string), and a class, a self-report
// or a recent past without state takes no memory beyond a nil pointer. A
// State's ClassStates and Recents are its own: the next evaluation's
// never share the previous one's, which its Evaluator may recycle.
func TestStateIsCompact(t *testing.T) {
	for _, c := range []struct {
		name       string
		got, limit uintptr
	}{
		{"InstanceState", unsafe.Sizeof(InstanceState{}), 96},
		{"ObserverState", unsafe.Sizeof(ObserverState{}), 48},
	} {
		if c.got > c.limit {
			t.Errorf("%s is %d bytes, want at most %d", c.name, c.got, c.limit)
		}
	}

	p := Policy{}.WithDefaults()
	ins := []Instance{{ID: "quiet", Incarnation: 1, Lifecycle: Ready}, {ID: "probed", Incarnation: 1, Lifecycle: Ready}}
	var e Evaluator
	probe := func(at time.Time, ok bool) map[string][]Sample {
		return map[string][]Sample{"probed": {{Class: ClassProbe, Observer: "n1", At: at, OK: ok}}}
	}
	_, st := e.Evaluate(p, ins, probe(at(0), false), State{}, at(time.Second))
	quiet, probed := st.Instance("quiet"), st.Instance("probed")
	if quiet.Classes != [numSampleClasses]*ClassState{} || quiet.Report != nil || quiet.Recent != nil {
		t.Errorf("an instance without evidence holds class states %v, report %v and recent %v, want none",
			quiet.Classes, quiet.Report, quiet.Recent)
	}
	if obs := probed.Observers(); len(obs) != 1 || obs[0].Observer != "n1" || len(probed.Flaps()) != 0 {
		t.Errorf("a probed instance's observers %v and flaps %v, want n1's sample and none", obs, probed.Flaps())
	}
	if probed.Classes[ClassProbe] == nil || probed.Classes[ClassOutcome] != nil || probed.Class(ClassProbe).ConsecutiveFail != 1 {
		t.Fatalf("a probed instance holds class states %v, want the probe class's only, one failure", probed.Classes)
	}
	first, firstRecent := probed.Classes[ClassProbe], probed.Recent
	firstAt := firstRecent.Observers[0].At
	_, st2 := e.Evaluate(p, ins, probe(at(2*time.Second), false), st, at(3*time.Second))
	next := st2.Instance("probed")
	if got := next.Classes[ClassProbe]; got == first || first.ConsecutiveFail != 1 || got.ConsecutiveFail != 2 {
		t.Errorf("the next State's probe class %p (%d failures) after %p (now %d failures): want a copy, the first unchanged",
			got, got.ConsecutiveFail, first, first.ConsecutiveFail)
	}
	if next.Recent == firstRecent || &next.Recent.Observers[0] == &firstRecent.Observers[0] ||
		!firstRecent.Observers[0].At.Equal(firstAt) || !next.Observers()[0].At.Equal(at(2*time.Second)) {
		t.Errorf("the next State's recent %p after %p: want a copy with the new sample, the first unchanged", next.Recent, firstRecent)
	}
}

// TestStateSet: Set keeps a State's instances sorted by id, one per id,
// whatever the order they are set in, and Instance finds them; an
// evaluation returns its states in its results' order.
func TestStateSet(t *testing.T) {
	var st State
	for _, id := range []string{"b", "d", "a", "c", "d"} {
		st.Set(InstanceState{ID: id, Incarnation: uint64(len(st.Instances) + 1)})
	}
	var ids []string
	for _, x := range st.Instances {
		ids = append(ids, x.ID)
	}
	if want := []string{"a", "b", "c", "d"}; !slices.Equal(ids, want) {
		t.Fatalf("ids %v, want %v", ids, want)
	}
	if got := st.Instance("d"); got == nil || got.Incarnation != 5 {
		t.Errorf("d: %+v, want the state set last (incarnation 5)", got)
	}
	if got := st.Instance("e"); got != nil {
		t.Errorf("e: %+v, want none", got)
	}

	ins := []Instance{{ID: "z", Incarnation: 1, Lifecycle: Ready}, {ID: "b", Incarnation: 7, Lifecycle: Ready},
		{ID: "m", Incarnation: 1, Lifecycle: Starting}}
	res, next := Evaluate(Policy{}, ins, nil, st, at(time.Second))
	if len(next.Instances) != len(res.Instances) {
		t.Fatalf("%d states for %d results", len(next.Instances), len(res.Instances))
	}
	for i, r := range res.Instances {
		if s := next.Instances[i]; s.ID != r.ID || s.Incarnation != r.Incarnation || s.Published != r.Eligible {
			t.Errorf("state %d is %+v, want that of result %+v", i, s, r)
		}
	}
}

// TestRecycledListsFit: an Evaluator reuses a recycled State's list for a
// service of about its size, never for one much smaller, so that the
// lists of a large service do not end up held by small ones.
func TestRecycledListsFit(t *testing.T) {
	var e Evaluator
	p := Policy{}.WithDefaults()
	_, big := e.Evaluate(p, fleet(1000), nil, State{}, at(time.Second))
	e.Recycle(big)
	_, small := e.Evaluate(p, fleet(10), nil, State{}, at(time.Second))
	if c := cap(small.Instances); c > 10+10/8 {
		t.Errorf("a State of 10 instances holds a list of room %d", c)
	}
	_, again := e.Evaluate(p, fleet(900), nil, State{}, at(time.Second))
	if &again.Instances[:1][0] != &big.Instances[:1][0] {
		t.Errorf("a State of 900 instances did not reuse the recycled list of room %d", cap(big.Instances))
	}
}

// TestRecycleAllocations: an Evaluator that evaluates many services of
// different sizes every round, recycling each one's previous State,
// allocates nothing per instance once it has seen them all, whichever
// lists fit which service, and after every service changed size (a
// round still allocates a few times per service: its zones, its
// result's lists).
func TestRecycleAllocations(t *testing.T) {
	p := Policy{}.WithDefaults()
	const services = 3 * maxSpareLists
	measure := func(scale int) (allocs float64, total int) {
		var e Evaluator
		ins := make([][]Instance, services)
		sts := make([]State, services)
		evidence := make([]map[string][]Sample, services)
		for i := range ins {
			ins[i] = fleet(scale * (1 + i%7))
			evidence[i] = make(map[string][]Sample, len(ins[i]))
		}
		now := at(0)
		round := func() {
			now = now.Add(time.Second)
			for i := range ins {
				for _, in := range ins[i] {
					evidence[i][in.ID] = append(evidence[i][in.ID][:0], Sample{Class: ClassProbe, Observer: "n1", At: now, OK: true})
				}
				_, next := e.Evaluate(p, ins[i], evidence[i], sts[i], now)
				e.Recycle(sts[i])
				sts[i] = next
			}
		}
		for range 3 {
			round()
		}
		// Every service changes size: no list the Evaluator kept fits.
		for i := range ins {
			ins[i] = fleet(3 * scale * (1 + i%7))
			total += len(ins[i])
		}
		for range 3 {
			round()
		}
		return testing.AllocsPerRun(3, round), total
	}
	small, n1 := measure(2)
	large, n2 := measure(8)
	if per := (large - small) / float64(n2-n1); per > 0.01 {
		t.Errorf("a round allocates %.0f times with %d instances, %.0f with %d: %.3f per added instance, want none",
			small, n1, large, n2, per)
	}
}
