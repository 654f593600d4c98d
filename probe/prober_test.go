package probe

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// checkFunc is a stand-in for the real checks in scheduler tests.
type checkFunc func(ctx context.Context, t Target) Outcome

// newTestProber builds a Prober whose checks are fn. Under synctest it
// must be called inside the bubble, so that Run's channels belong to it.
func newTestProber(t *testing.T, cfg Config, fn checkFunc) (*Prober, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	if cfg.Observer == "" {
		cfg.Observer = "node-a"
	}
	cfg.Logger = testLogger(t)
	cfg.Registerer = reg
	if cfg.Rand == nil {
		cfg.Rand = rand.New(rand.NewPCG(1, 2))
	}
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if fn != nil {
		p.check = func(ctx context.Context, t Target, _ *conn) (Outcome, bool) { return fn(ctx, t), false }
	}
	return p, reg
}

// start runs p until the returned stop is called; stop returns Run's
// error.
func start(t *testing.T, p *Prober) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() { errc <- p.Run(ctx) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			err = <-errc
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

// tcpTargets returns n TCP targets t0…t(n-1) with the given interval and a
// timeout of a tenth of it.
func tcpTargets(n int, interval time.Duration) []Target {
	ts := make([]Target, n)
	for i := range ts {
		ts[i] = Target{
			ID:       fmt.Sprintf("t%d", i),
			Kind:     TCP,
			Addr:     netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(1000+i)),
			Interval: interval,
			Timeout:  interval / 10,
		}
	}
	return ts
}

// recorder is a check that passes at once and records when each target
// was probed.
type recorder struct {
	mu    sync.Mutex
	times map[string][]time.Time
}

func newRecorder() *recorder { return &recorder{times: map[string][]time.Time{}} }

func (r *recorder) check(_ context.Context, t Target) Outcome {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.times[t.ID] = append(r.times[t.ID], time.Now())
	return Outcome{OK: true, Code: len(r.times[t.ID])}
}

func (r *recorder) get(id string) []time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Time(nil), r.times[id]...)
}

func counter(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	return testutil.ToFloat64(c)
}

func TestScheduleJitter(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 10 * time.Second
		rec := newRecorder()
		p, _ := newTestProber(t, Config{Capacity: 50}, rec.check)
		ts := tcpTargets(50, interval)
		if err := p.SetTargets(ts); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		start(t, p)
		time.Sleep(20*interval + interval/2)

		for _, tg := range ts {
			times := rec.get(tg.ID)
			if len(times) < 19 || len(times) > 23 {
				t.Errorf("%s probed %d times in 20.5 intervals; want about 20", tg.ID, len(times))
			}
			if first := times[0].Sub(t0); first < 0 || first >= interval {
				t.Errorf("%s first probed after %v; want within [0, %v)", tg.ID, first, interval)
			}
			for i := 1; i < len(times); i++ {
				if gap := times[i].Sub(times[i-1]); gap < interval*9/10 || gap > interval*11/10 {
					t.Errorf("%s probe %d came %v after the last; want %v ± 10%%", tg.ID, i, gap, interval)
				}
			}
		}
	})
}

func TestScheduleSpreadsFirstProbes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const (
			n        = 1000
			interval = 10 * time.Second
			buckets  = 10
		)
		rec := newRecorder()
		p, _ := newTestProber(t, Config{Capacity: n, Workers: n}, rec.check)
		ts := tcpTargets(n, interval)
		if err := p.SetTargets(ts); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		start(t, p)
		time.Sleep(interval)
		var hist [buckets]int
		for _, tg := range ts {
			times := rec.get(tg.ID)
			if len(times) == 0 {
				t.Fatalf("%s not probed within its first interval", tg.ID)
			}
			hist[times[0].Sub(t0)*buckets/interval]++
		}
		// Uniform: 100 a bucket; binomial sd ≈ 9.5, so ±40 is > 4 sd.
		for i, c := range hist {
			if c < 60 || c > 140 {
				t.Errorf("first probes in [%v, %v): %d; want about %d (histogram %v)",
					time.Duration(i)*interval/buckets, time.Duration(i+1)*interval/buckets, c, n/buckets, hist)
			}
		}
	})
}

func TestWorkerPoolBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const workers = 4
		var running, peak, probes atomic.Int64
		slow := func(ctx context.Context, _ Target) Outcome {
			probes.Add(1)
			n := running.Add(1)
			defer running.Add(-1)
			for {
				if p := peak.Load(); n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			select { // a check that takes 300ms of (fake) time
			case <-time.After(300 * time.Millisecond):
				return Outcome{OK: true}
			case <-ctx.Done():
				return Outcome{Err: "timeout"}
			}
		}
		p, _ := newTestProber(t, Config{Workers: workers, Capacity: 40}, slow)
		ts := tcpTargets(40, time.Second)
		for i := range ts {
			ts[i].Timeout = time.Second
		}
		if err := p.SetTargets(ts); err != nil {
			t.Fatal(err)
		}
		start(t, p)
		time.Sleep(10 * time.Second)
		synctest.Wait()

		if got := peak.Load(); got != workers {
			t.Errorf("at most %d checks ran at once; want exactly Workers = %d", got, workers)
		}
		busy := counter(t, p.metrics.skipped[skipBusy])
		// 4 workers × 300ms checks do at most about 133 probes in 10 s of
		// the 400 that came due; the rest were skipped, not queued.
		if n := probes.Load(); n < 120 || n > 140 {
			t.Errorf("%d probes ran; want about 133", n)
		}
		if busy < 250 {
			t.Errorf("%v probes skipped as busy; want about 267", busy)
		}
	})
}

func TestSaturatedPoolSkips(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		var started atomic.Int64
		blocked := func(ctx context.Context, _ Target) Outcome {
			started.Add(1)
			select {
			case <-release:
				return Outcome{OK: true}
			case <-ctx.Done():
				return Outcome{Err: "timeout"}
			}
		}
		p, reg := newTestProber(t, Config{Workers: 2, Capacity: 5}, blocked)
		ts := tcpTargets(5, time.Second)
		for i := range ts {
			ts[i].Timeout = time.Second
		}
		if err := p.SetTargets(ts); err != nil {
			t.Fatal(err)
		}
		start(t, p)
		time.Sleep(time.Second - time.Millisecond) // every first probe came due once
		synctest.Wait()
		if n := started.Load(); n != 2 {
			t.Errorf("%d checks started; want 2 (Workers)", n)
		}
		if n := counter(t, p.metrics.skipped[skipBusy]); n != 3 {
			t.Errorf("skipped (busy) = %v; want 3", n)
		}
		close(release)
		synctest.Wait()
		if n := counter(t, p.metrics.probes[TCP][resultOK]); n != 2 {
			t.Errorf("probes ok = %v; want 2", n)
		}
		if probs, err := testutil.GatherAndLint(reg); err != nil || len(probs) > 0 {
			t.Errorf("metric lint: %v %v", probs, err)
		}
	})
}

func TestOverlappingProbeSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var calls atomic.Int64
		hang := func(ctx context.Context, _ Target) Outcome {
			calls.Add(1)
			<-ctx.Done()
			return Outcome{Err: "timeout"}
		}
		p, _ := newTestProber(t, Config{Capacity: 1}, hang)
		tg := tcpTargets(1, time.Second)[0]
		tg.Timeout = time.Second // a hung check outlives a jittered interval
		if err := p.SetTargets([]Target{tg}); err != nil {
			t.Fatal(err)
		}
		start(t, p)
		time.Sleep(100 * time.Second)
		synctest.Wait()
		calls2 := calls.Load()
		inflight := counter(t, p.metrics.skipped[skipInFlight])
		if inflight == 0 {
			t.Errorf("no probe skipped as in flight")
		}
		if total := float64(calls2) + inflight; total < 95 || total > 105 {
			t.Errorf("%d probes + %v skipped; want about 100 due", calls2, inflight)
		}
		if n := counter(t, p.metrics.probes[TCP][resultFail]); n != float64(calls2) && n != float64(calls2-1) {
			t.Errorf("failed probes %v; want %d (one may be in flight)", n, calls2)
		}
	})
}

