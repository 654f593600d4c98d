package xdsserver

import (
	"math/rand/v2"
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
	DefaultAdmissionRate = 5000
	// DefaultMaxAdmissionDelay is how long an admission may be held back
	// at most, whatever the load: within the 30 s budget with room for
	// the sending.
	DefaultMaxAdmissionDelay = 20 * time.Second
)

// gate is the token bucket every stream's admissions draw from.
type gate struct {
	rate  float64 // tokens a second; 0 or less: no limit
	burst float64

	mu     sync.Mutex
	tokens float64
	last   time.Time
}

func newGate(rate float64) *gate {
	return &gate{rate: rate, burst: max(1, rate), tokens: max(1, rate)}
}

// take takes a token at now, or says how long until one is there.
func (g *gate) take(now time.Time) (bool, time.Duration) {
	if g.rate <= 0 {
		return true, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if now.After(g.last) {
		if !g.last.IsZero() {
			g.tokens = min(g.burst, g.tokens+now.Sub(g.last).Seconds()*g.rate)
		}
		g.last = now
	}
	if g.tokens >= 1 {
		g.tokens--
		return true, 0
	}
	return false, time.Duration((1 - g.tokens) / g.rate * float64(time.Second))
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
	ok, wait := s.gate.take(now)
	if ok {
		return true
	}
	// Spread the retries, so that streams refused together do not come
	// back together.
	wait = max(wait, 10*time.Millisecond)
	l.due = earliest(now.Add(wait+rand.N(wait)), latest)
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
