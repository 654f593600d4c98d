package xdsserver

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestWaveWaitsForItsPasses: the hub's wait after a table ends when the
// last stream it woke has made its pass, not before, and not later.
func TestWaveWaitsForItsPasses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, b := newSignal(), newSignal()
		w := newWave()
		w.wake(a)
		w.wake(b)
		w.wake(a) // woken twice: one pass owed
		w.sealed()
		for i, sig := range []*signal{a, b} {
			go func() {
				time.Sleep(time.Duration(i+1) * 10 * time.Millisecond)
				<-sig.ch
				_ = sig.pass(func() error { return nil })
			}()
		}
		start := time.Now()
		w.wait(context.Background(), time.Second)
		if got := time.Since(start); got != 20*time.Millisecond {
			t.Fatalf("the wait ended after %v, want 20ms (the second stream's pass)", got)
		}
	})
}

// TestWaveWaitIsBounded: a stream that does not pass holds the hub for
// PassWait once; in the next wave it is not counted (it owes the first),
// so the hub does not wait for it again; once it passes, it counts
// again.
func TestWaveWaitIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		stuck, quick := newSignal(), newSignal()
		first := newWave()
		first.wake(stuck)
		first.sealed()
		start := time.Now()
		first.wait(ctx, 250*time.Millisecond)
		if got := time.Since(start); got != 250*time.Millisecond {
			t.Fatalf("a stream that never passes held the hub %v, want PassWait (250ms)", got)
		}
		second := newWave()
		second.wake(stuck)
		second.wake(quick)
		second.sealed()
		go func() { _ = quick.pass(func() error { return nil }) }()
		start = time.Now()
		second.wait(ctx, 250*time.Millisecond)
		if got := time.Since(start); got != 0 {
			t.Fatalf("the stream stuck in the first wave held the second %v", got)
		}
		// It passes (both waves at once): the first is done, and the
		// third counts it again.
		_ = stuck.pass(func() error { return nil })
		select {
		case <-first.done:
		default:
			t.Fatal("the first wave did not end with its stream's pass")
		}
		third := newWave()
		third.wake(stuck)
		third.sealed()
		if third.pending.Load() != 1 {
			t.Fatalf("the third wave counts %d streams, want 1", third.pending.Load())
		}
	})
}

// TestWaveOfNobody: a table that woke no stream costs no wait, nor does
// a wave whose streams end without passing (release).
func TestWaveOfNobody(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		var none *wave
		none.wait(ctx, time.Second)
		empty := newWave()
		empty.sealed()
		empty.wait(ctx, time.Second)
		sig := newSignal()
		gone := newWave()
		gone.wake(sig)
		gone.sealed()
		sig.release()
		start := time.Now()
		gone.wait(ctx, time.Second)
		if time.Since(start) != 0 {
			t.Fatalf("waited %v for nobody", time.Since(start))
		}
	})
}
