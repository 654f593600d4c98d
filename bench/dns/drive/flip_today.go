package main

import (
	"context"
	"time"
)

// runToday is the churn driver as it was first written (FLIP_STYLE=today),
// kept so that its figures can be set beside the steady style's.
// Instances are paired within their service (ep1 with ep5, ep2 with ep6,
// ... for 8 endpoints), and of each pair exactly one is ready after the
// setup. Each tick reports every instance once: -pct of the pairs swap
// readiness, the rest repeat the state they have, so the API does the
// same work at every -pct.
//
// The swap is in one batch, but cairn withdraws an instance the round it
// reads ready=false and re-admits one only after admit_after rounds
// spanning admit_min, and its shrink cap defers withdrawals past its
// budget: the eligible count is not what the pairs intend
// (docs/benchmarks/churn.md, "DNS work under health churn").
func runToday(ctx context.Context, s *sender, groups []group, ready []bool, pct int, interval time.Duration, obs *observer, res *FlipResult) {
	var pairs [][2]int
	for _, g := range groups {
		for k := range g.n() / 2 {
			pairs = append(pairs, [2]int{g.lo + k, g.lo + g.n()/2 + k})
		}
	}
	perTick := (len(pairs)*pct + 50) / 100
	cursor := 0
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for ctx.Err() == nil {
		tickStart := time.Now()
		flipNow := make([]bool, len(ready))
		for k := range perTick {
			p := pairs[(cursor+k)%len(pairs)]
			flipNow[p[0]], flipNow[p[1]] = true, true
		}
		cursor = (cursor + perTick) % len(pairs)
		reps := make([]report, len(ready))
		for i := range ready {
			reps[i] = report{i: i, ready: ready[i] != flipNow[i], flip: flipNow[i]}
		}
		for j, ok := range s.send(ctx, reps) {
			if ok {
				ready[reps[j].i] = reps[j].ready
			}
		}
		if ctx.Err() != nil {
			break
		}
		obs.once(ctx)
		res.Ticks++
		if time.Since(tickStart) > interval {
			res.Overruns++
			continue // start the next tick at once; missed ticks are dropped, never queued
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
}
