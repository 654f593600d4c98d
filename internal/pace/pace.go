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
//
// It polls the network only when it finds nothing else to run, though:
// the processor must go idle. Two paced goroutines whose pauses are
// shorter than each other's slices never let it (one works while the
// other sleeps, and each is runnable again when the other pauses), and
// the network then waits for the runtime's monitor, up to 10 ms. A trace
// of the server at 10,000 queries a second showed exactly that once a
// second: the store's lease housekeeping and the health loop alternating
// for 7.5 ms with no DNS reader run between them. So a pause is longer
// than the slices of the other paced goroutines of a server put
// together (there are three: the store's housekeeping, the health loop,
// the table file's keeper), and the processor idles after each round of
// slices, one slice of each at most.
package pace

import "time"

// Defaults: 150 µs of work, then a pause of 400 µs, more than the other
// two paced goroutines' slices (see the package comment): a query waits
// behind at most three slices, 0.45 ms. A processor with nothing to run
// sleeps on a millisecond timer, so an idle pause lasts up to a
// millisecond unless a datagram wakes it; the work is spread accordingly
// (a 15 ms round becomes 100 slices over 55 to 115 ms).
const (
	DefaultSlice = 150 * time.Microsecond
	DefaultPause = 400 * time.Microsecond
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
