// Package backoff times the waits between retries: a ceiling that
// doubles from a minimum up to a maximum, each wait drawn uniformly
// below it ("full jitter"), and back to the minimum after a success.
//
// Full jitter spreads clients that failed together (every caller of a
// server that lost its leader) over the whole interval, so that they do
// not come back in step; the doubling keeps a long outage from being
// asked about ever more often.
//
// It knows nothing of what is retried, of clocks or of timers: the
// caller waits for the durations it hands out, and decides when to stop.
//
// A leaf. A Backoff is one caller's state, not safe for concurrent use.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Defaults of Config.
const (
	// DefaultMin is a tenth of a second: long enough that a retry sent
	// at once into a failure that lasts (an election, a restart) is not
	// wasted, short enough that a blip costs little.
	DefaultMin = 100 * time.Millisecond
	// DefaultMax is ten seconds: a caller that keeps failing still asks
	// again within seconds of the failure's end.
	DefaultMax = 10 * time.Second
)

// Config configures a Backoff. The zero value of each field means "use
// the default".
type Config struct {
	// Min is the first ceiling. Defaults to DefaultMin.
	Min time.Duration
	// Max caps the ceiling. Defaults to DefaultMax; a Max below Min is
	// taken as Min (every wait is then drawn below Min).
	Max time.Duration
	// Rand returns a uniform random number in [0, n), n > 0, as
	// math/rand/v2's Int64N does. Defaults to that function, which is
	// safe for concurrent use; tests pass a seeded source's Int64N.
	Rand func(n int64) int64
}

// Backoff hands out the waits of one retry loop. It is not safe for
// concurrent use: each loop owns its own.
type Backoff struct {
	min, max time.Duration
	rand     func(n int64) int64
	ceiling  time.Duration
}

// New returns a Backoff whose first wait is drawn below cfg.Min.
func New(cfg Config) *Backoff {
	if cfg.Min <= 0 {
		cfg.Min = DefaultMin
	}
	if cfg.Max <= 0 {
		cfg.Max = DefaultMax
	}
	cfg.Max = max(cfg.Max, cfg.Min)
	if cfg.Rand == nil {
		cfg.Rand = rand.Int64N
	}
	return &Backoff{min: cfg.Min, max: cfg.Max, rand: cfg.Rand, ceiling: cfg.Min}
}

// Next returns the next wait, uniform in [0, ceiling), and doubles the
// ceiling for the wait after it, up to Max.
func (b *Backoff) Next() time.Duration {
	d := time.Duration(b.rand(int64(b.ceiling)))
	if b.ceiling > b.max/2 { // doubling would pass Max, or overflow
		b.ceiling = b.max
	} else {
		b.ceiling *= 2
	}
	return d
}

// Reset brings the ceiling back to Min: call it after a success, so that
// the next failure is retried soon again.
func (b *Backoff) Reset() { b.ceiling = b.min }
