package scenarios

import (
	"testing"
	"time"
)

// TestHistBins: every latency falls in a bin whose upper bound is at or
// above it and within its bin's width.
func TestHistBins(t *testing.T) {
	for _, d := range []time.Duration{0, time.Millisecond, 999 * time.Millisecond, time.Second, 1234 * time.Millisecond,
		9999 * time.Millisecond, 10 * time.Second, 59 * time.Second, 61 * time.Second} {
		b := histBin(d)
		up := binUpper(b)
		if up <= d && b != histBins-1 {
			t.Errorf("histBin(%s) = %d, its upper bound %s is not above it", d, b, up)
		}
		if b > 0 && binUpper(b-1) > d {
			t.Errorf("histBin(%s) = %d, but bin %d's upper bound %s is above it", d, b, b-1, binUpper(b-1))
		}
	}
	var h latHist
	for i := range 100 {
		h.add(time.Duration(i+1) * time.Millisecond)
	}
	var s latSum
	s.merge(&h)
	if got := s.pct(99); got != 100*time.Millisecond {
		t.Errorf("p99 of 1..100 ms = %s, want 100ms", got)
	}
	if got := s.pct(50); got != 51*time.Millisecond {
		t.Errorf("p50 of 1..100 ms = %s, want 51ms (bins' upper bounds)", got)
	}
	var empty latSum
	if empty.pct(99) != -1 {
		t.Error("an empty sum's percentile should be -1")
	}
}

// TestRampCap: a tenth at once, a tenth more every tenth of the window,
// whole at 0.9 of it (wire.Evacuation.Share).
func TestRampCap(t *testing.T) {
	w := 20 * time.Second
	for _, c := range []struct {
		t    time.Duration
		want float64
	}{{0, 0.1}, {1999 * time.Millisecond, 0.1}, {2 * time.Second, 0.2}, {17 * time.Second, 0.9}, {18 * time.Second, 1}, {time.Hour, 1}} {
		if got := rampCap(c.t, w); got < c.want-1e-9 || got > c.want+1e-9 {
			t.Errorf("rampCap(%s, %s) = %v, want %v", c.t, w, got, c.want)
		}
	}
	if rampCap(0, 0) != 1 {
		t.Error("a window of 0 returns at once")
	}
}

// TestEBMatch: a view without the instance is its next withdrawal; one
// at an admission's weight is that admission, those before it shed or
// overtaken; an older admission's weight is a view gone back; a weight
// no admission was given is left unmatched.
func TestEBMatch(t *testing.T) {
	in := Instance{Name: "svc-01"}
	in.ID, in.Addr = "svc-01-a-0", "127.11.0.1"
	other := Instance{Name: "svc-01"}
	other.ID, other.Addr = "svc-01-b-1", "127.12.0.1"
	c, err := NewChurn(time.Now(), ChurnConfig{Phases: []ChurnPhase{{"usual", 60, time.Second}}, Workers: 1, Out: 1,
		Instances: []Instance{in, other}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int32
	for i, ch := range []struct {
		kind ChangeKind
		gen  int
	}{{Withdrawal, 0}, {Admission, 1}, {Withdrawal, 1}, {Admission, 2}} {
		id, ok := c.add(0, ch.kind, ch.gen, 0)
		if !ok {
			t.Fatal("log full")
		}
		c.Change(id).start.Store(int64(time.Duration(i) * time.Second))
		c.Change(id).commit.Store(int64(time.Duration(i)*time.Second + 10*time.Millisecond))
		ids = append(ids, id)
	}
	tr := newEBTracker(c, time.Minute, 1, 10)
	s := &Subscriber{ID: 0, Zone: "a", Services: []ServiceSpec{{Name: "svc-01"}}}
	tr.subscriber(s)
	p := tr.subs[0].pairs[0]
	view := func(weight uint32) ebView {
		v := ebView{byEP: map[int32]ebObs{1: {weight: 100}}}
		if weight > 0 {
			v.byEP[0] = ebObs{weight: weight}
		}
		return v
	}
	tr.match(0, p, view(100), time.Second) // as registered: nothing
	tr.match(0, p, view(0), 2*time.Second)
	if got := tr.stats[ids[0]].delivered.Load(); got != 1 {
		t.Fatalf("the withdrawal delivered %d times, want 1", got)
	}
	tr.match(0, p, view(1), 3*time.Second) // not its own weight yet
	tr.match(0, p, view(102), 4*time.Second)
	if tr.stats[ids[1]].shed.Load() != 1 || tr.stats[ids[2]].overtaken.Load() != 1 || tr.stats[ids[3]].delivered.Load() != 1 {
		t.Fatalf("admission 1 shed %d, withdrawal 1 overtaken %d, admission 2 delivered %d; want 1 each",
			tr.stats[ids[1]].shed.Load(), tr.stats[ids[2]].overtaken.Load(), tr.stats[ids[3]].delivered.Load())
	}
	tr.match(0, p, view(101), 5*time.Second)
	if tr.wentBack.Load() != 1 || tr.notOwn.Load() != 1 || tr.unexplained.Load() != 0 {
		t.Fatalf("went back %d, not its own %d, unexplained %d; want 1, 1, 0", tr.wentBack.Load(), tr.notOwn.Load(), tr.unexplained.Load())
	}
	var w latSum
	w.merge(&tr.hist[Withdrawal][0][0])
	if w.total != 1 || w.pct(100) > 2*time.Second {
		t.Fatalf("withdrawal latency: %d samples, max %s; want 1 under 2 s", w.total, w.pct(100))
	}
}

// TestHistQuantiles: quantiles of what a histogram observed between two
// snapshots, by the bucket that holds them.
func TestHistQuantiles(t *testing.T) {
	b := func(le string, n float64) (string, float64) { return `x_bucket{le="` + le + `"}`, n }
	snap := func(ns ...float64) map[string]float64 {
		m := map[string]float64{}
		for i, le := range []string{"0.001", "0.01", "0.1", "+Inf"} {
			k, v := b(le, ns[i])
			m[k] = v
		}
		return m
	}
	// Between the two: 90 waits ≤ 1 ms, 9 more ≤ 10 ms, 1 more ≤ 100 ms.
	before, after := snap(100, 100, 100, 100), snap(190, 199, 200, 200)
	q, n := histQuantiles(before, after, 0.5, 0.99, 1)
	if n != 100 || q[0] != 0.001 || q[1] != 0.01 || q[2] != 0.1 {
		t.Errorf("histQuantiles = %v over %v; want [0.001 0.01 0.1] over 100", q, n)
	}
	if _, n := histQuantiles(after, after, 0.99); n != 0 {
		t.Errorf("nothing observed between the snapshots: count %v; want 0", n)
	}
}
