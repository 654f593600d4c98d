package main

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// modelEndpoint is cairn's evaluation of one endpoint's self-reports, as
// the benchmark's policy sets it (eval.judge with withdraw_after 1,
// admit_after 2, admit_min 0s, no shrink cap, no flap quarantine): a
// round that reads ready=false withdraws at once; after that, the second
// round in a row that reads ready=true re-admits.
type modelEndpoint struct {
	ready, failing, eligible bool
	readyRounds              int
}

func (m *modelEndpoint) round() {
	switch {
	case !m.ready:
		m.failing, m.readyRounds, m.eligible = true, 0, false
	case m.failing:
		m.readyRounds++
		if m.readyRounds >= 2 {
			m.failing, m.eligible = false, true
		}
	default:
		m.eligible = true
	}
}

func groupsOf(services, n int) []group {
	gs := make([]group, services)
	for k := range gs {
		gs[k] = group{k * n, (k + 1) * n}
	}
	return gs
}

// TestSteadyPlanKeepsTheEligibleCount runs the plan against the model,
// one batch between every two rounds, and checks that every service has
// exactly half its endpoints eligible after every round, that the
// endpoints change at the asked rate, and that every tick sends as many
// reports as the others.
func TestSteadyPlanKeepsTheEligibleCount(t *testing.T) {
	for _, tc := range []struct {
		n, pct   int
		interval time.Duration
	}{
		{8, 0, time.Second},
		{8, 50, time.Second},
		{8, 25, time.Second},
		{8, 30, time.Second}, // 1.2 swaps per round: fractions carried over
		{8, 100, 500 * time.Millisecond},
		{8, 50, 500 * time.Millisecond},
		{8, 10, 500 * time.Millisecond},
		{4, 50, 500 * time.Millisecond},
		{2, 20, time.Second},
	} {
		t.Run(fmt.Sprintf("%d endpoints, %d%% at %s", tc.n, tc.pct, tc.interval), func(t *testing.T) {
			const services, ticks = 7, 200
			gs := groupsOf(services, tc.n)
			pl, err := newPlan(gs, tc.pct, tc.interval)
			if err != nil {
				t.Fatal(err)
			}
			eps := make([]modelEndpoint, services*tc.n)
			for _, g := range gs { // the setup's state
				for i := g.lo; i < g.hi; i++ {
					first := i < g.lo+g.n()/2
					eps[i] = modelEndpoint{ready: first, eligible: first, failing: !first}
				}
			}
			changes := 0
			for tick := range ticks {
				reps := pl.next()
				if len(reps) != services*pl.reports {
					t.Fatalf("tick %d: %d reports, want %d (%d per service)", tick, len(reps), services*pl.reports, pl.reports)
				}
				for _, r := range reps {
					eps[r.i].ready = r.ready
				}
				for i := range eps {
					before := eps[i].eligible
					eps[i].round()
					if eps[i].eligible != before {
						changes++
					}
				}
				for _, g := range gs {
					e := 0
					for i := g.lo; i < g.hi; i++ {
						if eps[i].eligible {
							e++
						}
					}
					if e != g.n()/2 {
						t.Fatalf("round after tick %d: service at %d has %d of %d eligible, want %d", tick, g.lo, e, g.n(), g.n()/2)
					}
				}
			}
			if pl.clamped != 0 {
				t.Errorf("%d swaps clamped", pl.clamped)
			}
			perSec := float64(changes) / (float64(ticks) * tc.interval.Seconds()) / float64(services*tc.n) * 100
			if math.Abs(perSec-float64(tc.pct)) > 1 {
				t.Errorf("%.1f%% of the endpoints changed per second, want %d%%", perSec, tc.pct)
			}
		})
	}
}

func TestSteadyPlanRefusesWhatItCannotKeep(t *testing.T) {
	gs := groupsOf(3, 8)
	for _, tc := range []struct {
		pct      int
		interval time.Duration
		ok       bool
	}{
		{50, time.Second, true},
		{51, time.Second, false},
		{100, time.Second, false},
		{100, 500 * time.Millisecond, true},
		{100, 600 * time.Millisecond, false},
	} {
		_, err := newPlan(gs, tc.pct, tc.interval)
		if (err == nil) != tc.ok {
			t.Errorf("%d%% at %s: err %v, want ok %t", tc.pct, tc.interval, err, tc.ok)
		}
	}
}

// TestPhaseLock feeds round times that start late by up to 30ms and
// checks that the estimate is the earliest, whatever side of the first
// time seen the others fall.
func TestPhaseLock(t *testing.T) {
	const interval = 500 * time.Millisecond
	base := time.Unix(1_000_000, 0).Add(490 * time.Millisecond) // near the wrap of a second
	delays := []time.Duration{30, 4, 17, 0, 22, 9}              // ms
	p := &phaseLock{interval: interval}
	for k, d := range delays {
		p.add(base.Add(time.Duration(k*3)*interval + d*time.Millisecond))
	}
	if got, want := p.spread(), 30*time.Millisecond; got != want {
		t.Errorf("spread %s, want %s", got, want)
	}
	for _, tc := range []struct {
		after time.Duration // from base
		want  time.Duration
	}{
		{0, interval},
		{-time.Nanosecond, 0},
		{interval - time.Nanosecond, interval},
		{7*interval + 3*time.Millisecond, 8 * interval},
		{-5*interval - time.Millisecond, -5 * interval},
	} {
		if got := p.next(base.Add(tc.after)); !got.Equal(base.Add(tc.want)) {
			t.Errorf("next(base%+v) = base%+v, want base%+v", tc.after, got.Sub(base), tc.want)
		}
	}
}

func TestGroupServices(t *testing.T) {
	in := func(svc, id string) Instance { return Instance{Namespace: "bench", Service: svc, InstanceID: id} }
	gs, err := groupServices([]Instance{in("a", "1"), in("a", "2"), in("b", "1"), in("b", "2"), in("b", "3"), in("b", "4")})
	if err != nil {
		t.Fatal(err)
	}
	if len(gs) != 2 || gs[0] != (group{0, 2}) || gs[1] != (group{2, 6}) {
		t.Errorf("groups %v", gs)
	}
	if _, err := groupServices([]Instance{in("a", "1"), in("a", "2"), in("a", "3")}); err == nil {
		t.Error("a service of 3 instances was accepted")
	}
}