func TestSetTargetsKeepsSchedules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const interval = 10 * time.Second
		rec := newRecorder()
		p, _ := newTestProber(t, Config{Capacity: 64, BatchInterval: time.Second}, rec.check)
		ts := tcpTargets(60, interval)
		if err := p.SetTargets(ts); err != nil {
			t.Fatal(err)
		}
		start(t, p)
		time.Sleep(interval) // each probed once or twice
		last := map[string]time.Time{}
		count := map[string]int{}
		for _, tg := range ts {
			times := rec.get(tg.ID)
			if len(times) == 0 {
				t.Fatalf("%s not probed in the first interval", tg.ID)
			}
			last[tg.ID], count[tg.ID] = times[len(times)-1], len(times)
		}

		// Keep t0…t49 (t1's timeout changes), drop t50…t59, add n0…n9.
		next := append([]Target(nil), ts[:50]...)
		next[1].Timeout = 2 * time.Second
		added := tcpTargets(10, interval)
		for i := range added {
			added[i].ID = fmt.Sprintf("n%d", i)
		}
		next = append(next, added...)
		if err := p.SetTargets(next); err != nil {
			t.Fatal(err)
		}
		changedAt := time.Now()
		time.Sleep(interval + interval/2)

		for _, tg := range ts[:50] {
			times := rec.get(tg.ID)
			if len(times) <= count[tg.ID] {
				t.Fatalf("%s not probed again", tg.ID)
			}
			if gap := times[count[tg.ID]].Sub(last[tg.ID]); gap < interval*9/10 || gap > interval*11/10 {
				t.Errorf("%s: second probe %v after the first; want %v ± 10%% (schedule kept); times %v", tg.ID, gap, interval, times)
			}
		}
		for _, tg := range ts[50:] {
			if n := len(rec.get(tg.ID)); n != count[tg.ID] {
				t.Errorf("removed %s probed %d times; want %d (before removal)", tg.ID, n, count[tg.ID])
			}
		}
		for _, tg := range added {
			times := rec.get(tg.ID)
			if len(times) == 0 {
				t.Fatalf("added %s never probed", tg.ID)
			}
			if d := times[0].Sub(changedAt); d < 0 || d >= interval {
				t.Errorf("added %s first probed %v after SetTargets; want within [0, %v)", tg.ID, d, interval)
			}
		}
		if n := testutil.ToFloat64(p.metrics.targets); n != 60 {
			t.Errorf("targets gauge %v; want 60", n)
		}

		// The latest batch holds exactly the current set.
		b := latestBatch(t, p)
		ids := map[string]bool{}
		for _, r := range b.Results {
			if r.TargetID != "" {
				ids[r.TargetID] = true
			}
		}
		for _, tg := range next {
			if !ids[tg.ID] {
				t.Errorf("batch lacks %s", tg.ID)
			}
		}
		if len(ids) != len(next) {
			t.Errorf("batch holds %d targets; want %d", len(ids), len(next))
		}
	})
}

// latestBatch waits (in fake time) for the next batch.
func latestBatch(t *testing.T, p *Prober) *Batch {
	t.Helper()
	select {
	case b := <-p.Batches():
		return b
	case <-time.After(time.Minute):
		t.Fatal("no batch within a minute")
		return nil
	}
}

func TestBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const capacity = 8
		rec := newRecorder()
		p, _ := newTestProber(t, Config{Capacity: capacity, BatchInterval: time.Second, Observer: "node-b"}, rec.check)
		ts := tcpTargets(3, time.Second)
		if err := p.SetTargets(ts); err != nil {
			t.Fatal(err)
		}
		start(t, p)

		var prev uint64
		for i := range 10 {
			b := latestBatch(t, p)
			if len(b.Results) != capacity {
				t.Fatalf("batch %d has %d results; want Capacity %d", b.Seq, len(b.Results), capacity)
			}
			if b.Seq != prev+1 || b.Observer != "node-b" || !b.At.Equal(time.Now()) {
				t.Fatalf("batch %d: Seq %d, Observer %q, At %v; want Seq %d, node-b, now", i, b.Seq, b.Observer, b.At, prev+1)
			}
			prev = b.Seq
			if i == 0 {
				continue // the first probes may not all have happened
			}
			got := map[string]Result{}
			for _, r := range b.Results {
				if r.TargetID == "" {
					if r != (Result{}) {
						t.Fatalf("unused slot holds %+v", r)
					}
					continue
				}
				if _, dup := got[r.TargetID]; dup {
					t.Fatalf("batch %d holds %s twice", b.Seq, r.TargetID)
				}
				got[r.TargetID] = r
			}
			if len(got) != len(ts) {
				t.Fatalf("batch %d holds %d targets; want %d", b.Seq, len(got), len(ts))
			}
			for _, tg := range ts {
				r := got[tg.ID]
				times := rec.get(tg.ID)
				// The recorder's Code counts the target's probes: the
				// batch must hold the latest.
				if r.Code != len(times) || !r.At.Equal(times[len(times)-1]) || r.Observer != "node-b" || !r.OK {
					t.Errorf("batch %d: %s result %+v; want the latest of %d probes, at %v", b.Seq, tg.ID, r, len(times), times[len(times)-1])
				}
			}
		}
	})
}

func TestSlowConsumerDoesNotBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		p, _ := newTestProber(t, Config{Capacity: 4, BatchInterval: time.Second}, rec.check)
		ts := tcpTargets(2, time.Second)
		if err := p.SetTargets(ts); err != nil {
			t.Fatal(err)
		}
		start(t, p)
		time.Sleep(10*time.Second + time.Second/2) // 10 batches, none read
		synctest.Wait()
		if n := counter(t, p.metrics.dropped); n != 9 {
			t.Errorf("batches dropped = %v; want 9", n)
		}
		for _, tg := range ts {
			if n := len(rec.get(tg.ID)); n < 9 {
				t.Errorf("%s probed %d times in 10.5 s; want about 10", tg.ID, n)
			}
		}
		b := <-p.Batches()
		if b.Seq != 10 {
			t.Errorf("buffered batch Seq %d; want the latest, 10", b.Seq)
		}
	})
}

func TestSetTargetsRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		p, _ := newTestProber(t, Config{Capacity: 3, BatchInterval: time.Second}, rec.check)
		good := tcpTargets(2, time.Second)
		if err := p.SetTargets(good); err != nil {
			t.Fatal(err)
		}
		over := tcpTargets(4, time.Second)
		if err := p.SetTargets(over); !errors.Is(err, ErrCapacity) || !strings.Contains(err.Error(), "4 targets") {
			t.Errorf("4 targets on Capacity 3: %v; want ErrCapacity naming the count", err)
		}
		dup := tcpTargets(2, time.Second)
		dup[1].ID = dup[0].ID
		var te *TargetError
		if err := p.SetTargets(dup); !errors.As(err, &te) || te.Field != "ID" {
			t.Errorf("duplicate IDs: %v; want a TargetError on ID", err)
		}
		bad := tcpTargets(1, time.Second)
		bad[0].Timeout = 0
		if err := p.SetTargets(bad); !errors.Is(err, ErrInvalidTarget) || !errors.As(err, &te) || te.Field != "Timeout" {
			t.Errorf("zero timeout: %v; want a TargetError on Timeout", err)
		}

		start(t, p)
		time.Sleep(1500 * time.Millisecond)
		b := latestBatch(t, p)
		n := 0
		for _, r := range b.Results {
			if r.TargetID != "" {
				n++
			}
		}
		if n != 2 {
			t.Errorf("batch holds %d targets; want the 2 of the last accepted set", n)
		}
	})
}

