package store

import (
	"github.com/cairn-sd/cairn/wire"
)

func (f *fsm) record(e wire.Event) {
	f.internEvent(&e)
	f.eventSeq++
	e.Seq = f.eventSeq
	if e.Kind == wire.EventRefused {
		f.refusals.push(e)
		return
	}
	f.events.push(e)
}

// ring is a fixed-capacity buffer of events, oldest first (the
// refusals; the audit trail is a trail). Pushing onto a full ring drops
// the oldest: O(1), no copying.
type ring struct {
	buf   []wire.Event
	start int
}

func newRing(capacity int) ring { return ring{buf: make([]wire.Event, 0, capacity)} }

func (r *ring) push(e wire.Event) {
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, e)
		return
	}
	r.buf[r.start] = e
	r.start = (r.start + 1) % len(r.buf)
}

// at returns the i-th oldest event.
func (r *ring) at(i int) wire.Event { return r.buf[(r.start+i)%len(r.buf)] }

func (r *ring) list() []wire.Event {
	out := make([]wire.Event, 0, len(r.buf))
	for i := range r.buf {
		out = append(out, r.at(i))
	}
	return out
}
