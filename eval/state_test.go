package eval

import (
	"testing"
	"time"
	"unsafe"
)

// TestStateIsCompact: an evaluator keeps one InstanceState per instance
// for as long as the instance lives, so its size is guarded, and a class
// or a self-report without state takes no memory beyond a nil pointer.
// A State's ClassStates are its own: the next evaluation's never share
// the previous one's, which its Evaluator may recycle.
func TestStateIsCompact(t *testing.T) {
	for _, c := range []struct {
		name       string
		got, limit uintptr
	}{
		{"InstanceState", unsafe.Sizeof(InstanceState{}), 168},
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
	quiet, probed := st.Instances["quiet"], st.Instances["probed"]
	if quiet.Classes != [numSampleClasses]*ClassState{} || quiet.Report != nil {
		t.Errorf("an instance without evidence holds class states %v and report %v, want none", quiet.Classes, quiet.Report)
	}
	if probed.Classes[ClassProbe] == nil || probed.Classes[ClassOutcome] != nil || probed.Class(ClassProbe).ConsecutiveFail != 1 {
		t.Fatalf("a probed instance holds class states %v, want the probe class's only, one failure", probed.Classes)
	}
	first := probed.Classes[ClassProbe]
	_, st2 := e.Evaluate(p, ins, probe(at(2*time.Second), false), st, at(3*time.Second))
	if got := st2.Instances["probed"].Classes[ClassProbe]; got == first || first.ConsecutiveFail != 1 || got.ConsecutiveFail != 2 {
		t.Errorf("the next State's probe class %p (%d failures) after %p (now %d failures): want a copy, the first unchanged",
			got, got.ConsecutiveFail, first, first.ConsecutiveFail)
	}
}
