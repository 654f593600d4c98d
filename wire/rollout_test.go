package wire

import (
	"testing"
	"time"
)

// TestLatestSince: a rollout begins with a registration made once every
// earlier instance's slow-start window has passed since its
// registration; registrations while one is still within its window join
// it.
func TestLatestSince(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	s := time.Second
	cases := []struct {
		name string
		regs []time.Duration
		wins []time.Duration
		want time.Duration // offset of the start; -1: none
	}{
		{"none", nil, nil, -1},
		{"one", []time.Duration{5 * s}, []time.Duration{30 * s}, 5 * s},
		{"all at once", []time.Duration{0, 0, 0}, []time.Duration{30 * s, 30 * s, 30 * s}, 0},
		{"a later registration after everything settled begins a new one",
			[]time.Duration{0, s, 10 * time.Minute}, []time.Duration{30 * s, 30 * s, 30 * s}, 10 * time.Minute},
		{"a chain of overlapping ramps is one rollout",
			[]time.Duration{0, 10 * time.Minute, 10*time.Minute + 50*s, 10*time.Minute + 100*s},
			[]time.Duration{30 * s, time.Minute, time.Minute, time.Minute}, 10 * time.Minute},
		{"a gap longer than every window splits it",
			[]time.Duration{0, 2 * time.Minute, 2*time.Minute + 10*s},
			[]time.Duration{time.Minute, 5 * s, 5 * s}, 2*time.Minute + 10*s},
		{"a long ramp earlier keeps a later registration in its rollout",
			[]time.Duration{0, 30 * s, 50 * time.Minute},
			[]time.Duration{time.Hour, 2 * s, 2 * s}, 0},
		{"a registration exactly as the last window ends joins it",
			[]time.Duration{0, 30 * s}, []time.Duration{30 * s, 30 * s}, 0},
		{"in any order", []time.Duration{10 * time.Minute, 0, s}, []time.Duration{30 * s, 30 * s, 30 * s}, 10 * time.Minute},
		{"no slow start: each registration at another time is its own", []time.Duration{0, s}, []time.Duration{-1, -1}, s},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			regs := make([]time.Time, len(tc.regs))
			for i, d := range tc.regs {
				regs[i] = at(d)
			}
			got := LatestSince(regs, tc.wins)
			want := time.Time{}
			if tc.want >= 0 {
				want = at(tc.want)
			}
			if !got.Equal(want) {
				t.Errorf("LatestSince = %v, want %v", got, want)
			}
		})
	}
}
