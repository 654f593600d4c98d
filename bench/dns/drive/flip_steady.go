package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// The steady style (FLIP_STYLE=steady) changes health so that every
// service keeps exactly half its endpoints eligible at every evaluation
// round, whatever the rate: answers keep their size, and the runs at 0%,
// 50% and 100% differ only in how much churn cairn handles.
//
// How cairn treats a self-report (eval, docs/health.md): the first round
// that reads ready=false withdraws the endpoint; after ready=true it is
// re-admitted in the round where it has read ready for admit_after rounds
// (and admit_min has passed). admit_after must exceed withdraw_after,
// which is at least 1, so the quickest re-admission is the second round
// that reads ready=true; the benchmark's services ask for exactly that
// (bench/dns/gen: withdraw_after 1, admit_after 2, admit_min 0s).
//
// So a swap of two endpoints of a service spans two batches. At tick t
// the one coming back (B) reports ready, and the round after reads it
// once: B stays out. At tick t+1 the one leaving (A) reports not ready,
// and the round after withdraws A and re-admits B, together. The batches
// must each land between two rounds, one batch per round: runSteady
// times them from the rounds' own clock readings (phaseLock).
//
// An endpoint is thus out for at least two rounds, which bounds the rate:
// with half of n endpoints eligible, at most n/4 swaps start per service
// per round (each needs an endpoint that has been out since before the
// tick), so at most half the endpoints change per round. At one round a
// second that is 50% a second; 100% needs rounds of 500ms.
//
// The shrink cap binds sooner. It counts every withdrawal against its
// budget, re-admissions giving nothing back (docs/decisions.md, "the
// shrink cap counts withdrawals, not net loss"), and its most, shrink_cap
// 1, lets a service of 4 published endpoints withdraw 4 per 10 s window:
// about 10% of 8 endpoints changing per second. Above that cairn defers
// the withdrawals past the budget, the deferred endpoints stay published
// and answers grow; the result's observed_deferred_max and the DNS check
// (dns_a_min, dns_a_max) show it.

// epState is an endpoint's place in the steady plan.
type epState uint8

const (
	eligible  epState = iota // reports ready and is published
	leaving                  // published; reports not ready at the next tick
	pending                  // reported ready at this tick; re-admitted the round after the next tick
	withdrawn                // reports not ready
)

// svcPlan is one service's part of the plan.
type svcPlan struct {
	g     group
	st    []epState
	since []int // tick of the last change to or from withdrawn
	// perTick is the swaps to start per tick, acc the fraction carried
	// over from tick to tick.
	perTick, acc float64
	pad          int // where the padding reports start at the next tick
}

// plan is the steady style's schedule: which reports each tick sends.
// It is pure, and used by one goroutine.
type plan struct {
	svcs    []svcPlan
	reports int // reports per service per tick: the most a tick may need, and one per instance per second
	t       int
	clamped int64 // swaps the plan could not start
}

// newPlan plans -pct percent of every service's endpoints changing per
// second at one tick per interval (cairn's evaluation interval). It
// refuses a rate that the schedule cannot keep with a constant eligible
// count.
func newPlan(groups []group, pct int, interval time.Duration) (*plan, error) {
	p := &plan{}
	perSec := float64(time.Second) / float64(interval)
	for k, g := range groups {
		n := g.n()
		// pct% of n endpoints change per second; a swap is two changes.
		perTick := float64(pct) / 100 * float64(n) / perSec / 2
		limit := maxSwaps(n)
		if perTick > limit+1e-9 {
			return nil, fmt.Errorf("flip: -pct %d at -interval %s asks %.2f swaps per round of a service of %d, and a constant eligible count allows %.2f "+
				"(an endpoint is out for two rounds at least: admit_after > withdraw_after >= 1): lower -pct, or -interval with cairn's --eval-interval",
				pct, interval, perTick, n, limit)
		}
		s := svcPlan{g: g, st: make([]epState, n), since: make([]int, n), perTick: perTick}
		for j := n / 2; j < n; j++ {
			s.st[j], s.since[j] = withdrawn, -1
		}
		// Stagger the services' fractions (by the golden ratio, so that
		// any run of neighbours, such as the few services observed, is
		// spread too), so that a fractional rate starts about as many
		// swaps at every tick and every service starts its first early.
		_, s.acc = math.Modf(float64(k+1) * 0.6180339887498949)
		p.svcs = append(p.svcs, s)
		p.reports = max(p.reports, 2*int(math.Ceil(limit)), int(math.Round(float64(n)/perSec)))
	}
	return p, nil
}

// maxSwaps is the most swaps per round that a service of n endpoints,
// half of them eligible, can start and still keep its count: each needs
// an endpoint that has been out since before the tick, and those that
// left at the last tick are not yet.
func maxSwaps(n int) float64 { return float64(n-n/2) / 2 }

