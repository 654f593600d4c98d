package xdsserver

import (
	"context"
	"sync"
	"time"
)

// Defaults of the admission lane (SPEC §4: an admission or weight change
// reaches 99% of subscribers within 30 s; a withdrawal within 5 s and
// never behind an admission).
const (
	// DefaultAdmissionInterval is how often one stream may be sent
	// admissions: changes that only add endpoints or change weights,
	// coalesced in between.
	DefaultAdmissionInterval = time.Second
	// DefaultAdmissionRate is how many admission responses a second the
	// server sends over all its streams; beyond it they wait, and
	// coalesce, while withdrawals go on.
	DefaultAdmissionRate = 10000
	// DefaultMaxAdmissionDelay is how long an admission may be held back
	// at most, whatever the load: within the 30 s budget with room for
	// the sending.
	DefaultMaxAdmissionDelay = 20 * time.Second
)

// gate is the token bucket every stream's admissions draw from. A
// stream that finds it empty joins a queue, and the gate hands tokens to
// the queue's streams, oldest first, as they accrue (run), waking each:
// waiting streams cost nothing until their turn, however many wait.
type gate struct {
	rate  float64 // tokens a second; 0 or less: no limit
	burst float64
	kick  chan struct{} // the queue has a stream again

	mu     sync.Mutex
	tokens float64
	last   time.Time
	queue  []*peer // waiting for a token, oldest first; each once (peer.queued)
}

func newGate(rate float64) *gate {
	return &gate{rate: rate, burst: max(1, rate), tokens: max(1, rate), kick: make(chan struct{}, 1)}
}

// refill adds the tokens accrued since the last refill. g.mu is held.
func (g *gate) refill(now time.Time) {
	if now.After(g.last) {
		if !g.last.IsZero() {
			g.tokens = min(g.burst, g.tokens+now.Sub(g.last).Seconds()*g.rate)
		}
		g.last = now
	}
}

// take takes a token for pe at now, unless others wait before it: then
// pe joins the queue (once), and run hands it a token in its turn.
func (g *gate) take(now time.Time, pe *peer) bool {
	if g.rate <= 0 {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.refill(now)
	if len(g.queue) == 0 && g.tokens >= 1 {
		g.tokens--
		return true
	}
	if !pe.queued {
		pe.queued = true
		g.queue = append(g.queue, pe)
		if len(g.queue) == 1 {
			select {
			case g.kick <- struct{}{}:
			default:
			}
		}
	}
	return false
}

// grantEvery is how often run hands out the tokens accrued.
const grantEvery = 10 * time.Millisecond

// run hands tokens to the queued streams as they accrue, until ctx is
// done; it sleeps while no stream waits.
func (g *gate) run(ctx context.Context, now func() time.Time) {
	if g.rate <= 0 {
		return
	}
	t := time.NewTicker(grantEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-g.kick:
		}
		for waiting := true; waiting; {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			g.mu.Lock()
			g.refill(now())
			for g.tokens >= 1 && len(g.queue) > 0 {
				pe := g.queue[0]
				g.queue[0] = nil
				g.queue = g.queue[1:]
				pe.queued = false
				pe.granted.Store(true)
				pe.sig.wake()
				g.tokens--
			}
			waiting = len(g.queue) > 0
			g.mu.Unlock()
		}
	}
}

// lane is one stream's admission lane: when it last sent admissions,
// since when it holds some back, and when to look at them again.
type lane struct {
	next  time.Time // admissions may go again from then (coalescing)
	since time.Time // the oldest admission held back; zero: none
	due   time.Time // when to send what is held back; zero: nothing
}

// admitNow says whether the stream may send its pending admissions at
// now. If not, it records when to look again (lane.due) and counts the
// hold-back once per episode, by reason: "coalesce" (this stream sent
// admissions less than the interval ago) or "shed" (the server's
// admission budget is spent).
func (pe *peer) admitNow(now time.Time) bool {
	s := pe.s
	l := &pe.lane
	first := l.since.IsZero()
	if first {
		l.since = now
	}
	if now.Sub(l.since) >= s.cfg.MaxAdmissionDelay {
		return true // held back long enough: goes now, whatever the load
	}
	latest := l.since.Add(s.cfg.MaxAdmissionDelay)
	if now.Before(l.next) {
		l.due = earliest(l.next, latest)
		if first {
			s.m.deferred.WithLabelValues("coalesce").Inc()
		}
		return false
	}
	if pe.granted.Swap(false) || s.gate.take(now, pe) {
		return true
	}
	// Its turn comes with a token (a wake-up), or at the latest.
	l.due = latest
	if first {
		s.m.deferred.WithLabelValues("shed").Inc()
	}
	return false
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// admitted records that the stream sent admissions at now, through the
// lane: the next may go an interval later.
func (pe *peer) admitted(now time.Time) {
	pe.lane = lane{next: now.Add(pe.s.cfg.AdmissionInterval)}
}

// caughtUp records that the stream holds nothing back (a response
// carried every change) without starting a new interval.
func (pe *peer) caughtUp() {
	pe.lane.since, pe.lane.due = time.Time{}, time.Time{}
}

// urgent reports whether replacing what a client holds (its endpoints in
// rotation, known or not) by r must go at once: it takes an endpoint out
// of rotation, or brings the first ones to a client that has none to
// route to. An unknown holding counts as urgent, so that it is never
// held back.
func urgent(held []string, known bool, r resource) bool {
	return !known || !subset(held, r.rotation) || len(held) == 0 && len(r.rotation) > 0
}

// withdraws reports whether replacing held by r takes an endpoint out of
// rotation (the delivery's lane).
func withdraws(held []string, known bool, r resource) bool {
	return !known || !subset(held, r.rotation)
}
