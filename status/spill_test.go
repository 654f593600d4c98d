package status

import (
	"math"
	"testing"
)

func TestSpill(t *testing.T) {
	type ep struct {
		tier    int
		healthy bool
		share   float64 // 0: 1
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-9 }
	for _, tc := range []struct {
		name      string
		eps       []ep
		minFrac   float64
		use       [NumTiers]bool
		disregard bool
		load      [NumTiers]float64
	}{
		{"none", nil, 0.5, [NumTiers]bool{}, false, [NumTiers]float64{}},
		{"own zone healthy", []ep{{0, true, 0}, {0, true, 0}, {1, true, 0}}, 0.5,
			[NumTiers]bool{true}, false, [NumTiers]float64{1}},
		// 3 of 4 healthy: 0.75 × 1.4 ≥ 1, no spill.
		{"own zone at 3/4", []ep{{0, true, 0}, {0, true, 0}, {0, true, 0}, {0, false, 0}, {1, true, 0}}, 0.5,
			[NumTiers]bool{true}, false, [NumTiers]float64{1}},
		// 1 of 3 healthy keeps 1.4/3 and spills the rest to the region.
		{"own zone at 1/3", []ep{{0, true, 0}, {0, false, 0}, {0, false, 0}, {1, true, 0}, {1, true, 0}, {2, true, 0}}, 0.5,
			[NumTiers]bool{true, true}, false, [NumTiers]float64{1.4 / 3, 1 - 1.4/3}},
		// Nothing healthy in the first two tiers, the third takes all.
		{"to the third tier", []ep{{0, false, 0}, {1, false, 0}, {2, true, 0}, {2, true, 0}}, 0.25,
			[NumTiers]bool{true, true, true}, false, [NumTiers]float64{0, 0, 1}},
		// 1 of 4 healthy over the tiers used: below 0.5, health is
		// disregarded, the load shared by the tiers' numbers.
		{"disregarded", []ep{{0, false, 0}, {0, false, 0}, {1, true, 0}, {1, false, 0}}, 0.5,
			[NumTiers]bool{true, true}, true, [NumTiers]float64{0.5, 0.5}},
		{"never disregarded at 0", []ep{{0, false, 0}, {0, false, 0}}, 0,
			[NumTiers]bool{true}, false, [NumTiers]float64{1}},
		// The caller's zone evacuated: its endpoints are in the last
		// tier, unused while the region carries the caller.
		{"own zone evacuated", []ep{{3, true, 0}, {3, true, 0}, {1, true, 0}, {1, true, 0}}, 0.5,
			[NumTiers]bool{false, true}, false, [NumTiers]float64{0, 1}},
		// Nothing else left: the caller spills into the evacuated zone.
		{"spills into the evacuated zone", []ep{{3, true, 0}, {3, true, 0}, {1, false, 0}, {1, false, 0}}, 0.25,
			[NumTiers]bool{false, true, false, true}, false, [NumTiers]float64{0, 0, 0, 1}},
		// The zone returning at a share of 0.3: 1.4 × 0.3 of the load,
		// the rest to the region, as if 30% of the zone were healthy.
		{"own zone returning", []ep{{0, true, 0.3}, {0, true, 0.3}, {1, true, 0}, {1, true, 0}}, 0.5,
			[NumTiers]bool{true, true}, false, [NumTiers]float64{1.4 * 0.3, 1 - 1.4*0.3}},
		// A returning zone's healthy endpoints count whole for the guard:
		// 2 of 4 healthy is not below 0.5.
		{"returning is not unhealthy", []ep{{0, true, 0.1}, {0, true, 0.1}, {1, false, 0}, {1, false, 0}}, 0.5,
			[NumTiers]bool{true, true}, false, [NumTiers]float64{1.4 * 0.1, 1 - 1.4*0.1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c TierCounts
			for _, e := range tc.eps {
				share := e.share
				if share == 0 {
					share = 1
				}
				c.Add(e.tier, e.healthy, share, 100, 100*share)
			}
			sp := c.Spill(tc.minFrac)
			if sp.Use != tc.use || sp.Disregard != tc.disregard {
				t.Fatalf("use %v disregard %v; want %v %v", sp.Use, sp.Disregard, tc.use, tc.disregard)
			}
			for tr := range NumTiers {
				if !near(sp.Load[tr], tc.load[tr]) {
					t.Errorf("tier %d load %v, want %v", tr, sp.Load[tr], tc.load[tr])
				}
			}
		})
	}
}
