package gcpace

import (
	"context"
	"runtime"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestWant(t *testing.T) {
	cfg := Config{}
	cfg.setDefaults()
	const mib = 1 << 20
	for _, c := range []struct {
		name      string
		allocated uint64
		d         time.Duration
		live      uint64
		want      int
	}{
		{"quiet", mib / 2, time.Second, 50 * mib, 25},
		{"nothing", 0, time.Second, 50 * mib, 25},
		{"no live heap yet", 100 * mib, time.Second, 0, 25},
		{"no time", 100 * mib, 0, 50 * mib, 25},
		{"10 MiB/s over 50: a collection every 2 s at 40", 10 * mib, time.Second, 50 * mib, 40},
		{"the same over 2 s", 20 * mib, 2 * time.Second, 50 * mib, 40},
		{"a burst: High", 200 * mib, time.Second, 50 * mib, 100},
		{"exactly High", 25 * mib, time.Second, 50 * mib, 100},
		{"huge", 1 << 62, time.Millisecond, 1, 100},
	} {
		if got := Want(c.allocated, c.d, c.live, cfg); got != c.want {
			t.Errorf("%s: Want = %d, want %d", c.name, got, c.want)
		}
	}
}

func TestValidate(t *testing.T) {
	for _, c := range []Config{{Low: -1}, {High: -1}, {Spacing: -1}, {Tick: -1}, {Low: 150}, {Low: 80, High: 50}} {
		if err := Run(t.Context(), c); err == nil {
			t.Errorf("Run(%+v) = nil, want an error", c)
		}
	}
}

// TestRun: a quiet process is held at Low; a burst raises GOGC to High at
// once; a steady rate settles where a collection comes every Spacing;
// quiet again, it comes down by halves to Low, never below; it stops
// with its context.
func TestRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const mib = 1 << 20
		var (
			mu     sync.Mutex
			allocs uint64
			set    []int
		)
		cfg := Config{
			Read: func() (uint64, uint64) { mu.Lock(); defer mu.Unlock(); return allocs, 50 * mib },
			Set:  func(p int) { mu.Lock(); set = append(set, p); mu.Unlock() },
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- Run(ctx, cfg) }()
		time.Sleep(time.Second / 2) // between ticks from here on
		// run allocates rate bytes a second for n seconds and returns
		// the GOGC values set meanwhile.
		run := func(rate uint64, n int) []int {
			mu.Lock()
			from := len(set)
			mu.Unlock()
			for range n {
				mu.Lock()
				allocs += rate
				mu.Unlock()
				time.Sleep(time.Second)
				synctest.Wait()
			}
			mu.Lock()
			defer mu.Unlock()
			return append([]int(nil), set[from:]...)
		}
		if got := run(mib/2, 5); len(got) != 0 {
			t.Errorf("quiet: GOGC set to %v; want it left at Low", got)
		}
		mu.Lock()
		if len(set) != 1 || set[0] != DefaultLow {
			t.Errorf("at start: GOGC set to %v; want [%d]", set, DefaultLow)
		}
		mu.Unlock()
		if got := run(200*mib, 3); len(got) != 1 || got[0] != DefaultHigh {
			t.Errorf("a burst: GOGC set to %v; want [%d] at once", got, DefaultHigh)
		}
		got := run(10*mib, 12)
		if len(got) == 0 || got[len(got)-1] != 40 {
			t.Errorf("10 MiB/s over 50 MiB: GOGC set to %v; want it to settle at 40", got)
		}
		for i := 1; i < len(got); i++ {
			if got[i] >= got[i-1] {
				t.Errorf("coming down: %v is not decreasing", got)
				break
			}
		}
		got = run(0, 12)
		if len(got) == 0 || got[len(got)-1] != DefaultLow || got[0] < 25 || got[0] > 40 {
			t.Errorf("quiet again: GOGC set to %v; want it down to %d", got, DefaultLow)
		}
		for _, p := range got {
			if p < DefaultLow {
				t.Errorf("quiet again: GOGC set to %d, below Low", p)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run after cancel: %v", err)
		}
	})
}

// TestReadRuntime: the runtime's figures are there (names change across Go
// releases; a missing one would read as 0 and leave GOGC at Low).
func TestReadRuntime(t *testing.T) {
	sink := make([][]byte, 0, 64)
	for range 64 {
		sink = append(sink, make([]byte, 4096))
	}
	runtime.GC() // live is the heap marked by the last collection
	allocs, live := readRuntime()
	runtime.KeepAlive(sink)
	if allocs < uint64(len(sink))*4096 || live == 0 {
		t.Errorf("readRuntime = %d allocated, %d live; want both from runtime/metrics", allocs, live)
	}
}
