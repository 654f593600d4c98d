// Package gcpace sets the Go collector's GOGC from the garbage the
// process makes (cairn server --gc-percent-burst): Low while it makes little, so that what stays resident
// is close to what the heap holds, and higher, up to High, while it makes
// a lot, so that a burst of writes is not collected every few
// milliseconds.
//
// The resident set of a Go process is about (1 + GOGC/100) × 1.1 × its
// live heap, and a collection comes every GOGC/100 × live heap bytes
// allocated. So the GOGC that spaces collections Spacing apart is
// 100 × rate × Spacing / live; Run keeps GOGC there, within [Low, High].
// A quiet server gets Low and the small resident set; a busy one spends
// no more collecting than at High would, at most one collection every
// Spacing, and gives the memory back once it is quiet again.
package gcpace

import (
	"context"
	"errors"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Config configures Run. A zero field means "use the default".
type Config struct {
	// Low is GOGC while the process makes little garbage. Defaults to 25.
	Low int
	// High is the most GOGC is raised to. Defaults to 100, Go's own.
	High int
	// Spacing is the least time between two collections Run aims for
	// before it raises GOGC above Low. Defaults to 2s.
	Spacing time.Duration
	// Tick is how often the allocation rate is read. Defaults to 1s.
	Tick time.Duration

	// Read returns the bytes allocated so far and the live heap at the
	// last collection. Defaults to runtime/metrics. Tests replace it.
	Read func() (allocs, live uint64)
	// Set sets GOGC. Defaults to debug.SetGCPercent. Tests replace it.
	Set func(percent int)
	// Ticks, when set, replaces the Tick ticker (tests).
	Ticks <-chan time.Time
}

// Defaults for Config.
const (
	DefaultLow     = 25
	DefaultHigh    = 100
	DefaultSpacing = 2 * time.Second
	DefaultTick    = time.Second
)

func (c *Config) setDefaults() {
	if c.Low == 0 {
		c.Low = DefaultLow
	}
	if c.High == 0 {
		c.High = DefaultHigh
	}
	if c.Spacing == 0 {
		c.Spacing = DefaultSpacing
	}
	if c.Tick == 0 {
		c.Tick = DefaultTick
	}
	if c.Read == nil {
		c.Read = readRuntime
	}
	if c.Set == nil {
		c.Set = func(p int) { debug.SetGCPercent(p) }
	}
}

// Validate reports the first inconsistent field.
func (c *Config) Validate() error {
	switch {
	case c.Low < 0 || c.High < 0 || c.Spacing < 0 || c.Tick < 0:
		return errors.New("gcpace: Low, High, Spacing and Tick must not be negative")
	case c.Low != 0 && c.High != 0 && c.Low > c.High:
		return errors.New("gcpace: Low must not be above High")
	}
	return nil
}

// Run sets GOGC to Low, then every Tick to what the allocation rate
// calls for (see the package doc), until ctx is done. It returns nil.
func Run(ctx context.Context, cfg Config) error {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	ticks := cfg.Ticks
	if ticks == nil {
		t := time.NewTicker(cfg.Tick)
		defer t.Stop()
		ticks = t.C
	}
	cur := cfg.Low
	cfg.Set(cur)
	prevAllocs, _ := cfg.Read()
	var prevAt time.Time
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			return nil
		case now = <-ticks:
		}
		allocs, live := cfg.Read()
		if !prevAt.IsZero() && now.After(prevAt) {
			want := Want(allocs-prevAllocs, now.Sub(prevAt), live, cfg)
			if want < cur {
				// Down by half the way at a time: one quiet second in a
				// burst does not bring collections back every few
				// milliseconds.
				want = max(want, cur-(cur-want+1)/2)
			}
			if want != cur {
				cur = want
				cfg.Set(cur)
			}
		}
		prevAllocs, prevAt = allocs, now
	}
}

// Want is the GOGC, within [cfg.Low, cfg.High], that spaces collections
// cfg.Spacing apart when the process allocated allocated bytes in d with
// live bytes of live heap.
func Want(allocated uint64, d time.Duration, live uint64, cfg Config) int {
	if live == 0 || d <= 0 {
		return cfg.Low
	}
	// 100 × (bytes allocated in Spacing) / live, in float64: no overflow
	// for any rate.
	p := 100 * float64(allocated) * cfg.Spacing.Seconds() / d.Seconds() / float64(live)
	switch {
	case p <= float64(cfg.Low):
		return cfg.Low
	case p >= float64(cfg.High):
		return cfg.High
	}
	return int(p + 0.5)
}

// readRuntime reads the bytes allocated so far and the live heap from
// runtime/metrics.
func readRuntime() (allocs, live uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() == metrics.KindUint64 {
		allocs = s[0].Value.Uint64()
	}
	if s[1].Value.Kind() == metrics.KindUint64 {
		live = s[1].Value.Uint64()
	}
	return allocs, live
}