func TestNew(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "Observer") {
		t.Errorf("New without Observer: %v; want an error naming Observer", err)
	}
	if _, err := New(Config{Observer: "a", Workers: -1}); err == nil || !strings.Contains(err.Error(), "Workers") {
		t.Errorf("New with Workers -1: %v; want an error naming Workers", err)
	}
	p, err := New(Config{Observer: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if p.cfg.Workers != DefaultWorkers || p.cfg.Capacity != DefaultCapacity ||
		p.cfg.BatchInterval != DefaultBatchInterval || p.cfg.ConnCache != DefaultConnCache {
		t.Errorf("defaults not applied: %+v", p.cfg)
	}
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Observer: "a", Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Observer: "a", Registerer: reg}); err == nil {
		t.Error("a second Prober on the same registry registered its metrics")
	}
}

func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, _ := newTestProber(t, Config{BatchInterval: time.Second}, newRecorder().check)
		stop := start(t, p)
		synctest.Wait()
		if err := p.Run(t.Context()); err == nil {
			t.Error("a second Run returned nil")
		}
		if err := stop(); err != nil {
			t.Errorf("Run returned %v after cancel; want nil", err)
		}
		for range p.Batches() { // closed once Run has returned
		}
	})
}

func TestSetTargetsChangedTarget(t *testing.T) {
	t.Run("shorter interval moves a far-off probe", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			rec := newRecorder()
			p, _ := newTestProber(t, Config{Capacity: 1}, rec.check)
			tg := tcpTargets(1, 1000*time.Second)[0]
			if err := p.SetTargets([]Target{tg}); err != nil {
				t.Fatal(err)
			}
			start(t, p)
			time.Sleep(1000 * time.Second) // probed once, next due ≥ 900 s on
			first := rec.get(tg.ID)
			tg.Interval, tg.Timeout = 10*time.Second, time.Second
			if err := p.SetTargets([]Target{tg}); err != nil {
				t.Fatal(err)
			}
			changed := time.Now()
			time.Sleep(10 * time.Second)
			got := rec.get(tg.ID)
			if len(got) <= len(first) {
				t.Fatalf("not probed within the new interval of SetTargets (%v)", changed)
			}
		})
	})

	t.Run("new address discards the probe in flight", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			release := make(chan struct{})
			var calls atomic.Int64
			check := func(ctx context.Context, tg Target) Outcome {
				if calls.Add(1) == 1 {
					<-release // the first probe, of the old address, hangs
					return Outcome{OK: true, Code: 1}
				}
				return Outcome{Code: int(tg.Addr.Port())}
			}
			p, _ := newTestProber(t, Config{Capacity: 2, BatchInterval: time.Second}, check)
			tg := tcpTargets(1, 10*time.Second)[0]
			tg.Timeout = 10 * time.Second
			if err := p.SetTargets([]Target{tg}); err != nil {
				t.Fatal(err)
			}
			start(t, p)
			time.Sleep(10 * time.Second)
			synctest.Wait()
			if calls.Load() != 1 {
				t.Fatalf("%d probes started; want 1", calls.Load())
			}
			tg.Addr = netip.MustParseAddrPort("127.0.0.2:4242")
			if err := p.SetTargets([]Target{tg}); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			close(release)
			synctest.Wait()
			b := latestBatch(t, p)
			for _, r := range b.Results {
				if r.TargetID != "" && r.Code != 4242 {
					t.Errorf("batch %d holds %+v, a result about the old address", b.Seq, r)
				}
			}
		})
	})
}

