package pace

import (
	"testing"
	"time"
)

// fakeClock advances only when the test says so.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestDueAfterTheSlice(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	p := New(time.Millisecond, 0, c.now)
	for i := range 10 * checkEvery {
		if p.Due() || p.dueSoon() {
			t.Fatalf("due after %d calls with no time spent", i+1)
		}
	}
	c.t = c.t.Add(time.Millisecond)
	if !p.Due() {
		t.Fatal("Due is false once the slice is spent: it must read the clock at every call")
	}
	due := 0
	for range checkEvery {
		if p.dueSoon() {
			due++
		}
	}
	if due != 1 {
		t.Fatalf("Step's check was due %d times in one check period once the slice was spent, want 1", due)
	}
	p.Pause()
	if p.Pauses() != 1 {
		t.Fatalf("Pauses() = %d, want 1", p.Pauses())
	}
	for range 2 * checkEvery {
		if p.Due() || p.dueSoon() {
			t.Fatal("due right after a pause: the pause must start a new slice")
		}
	}
}

func TestBeginForgetsIdleTime(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	p := New(time.Millisecond, 0, c.now)
	c.t = c.t.Add(time.Hour) // idle, between two rounds
	p.Begin()
	for range 4 * checkEvery {
		if p.Due() {
			t.Fatal("the idle hour before Begin was counted as work")
		}
	}
}

func TestOff(t *testing.T) {
	c := &fakeClock{t: time.Unix(0, 0)}
	for _, p := range []*Pacer{nil, New(0, 0, c.now), New(-1, 0, c.now)} {
		c.t = c.t.Add(time.Hour)
		for range 4 * checkEvery {
			if p.Due() {
				t.Fatalf("%+v: due with pacing off", p)
			}
		}
		p.Step()
		p.Pause() // a nil Pacer's Pause does nothing
		p.Begin()
	}
}

// TestPauseBlocks: the pause really blocks (on the wall clock), which is
// what lets the scheduler poll the network.
func TestPauseBlocks(t *testing.T) {
	p := New(time.Millisecond, 200*time.Microsecond, nil)
	start := time.Now()
	p.Pause()
	if d := time.Since(start); d < 200*time.Microsecond {
		t.Fatalf("Pause returned after %v, want at least the 200µs pause", d)
	}
}

// The rule of the package comment: a pause outlasts the slices of the
// other two paced goroutines of a server, so that the processor idles
// (and the network is polled) between rounds of slices.
func TestPauseOutlastsTheOtherSlices(t *testing.T) {
	const others = 2 // of the three: store housekeeping, health loop, table file
	if DefaultPause <= others*DefaultSlice {
		t.Fatalf("DefaultPause %v ≤ %d × DefaultSlice %v: paced goroutines can keep the processor busy between them",
			DefaultPause, others, DefaultSlice)
	}
}
