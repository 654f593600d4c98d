// Package pace spaces a load generator's operations at a fixed rate
// without losing the ones it falls behind on.
//
// A time.Ticker drops the ticks its reader misses: a generator that is
// descheduled for 20 ms on a busy host, at one operation every 1.5 ms,
// silently makes a dozen fewer, and its achieved rate says more about
// the generator's scheduling than about the target. A Schedule fixes
// when each operation is due from the start (the i-th at start + i ×
// interval) and lets a late generator catch up, so that the rate asked
// is the rate made unless the target itself holds the generator back.
package pace

import (
	"context"
	"time"
)

// Schedule is the due times of a run of operations at one rate.
type Schedule struct {
	start    time.Time
	interval time.Duration
	end      time.Time // zero: none
	n        int64     // operations handed out
	now      func() time.Time
}

// New is a schedule of rate operations a minute from start, for as long
// as d (0: no end). now is the clock (time.Now when nil).
func New(start time.Time, rate float64, d time.Duration, now func() time.Time) *Schedule {
	if now == nil {
		now = time.Now
	}
	s := &Schedule{start: start, interval: time.Duration(float64(time.Minute) / rate), now: now}
	if d > 0 {
		s.end = start.Add(d)
	}
	return s
}

// Over reports whether the run has ended: the next operation is due at
// or after its end, or its end has passed (what a late generator did not
// hand out by then is not made).
func (s *Schedule) Over() bool {
	return !s.end.IsZero() && (!s.Due().Before(s.end) || !s.now().Before(s.end))
}

// Due is when the next operation is due.
func (s *Schedule) Due() time.Time {
	return s.start.Add(time.Duration(s.n) * s.interval)
}

// Next waits until the next operation is due (not at all when it is
// overdue) and counts it handed out. It returns how late it is, or
// ctx's error.
func (s *Schedule) Next(ctx context.Context) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	due := s.Due()
	if wait := due.Sub(s.now()); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return 0, ctx.Err()
		case <-t.C:
		}
	}
	s.n++
	return max(s.now().Sub(due), 0), nil
}

// Handed is how many operations Next has handed out.
func (s *Schedule) Handed() int64 { return s.n }
