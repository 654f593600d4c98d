// Package withdraw measures how long a withdrawal takes to reach the
// status table the DNS and xDS servers read, on one node with its health
// loop running (SPEC §2: within 100 ms of the node applying it), by the
// phase of its round the loop was in when the withdrawal was applied.
//
// A withdrawal applied while the loop is idle is published at once; one
// applied during the evaluation, at its next pause between services; one
// applied during a catalog refresh or a table build waits for the build
// to end. Drains are therefore aimed at each phase in turn, at a random
// point inside it (a random offset into the phase, up to the length it
// had the round before), and one more at a random point of each round's
// idle time; each is counted under the phase the loop was in when the
// drain was applied (publish.Config.OnPhase), whatever was aimed at.
//
// Two sizes: one service of 10,000 instances (the evaluation is one unit
// with no pause inside), and 1,000 services of 8 (the DNS bench's size).
// The reference in the same run is the end of the next full build, the
// only way a withdrawal reached the table before issue 8.
package withdraw

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

func BenchmarkDrainToTable(b *testing.B) {
	for _, size := range []struct{ services, per int }{{1, 10_000}, {1_000, 8}} {
		b.Run(fmt.Sprintf("services=%d/instances=%d", size.services, size.services*size.per), func(b *testing.B) {
			benchDrains(b, size.services, size.per)
		})
	}
}

// transition is one phase the loop entered, and when.
type transition struct {
	at time.Time
	p  publish.Phase
}

// phases records the loop's transitions (publish.Config.OnPhase).
type phases struct {
	cur    atomic.Uint32 // the phase the loop is in
	moves  atomic.Uint64 // transitions so far
	moved  chan struct{} // signalled at each transition
	mu     sync.Mutex
	log    []transition
	offset int // log[:offset] has been waited past
}

func (ph *phases) enter(p publish.Phase) {
	now := time.Now()
	ph.cur.Store(uint32(p))
	ph.moves.Add(1)
	ph.mu.Lock()
	ph.log = append(ph.log, transition{now, p})
	ph.mu.Unlock()
	select {
	case ph.moved <- struct{}{}:
	default:
	}
}

// next waits for the loop to enter p (the round's first refresh for
// PhaseRefresh: the one after idle) after what earlier calls waited for,
// and returns when it did and how long p lasted the last time it ran to
// its end (0 if it never has).
func (ph *phases) next(ctx context.Context, p publish.Phase) (time.Time, time.Duration, error) {
	for {
		ph.mu.Lock()
		var last time.Duration
		for i := 1; i+1 < len(ph.log); i++ {
			if ph.log[i].p == p && (p != publish.PhaseRefresh || ph.log[i-1].p == publish.PhaseIdle) {
				last = ph.log[i+1].at.Sub(ph.log[i].at)
			}
		}
		for i := max(ph.offset, 1); i < len(ph.log); i++ {
			if ph.log[i].p == p && (p != publish.PhaseRefresh || ph.log[i-1].p == publish.PhaseIdle) {
				ph.offset = i + 1
				at := ph.log[i].at
				ph.mu.Unlock()
				return at, last, nil
			}
		}
		ph.offset = max(ph.offset, len(ph.log))
		ph.mu.Unlock()
		select {
		case <-ctx.Done():
			return time.Time{}, 0, fmt.Errorf("waiting for the loop to enter %s: %w", p, ctx.Err())
		case <-ph.moved:
		}
	}
}

// roundEnd returns when the first round to end after t ended (the loop
// went idle after a build), false if none has yet.
func (ph *phases) roundEnd(t time.Time) (time.Time, bool) {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	for i := 1; i < len(ph.log); i++ {
		if l := ph.log[i]; l.p == publish.PhaseIdle && ph.log[i-1].p == publish.PhaseBuild && l.at.After(t) {
			return l.at, true
		}
	}
	return time.Time{}, false
}

// roundStart returns when the last round to start before t started (its
// first refresh).
func (ph *phases) roundStart(t time.Time) time.Time {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	for i := len(ph.log) - 1; i > 0; i-- {
		if l := ph.log[i]; l.p == publish.PhaseRefresh && ph.log[i-1].p == publish.PhaseIdle && l.at.Before(t) {
			return l.at
		}
	}
	return t
}

// durations returns how long each run of p lasted.
func (ph *phases) durations(p publish.Phase) []time.Duration {
	ph.mu.Lock()
	defer ph.mu.Unlock()
	var ds []time.Duration
	for i := 0; i+1 < len(ph.log); i++ {
		if ph.log[i].p == p {
			ds = append(ds, ph.log[i+1].at.Sub(ph.log[i].at))
		}
	}
	return ds
}

