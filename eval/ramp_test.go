package eval

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// TestRuleDeployRamp: an incarnation registered with a deploy ramp
// starts slowly over the longer of the ramp and the policy's slow start
// (issue 30, deploy ramps); the flag, the reason and the weight the
// evaluator gives agree with Weight, which every node's table build
// calls with the same ramp.
func TestRuleDeployRamp(t *testing.T) {
	cases := []struct {
		name      string
		slowStart time.Duration // the policy's; negative: none
		ramp      time.Duration
		at        time.Duration
		want      int
		slow      bool
	}{
		{"ramp longer than policy, at start", 10 * s, 40 * s, 0, 10, true},
		{"ramp longer than policy, past the policy's window", 10 * s, 40 * s, 20 * s, 55, true},
		{"ramp longer than policy, just before its end", 10 * s, 40 * s, 40*s - time.Millisecond, 100, true},
		{"ramp longer than policy, at its end", 10 * s, 40 * s, 40 * s, 100, false},
		{"ramp shorter than policy, past the ramp", 10 * s, 4 * s, 5 * s, 55, true},
		{"ramp shorter than policy, at the policy's end", 10 * s, 4 * s, 10 * s, 100, false},
		{"no ramp, midway", 10 * s, 0, 5 * s, 55, true},
		{"no ramp, at the policy's end", 10 * s, 0, 10 * s, 100, false},
		{"ramp under a policy without slow start", -1, 20 * s, 10 * s, 55, true},
		{"no ramp, no slow start", -1, 0, 0, 100, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ins := fleet(1)
			ins[0].Ramp = tc.ramp
			p := Policy{SlowStart: tc.slowStart}
			m := newSim(t, p, ins...)
			m.step(0)
			if tc.at != 0 {
				m.step(tc.at)
			}
			r := m.inst("i0")
			if r.Weight != tc.want || r.Flags.Has(status.SlowStart) != tc.slow || slices.Contains(r.Reasons, slowStartReason) != tc.slow {
				t.Errorf("at %v: weight %d flags %v reasons %q; want %d, slow start %t", tc.at, r.Weight, r.Flags, r.Reasons, tc.want, tc.slow)
			}
			// What a table build computes from the same inputs.
			w, slow := Weight(p.WithDefaults(), 100, tc.ramp, t0, 0, t0.Add(tc.at))
			if w != r.Weight || slow != tc.slow {
				t.Errorf("Weight at %v = %d, slow %t; the evaluator gave %d, slow %t", tc.at, w, slow, r.Weight, tc.slow)
			}
		})
	}
	t.Run("a new incarnation without a ramp has none", func(t *testing.T) {
		ins := fleet(1)
		ins[0].Ramp = 40 * s
		m := newSim(t, Policy{SlowStart: 10 * s}, ins...)
		m.step(0)
		m.set("i0", func(in *Instance) { in.Incarnation, in.Ramp = 2, 0 })
		m.step(20 * s)
		m.step(25 * s)
		if r := m.inst("i0"); r.Weight != 55 || !r.Flags.Has(status.SlowStart) {
			t.Errorf("5s into the new incarnation: weight %d flags %v; want 55 in the policy's 10s slow start", r.Weight, r.Flags)
		}
		m.step(30 * s)
		if r := m.inst("i0"); r.Weight != 100 || r.Flags.Has(status.SlowStart) {
			t.Errorf("10s into the new incarnation: weight %d flags %v; want 100, slow start over", r.Weight, r.Flags)
		}
	})
}

func ExampleWeight_deployRamp() {
	p := Policy{SlowStart: 10 * time.Second}.WithDefaults()
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 10 * time.Second, 30 * time.Second, 60 * time.Second} {
		w, slow := Weight(p, 100, time.Minute, since, 0, since.Add(at))
		fmt.Printf("%v: weight %d, slow start %t\n", at, w, slow)
	}
	// Output:
	// 0s: weight 10, slow start true
	// 10s: weight 25, slow start true
	// 30s: weight 55, slow start true
	// 1m0s: weight 100, slow start false
}
