// Package pace spreads long background work over short slices, so that a
// server on one core keeps answering while the work runs.
//
// Go's scheduler does not look at the network while a goroutine keeps
// its processor busy: a DNS reader whose datagram has arrived waits for
// the busy goroutine to block, or for the runtime to preempt it (every
// 10 ms). runtime.Gosched does not help, because the yielding goroutine
// is runnable again before the network is polled. A Pacer makes the
// busy goroutine block, briefly, once its slice is spent; the scheduler
// then polls the network and runs whoever was waiting.
package pace

import "time"

// Defaults: a quarter of a millisecond of work, then a pause. On Linux a
// sleeping processor wakes on a millisecond timer, so the pause is in
// practice up to a millisecond; the work is spread accordingly (a 15 ms
// round becomes about 60 slices over 75 ms).
const (
	DefaultSlice = 250 * time.Microsecond
	DefaultPause = 50 * time.Microsecond
)

// checkEvery is how many Step calls share one clock read: a unit of
// work there is typically well under a microsecond.
const checkEvery = 32

// Pacer measures one goroutine's slices of work. It is not safe for
// concurrent use; each worker owns its own.
type Pacer struct {
	slice, pause time.Duration
	now          func() time.Time
	start        time.Time
	calls        int
	pauses       int
}

// New returns a Pacer whose slices last slice and whose pauses last
// pause; a slice ≤ 0 turns pacing off (Due is always false). now reads
// the clock that times the work: the wall clock (time.Now) in servers,
// whatever a test controls otherwise; nil means time.Now.
func New(slice, pause time.Duration, now func() time.Time) *Pacer {
	if now == nil {
		now = time.Now
	}
	p := &Pacer{slice: slice, pause: pause, now: now}
	p.start = now()
	return p
}

// Begin starts a slice: call it when a burst of work starts after the
// goroutine was idle, so that the idle time is not counted as work.
func (p *Pacer) Begin() {
	if p == nil || p.slice <= 0 {
		return
	}
	p.calls = 0
	p.start = p.now()
}

// Due reports, between two units of work, whether the slice is spent:
// the caller then releases whatever a reader may wait on and calls
// Pause. It reads the clock every time: for units of some microseconds
// (a service's evaluation). A nil Pacer is never due.
func (p *Pacer) Due() bool {
	if p == nil || p.slice <= 0 {
		return false
	}
	return p.now().Sub(p.start) >= p.slice
}

// dueSoon is Due for small units (a slot, an element): it reads the
// clock once every checkEvery calls.
func (p *Pacer) dueSoon() bool {
	if p == nil || p.slice <= 0 {
		return false
	}
	p.calls++
	if p.calls < checkEvery {
		return false
	}
	p.calls = 0
	return p.now().Sub(p.start) >= p.slice
}

// Pause blocks for the pause, then starts the next slice.
func (p *Pacer) Pause() {
	if p == nil {
		return
	}
	time.Sleep(p.pause)
	p.pauses++
	p.Begin()
}

// Step pauses if the slice is spent, for loops of small units (well
// under a microsecond each) that hold nothing a reader waits on: it
// reads the clock once every checkEvery calls.
func (p *Pacer) Step() {
	if p.dueSoon() {
		p.Pause()
	}
}

// Pauses reports how many pauses the Pacer has made, for metrics.
func (p *Pacer) Pauses() int {
	if p == nil {
		return 0
	}
	return p.pauses
}