func benchDrains(b *testing.B, services, per int) {
	instances := services * per
	st := storetest.Single(b, store.Config{})
	ctx := context.Background()
	var svcs []wire.Service
	for s := range services {
		svcs = append(svcs, wire.Service{Namespace: "bench", Name: fmt.Sprintf("s%d", s),
			Ports: []wire.Port{{Name: "http", Number: 8080}},
			// Up to every instance drains: no disruption budget.
			Policy: wire.Policy{LeaseTTL: wire.Duration(time.Hour), DrainWindow: wire.Duration(time.Hour), MaxUnavailable: "100%"}})
	}
	if _, err := st.ApplyServices(ctx, "bench", svcs); err != nil {
		b.Fatal(err)
	}
	// Registered in an order that spreads the drains over the services.
	ins := make([]wire.Instance, 0, instances)
	for i := range per {
		for s := range services {
			n := len(ins)
			in, _, err := st.Register(ctx, "bench", wire.Registration{Namespace: "bench", Service: svcs[s].Name,
				ID: fmt.Sprintf("i%d", i), Addresses: []string{fmt.Sprintf("10.%d.%d.%d", n>>16, (n>>8)&255, n&255)},
				Ports: map[string]int{"http": 8080}})
			if err != nil {
				b.Fatal(err)
			}
			ins = append(ins, in)
		}
	}
	pub, err := status.New(status.Config{Capacity: 2 * instances})
	if err != nil {
		b.Fatal(err)
	}
	ph := &phases{moved: make(chan struct{}, 1)}
	reg := prometheus.NewRegistry()
	pn, err := publish.New(publish.Config{Store: st.Store, Table: pub, Registerer: reg, Logger: storetest.Logger(b), OnPhase: ph.enter})
	if err != nil {
		b.Fatal(err)
	}
	n, err := health.New(health.Config{Store: st.Store, Publish: pn, Registerer: reg, Logger: storetest.Logger(b)})
	if err != nil {
		b.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(rctx) }()
	defer func() { stop(); <-done }()
	// Wait until the table holds every instance.
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = pn.WaitPublished(wctx, st.Revision())
	cancel()
	if err != nil {
		b.Fatal(err)
	}
	if b.N > instances {
		b.Fatalf("at most %d drains (-benchtime=Nx)", instances)
	}
	rnd := rand.New(rand.NewPCG(1, uint64(b.N)))
	byPhase := map[publish.Phase][]time.Duration{}
	var full []time.Duration
	var applied []time.Time
	straddled := 0 // drains during which the loop changed phase
	drain := func(in wire.Instance) {
		b.Helper()
		moves := ph.moves.Load()
		if _, err := st.Drain(ctx, "bench", in.Key(), in.Incarnation); err != nil {
			b.Fatal(err)
		}
		at := time.Now()
		p := publish.Phase(ph.cur.Load())
		if ph.moves.Load() != moves {
			// Applied in the phase before or in this one: counted in
			// this one, as its wait starts now.
			straddled++
		}
		rev := st.Revision()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := pn.WaitPublished(wctx, rev); err != nil {
			b.Fatal(err)
		}
		byPhase[p] = append(byPhase[p], time.Since(at))
		applied = append(applied, at)
	}
	// A random offset into a phase that lasted last the time before.
	into := func(last time.Duration) time.Duration {
		if last <= 0 {
			last = 10 * time.Millisecond
		}
		return time.Duration(rnd.Int64N(int64(last)))
	}
	aims := []publish.Phase{publish.PhaseRefresh, publish.PhaseEvaluate, publish.PhaseBuild}
	b.ResetTimer()
	for i := 0; i < b.N; {
		// One drain aimed at a phase of the round…
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		entered, last, err := ph.next(wctx, aims[(i/2)%len(aims)])
		if err != nil {
			cancel()
			b.Fatal(err)
		}
		time.Sleep(time.Until(entered.Add(into(last)))) // the arrival time: a random point in the phase
		drain(ins[i])
		i++
		// …and one at a random point of the idle time after it.
		if i < b.N {
			entered, _, err = ph.next(wctx, publish.PhaseIdle)
			if err != nil {
				cancel()
				b.Fatal(err)
			}
			// Up to the next round: the ticker's interval, less what
			// this round took.
			idle := publish.DefaultInterval - entered.Sub(ph.roundStart(entered))
			time.Sleep(time.Until(entered.Add(into(idle)))) // the arrival time: a random point of the idle time
			drain(ins[i])
			i++
		}
		cancel()
	}
	b.StopTimer()
	// The reference: the end of the next full build after each drain.
	wctx, cancel = context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, at := range applied {
		end, ok := ph.roundEnd(at)
		for ; !ok; end, ok = ph.roundEnd(at) {
			select {
			case <-wctx.Done():
				b.Fatal("no round ended after the last drain")
			case <-ph.moved:
			}
		}
		full = append(full, end.Sub(at))
	}

	q := func(ds []time.Duration, p float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	var all []time.Duration
	for _, p := range []publish.Phase{publish.PhaseIdle, publish.PhaseRefresh, publish.PhaseEvaluate, publish.PhaseBuild} {
		ds := byPhase[p]
		all = append(all, ds...)
		b.ReportMetric(float64(len(ds)), p.String()+"-n")
		if len(ds) == 0 {
			continue
		}
		b.ReportMetric(q(ds, 0.5), p.String()+"-p50-ms")
		b.ReportMetric(q(ds, 0.99), p.String()+"-p99-ms")
		b.ReportMetric(q(ds, 1), p.String()+"-max-ms")
		if p != publish.PhaseIdle {
			if d := ph.durations(p); len(d) > 0 {
				b.ReportMetric(q(d, 0.5), p.String()+"-lasts-p50-ms")
			}
		}
	}
	b.ReportMetric(q(all, 0.99), "all-p99-ms")
	b.ReportMetric(q(all, 1), "all-max-ms")
	b.ReportMetric(q(full, 0.5), "fullbuild-p50-ms")
	b.ReportMetric(float64(straddled), "straddled-n")
}
