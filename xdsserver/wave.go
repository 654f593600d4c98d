package xdsserver

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// A wave is the streams one table woke. The hub follows the next table
// once they have all made their pass (or PassWait has gone by), not as
// soon as it has woken them.
//
// Why: each table the hub follows wakes every stream watching something
// it changed, and each wake-up costs the stream its pass, the client its
// response and both their garbage, however little changed. A hub that
// follows every table as fast as it can build it makes as many waves as
// the store makes tables: in experiment 4's burst, once the hub encoded
// its views member by member (agentview.Wire), it followed four times as
// many tables as before, and the host's three servers, three agents and
// 2,000 subscribers went from a wave every 250 ms to one every 60 ms,
// each a little smaller; the subscribers fell 10 s behind and raft's
// heartbeats starved. Waiting for the wave's passes lets the next table
// carry everything that changed meanwhile: under load the waves grow
// instead of multiplying, and when the streams keep up (a few woken,
// passes of a millisecond) the wait is nothing.
//
// A stream that has not made its pass of an earlier wave is not counted
// in the next (it will see both at once), so a stream that never reads
// costs one wait of PassWait, not one per table.
// DefaultPassWait is Config.PassWait's default: about the spacing the
// waves had in experiment 4's burst before the hub got fast enough to
// follow every table.
const DefaultPassWait = 250 * time.Millisecond

type wave struct {
	pending atomic.Int64
	woken   atomic.Bool   // the hub is done waking: pending may reach 0
	done    chan struct{} // closed when it does
	once    sync.Once
}

func newWave() *wave { return &wave{done: make(chan struct{})} }

// owe counts sig in w unless it still owes a pass to an earlier wave.
func (w *wave) owe(sig *signal) {
	if sig.owed.CompareAndSwap(nil, w) {
		w.pending.Add(1)
	}
}

// wake wakes the stream of sig, owing w its pass.
func (w *wave) wake(sig *signal) {
	w.owe(sig)
	sig.wake()
}

// passed is a stream's pass of w made.
func (w *wave) passed() {
	if w.pending.Add(-1) == 0 && w.woken.Load() {
		w.close()
	}
}

// sealed says the hub has woken every stream of w: the wave ends when
// the last of them has passed (at once if none is pending).
func (w *wave) sealed() {
	w.woken.Store(true)
	if w.pending.Load() == 0 {
		w.close()
	}
}

// close ends the wave; passed and sealed may both see pending at 0.
func (w *wave) close() { w.once.Do(func() { close(w.done) }) }

// wait blocks until w's streams have passed, at most max, or ctx ends.
// A nil wave (a table that woke nobody) is passed.
func (w *wave) wait(ctx context.Context, max time.Duration) {
	if w == nil || max <= 0 {
		return
	}
	t := time.NewTimer(max)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-w.done:
	case <-t.C:
	}
}

// pass runs a stream's pass (changed) for whatever woke it, and tells
// the wave it owed, if any, that it is made.
func (s *signal) pass(changed func() error) error {
	w := s.owed.Swap(nil)
	if w != nil {
		defer w.passed()
	}
	return changed()
}

// release tells the wave a stream that ends owed that it will not pass.
func (s *signal) release() {
	if w := s.owed.Swap(nil); w != nil {
		w.passed()
	}
}