// next returns the reports of the next tick and advances the plan.
// Every service sends the same number of reports at every tick, whatever
// the rate: first the swaps' own (not ready for the endpoints leaving,
// ready for those coming back), then the others' unchanged state, in
// rotation, so that the API does the same work at every -pct.
func (p *plan) next() []report {
	p.t++
	var out []report
	for si := range p.svcs {
		s := &p.svcs[si]
		n := s.g.n()
		sent := make([]bool, n)
		count := 0
		emit := func(j int, ready, flip bool) {
			out = append(out, report{i: s.g.lo + j, ready: ready, flip: flip})
			sent[j] = true
			count++
		}
		// The swaps started at the last tick complete: their leaving
		// endpoints report not ready now, and the round after this
		// batch withdraws them as it re-admits the pending ones.
		for j, st := range s.st {
			switch st {
			case leaving:
				s.st[j], s.since[j] = withdrawn, p.t
				emit(j, false, true)
			case pending:
				s.st[j] = eligible
			}
		}
		// New swaps: an endpoint out since before this tick comes back,
		// the longest out first; the longest in leaves at the next tick.
		s.acc += s.perTick
		k := int(s.acc + 1e-9)
		s.acc -= float64(k)
		for ; k > 0; k-- {
			b, a := -1, -1
			for j, st := range s.st {
				if st == withdrawn && s.since[j] < p.t && (b < 0 || s.since[j] < s.since[b]) {
					b = j
				}
				if st == eligible && (a < 0 || s.since[j] < s.since[a]) {
					a = j
				}
			}
			if a < 0 || b < 0 {
				p.clamped += int64(k)
				break
			}
			s.st[b], s.since[b] = pending, p.t
			emit(b, true, true)
			s.st[a] = leaving // since stays: it left withdrawn longest ago
		}
		// Padding: the others repeat the state they have.
		for m := 0; m < n && count < p.reports; m++ {
			j := (s.pad + m) % n
			if !sent[j] {
				emit(j, s.st[j] != withdrawn, false)
			}
		}
		s.pad = (s.pad + p.reports) % n
	}
	return out
}

// phaseLock estimates when cairn's evaluation rounds start. It is fed the
// times cairn decided verdicts (verdict_at, the round's own clock
// reading): rounds run on a ticker, so each is base + k·interval plus a
// delay that is never negative, and the earliest offset seen modulo the
// interval is the best estimate of base.
type phaseLock struct {
	interval time.Duration
	n        int
	ref      time.Time     // the first time seen
	lo, hi   time.Duration // least and greatest offset from ref, modulo interval, in [-interval/2, interval/2)
}

func (p *phaseLock) add(t time.Time) {
	if p.n == 0 {
		p.ref = t
	}
	p.n++
	d := t.Sub(p.ref) % p.interval
	switch {
	case d >= p.interval/2:
		d -= p.interval
	case d < -p.interval/2:
		d += p.interval
	}
	if p.n == 1 || d < p.lo {
		p.lo = d
	}
	if p.n == 1 || d > p.hi {
		p.hi = d
	}
}

func (p *phaseLock) locked() bool { return p.n > 0 }

// spread is how far apart the rounds' clock readings fell, modulo the
// interval: how late a round may start after its estimated start.
func (p *phaseLock) spread() time.Duration { return p.hi - p.lo }

// next returns the first estimated round start after t.
func (p *phaseLock) next(t time.Time) time.Time {
	base := p.ref.Add(p.lo)
	k := int64(t.Sub(base) / p.interval)
	r := base.Add(time.Duration(k) * p.interval)
	for !r.After(t) {
		r = r.Add(p.interval)
	}
	for r.Add(-p.interval).After(t) {
		r = r.Add(-p.interval)
	}
	return r
}

// runSteady sends the plan's batches, one per round, each offset after
// the estimated start of a round, so that it lands whole between that
// round and the next. Without verdict times to lock on (none read yet) it
// ticks on its own clock, and says so.
func runSteady(ctx context.Context, s *sender, pl *plan, obs *observer, phase *phaseLock, interval, offset time.Duration, res *FlipResult) {
	// after returns when to send the next batch: offset after the first
	// round whose send time has not passed.
	after := func(now time.Time) time.Time {
		if !phase.locked() {
			return now
		}
		return phase.next(now.Add(-offset)).Add(offset)
	}
	defer func() {
		res.RoundSpread = float64(phase.spread()) / float64(time.Millisecond)
		res.Clamped = pl.clamped
	}()
	at := after(time.Now())
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-timer.C:
		}
		res.PhaseLocked = phase.locked()
		round := at.Add(-offset) // the round this batch follows
		batchStart := time.Now()
		s.send(ctx, pl.next())
		end := time.Now()
		if ctx.Err() != nil {
			break
		}
		res.BatchMax = max(res.BatchMax, float64(end.Sub(batchStart))/float64(time.Millisecond))
		if phase.locked() && end.After(round.Add(interval)) {
			res.LateBatches++
		}
		obs.once(ctx)
		res.Ticks++
		// The next batch follows the next round. A round gone by without
		// a batch is an overrun: the swaps in flight take a round longer,
		// and their services hold one endpoint too many for that round.
		if phase.locked() {
			at = after(time.Now())
			if at.Add(-offset).Sub(round) > interval*3/2 {
				res.Overruns++
			}
		} else {
			at = at.Add(interval)
			if now := time.Now(); now.After(at) {
				res.Overruns++
				at = now
			}
		}
		timer.Reset(time.Until(at))
	}
}
