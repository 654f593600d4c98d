package backoff_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/backoff"
)

// top draws the largest wait below the ceiling, so that each wait shows
// the ceiling it was drawn under (ceiling - 1ns).
func top(n int64) int64 { return n - 1 }

func waits(b *backoff.Backoff, n int) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = b.Next()
	}
	return out
}

func TestCeilingDoublesAndCaps(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  backoff.Config
		want []time.Duration // ceilings
	}{
		{"doubles to the cap", backoff.Config{Min: 100 * time.Millisecond, Max: time.Second},
			[]time.Duration{100, 200, 400, 800, 1000, 1000}},
		{"zero is the defaults", backoff.Config{},
			[]time.Duration{100, 200, 400, 800, 1600, 3200, 6400, 10000, 10000}},
		{"max below min is min", backoff.Config{Min: 300 * time.Millisecond, Max: time.Millisecond},
			[]time.Duration{300, 300}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Rand = top
			got := waits(backoff.New(tc.cfg), len(tc.want))
			want := make([]time.Duration, len(tc.want))
			for i, c := range tc.want {
				want[i] = c*time.Millisecond - 1
			}
			if !slices.Equal(got, want) {
				t.Errorf("waits %v, want %v", got, want)
			}
		})
	}
	t.Run("no overflow near the largest duration", func(t *testing.T) {
		b := backoff.New(backoff.Config{Min: time.Hour, Max: math.MaxInt64, Rand: top})
		prev := time.Duration(0)
		for i, w := range waits(b, 80) {
			if w < prev {
				t.Fatalf("wait %d is %v, below the one before (%v): the ceiling overflowed", i, w, prev)
			}
			prev = w
		}
		if want := time.Duration(math.MaxInt64 - 1); prev != want {
			t.Errorf("last wait %v, want %v", prev, want)
		}
	})
}

// TestWaitsBelowCeiling: with the default source every wait lies in
// [0, ceiling), the ceiling being min(Min·2^i, Max) for the i-th wait
// since New or Reset.
func TestWaitsBelowCeiling(t *testing.T) {
	const lo, hi = 10 * time.Millisecond, 80 * time.Millisecond
	b := backoff.New(backoff.Config{Min: lo, Max: hi})
	for range 50 {
		ceiling := lo
		for range 6 {
			if w := b.Next(); w < 0 || w >= ceiling {
				t.Fatalf("wait %v outside [0, %v)", w, ceiling)
			}
			ceiling = min(2*ceiling, hi)
		}
		b.Reset()
	}
}

func TestResetRestoresMin(t *testing.T) {
	b := backoff.New(backoff.Config{Min: 50 * time.Millisecond, Max: time.Second, Rand: top})
	waits(b, 5)
	b.Reset()
	if got, want := waits(b, 2), []time.Duration{50*time.Millisecond - 1, 100*time.Millisecond - 1}; !slices.Equal(got, want) {
		t.Errorf("waits after Reset %v, want %v", got, want)
	}
}

func TestDeterministicSource(t *testing.T) {
	run := func() []time.Duration {
		r := rand.New(rand.NewPCG(1, 2))
		b := backoff.New(backoff.Config{Min: 100 * time.Millisecond, Max: 2 * time.Second, Rand: r.Int64N})
		out := waits(b, 4)
		b.Reset()
		return append(out, waits(b, 4)...)
	}
	a, b := run(), run()
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different waits:\n%v\n%v", a, b)
	}
	if slices.Equal(a[:4], a[4:]) {
		t.Errorf("waits %v repeat after Reset: the source is not drawn from", a)
	}
}

// A retry loop: wait for Next after each failure, Reset after a success.
// Here the source always draws half the ceiling, to show the ceilings.
func Example() {
	b := backoff.New(backoff.Config{Min: 200 * time.Millisecond, Max: time.Second,
		Rand: func(n int64) int64 { return n / 2 }})
	for range 4 {
		fmt.Println(b.Next()) // a failure: wait this long, then try again
	}
	b.Reset() // a success
	fmt.Println(b.Next())
	// Output:
	// 100ms
	// 200ms
	// 400ms
	// 500ms
	// 100ms
}