// TestRecycle: a batch handed back is written over by a later one, which
// then holds that batch's results and nothing of the older one's; one of
// another length is not taken; a batch replaced before the consumer took
// it is reused too.
func TestRecycle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		rec := newRecorder()
		p, _ := newTestProber(t, Config{Capacity: 4, BatchInterval: time.Second}, rec.check)
		ts := tcpTargets(2, time.Second)
		if err := p.SetTargets(ts); err != nil {
			t.Fatal(err)
		}
		start(t, p)
		time.Sleep(time.Second + time.Second/2)
		synctest.Wait()
		first := <-p.Batches()
		if len(first.Results) != 4 {
			t.Fatalf("batch of %d results; want Capacity, 4", len(first.Results))
		}
		firstSeq := first.Seq
		for i := range first.Results {
			first.Results[i] = Result{TargetID: "scribbled"} // the consumer's, until recycled
		}
		p.Recycle(first)
		p.Recycle(&Batch{Results: make([]Result, 3)}) // not Capacity long: dropped
		p.Recycle(nil)
		time.Sleep(time.Second)
		synctest.Wait()
		next := <-p.Batches()
		if next != first {
			t.Fatalf("the batch after a Recycle is a new one; want the recycled batch written over")
		}
		if next.Seq <= firstSeq {
			t.Fatalf("recycled batch Seq %d; want after %d", next.Seq, firstSeq)
		}
		ids := map[string]bool{}
		for _, r := range next.Results {
			if r.TargetID == "scribbled" {
				t.Fatalf("recycled batch still holds what the consumer wrote: %+v", next.Results)
			}
			ids[r.TargetID] = true
		}
		for _, tg := range ts {
			if !ids[tg.ID] {
				t.Errorf("recycled batch lacks %s: %+v", tg.ID, next.Results)
			}
		}
		// Replaced before anyone took it: the newer batch reuses it.
		time.Sleep(2 * time.Second)
		synctest.Wait()
		last := <-p.Batches()
		if n := counter(t, p.metrics.dropped); n != 1 {
			t.Errorf("batches dropped = %v; want 1", n)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if b := <-p.Batches(); b == last {
			t.Errorf("a batch the consumer still holds was reused")
		}
	})
}

// TestCoverTimeoutsKeepsProbingTheRest: when some targets never answer
// (a zone cut off: each probe holds its worker for its whole timeout),
// a pool sized for answers is taken whole by them and the probes of the
// others are skipped (without CoverTimeouts); with CoverTimeouts the
// probes in flight grow to what the timeouts need, and every probe of
// the answering targets runs (field-notes H6).
func TestCoverTimeoutsKeepsProbingTheRest(t *testing.T) {
	for _, cover := range []bool{false, true} {
		t.Run(fmt.Sprintf("CoverTimeouts=%v", cover), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				var answered atomic.Int64
				check := func(ctx context.Context, tg Target) Outcome {
					if strings.HasPrefix(tg.ID, "cut") {
						<-ctx.Done() // no answer: the probe's timeout ends it
						return Outcome{Unreachable: true, Err: "timeout"}
					}
					answered.Add(1)
					return Outcome{OK: true}
				}
				p, _ := newTestProber(t, Config{Workers: 2, Capacity: 20, CoverTimeouts: cover}, check)
				var ts []Target
				for i, tg := range tcpTargets(16, time.Second) {
					tg.Timeout = 500 * time.Millisecond
					if i < 8 {
						tg.ID = fmt.Sprintf("cut%d", i)
					}
					ts = append(ts, tg)
				}
				if err := p.SetTargets(ts); err != nil {
					t.Fatal(err)
				}
				stop := start(t, p)
				time.Sleep(10 * time.Second)
				synctest.Wait()
				// 8 answering targets, one probe a second each, for 10 s.
				got, busy := answered.Load(), counter(t, p.metrics.skipped[skipBusy])
				if cover {
					if got < 78 || busy != 0 {
						t.Errorf("%d probes of the answering targets ran, %v skipped as busy; want every one (about 80), none skipped", got, busy)
					}
				} else if got > 60 {
					// The control: 2 workers, held 500 ms by each of 8
					// silent targets a second, leave the rest few slots.
					t.Errorf("%d probes of the answering targets ran with a pool of 2 taken by the silent ones; want far fewer than 80", got)
				}
				if err := stop(); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
