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
