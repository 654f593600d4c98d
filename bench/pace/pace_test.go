package pace

import (
	"context"
	"testing"
	"testing/synctest"
	"time"
)

// TestCatchesUp: a generator that stalls for ten intervals is handed the
// ten it missed at once, then goes on at the rate; a ticker would have
// dropped nine of them.
func TestCatchesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		start := time.Now()
		s := New(start, 600, 0, nil) // one every 100 ms
		if _, err := s.Next(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // the stall
		for i := range 10 {
			late, err := s.Next(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := time.Second - time.Duration(i+1)*100*time.Millisecond; late != want {
				t.Fatalf("catch-up %d: late %v, want %v", i, late, want)
			}
		}
		if got := time.Since(start); got != time.Second {
			t.Fatalf("the catch-up waited: %v after start", got)
		}
		if late, _ := s.Next(ctx); late != 0 || time.Since(start) != 1100*time.Millisecond {
			t.Fatalf("after the catch-up: late %v at %v, want 0 at 1.1s", late, time.Since(start))
		}
		if s.Handed() != 12 {
			t.Fatalf("handed %d, want 12", s.Handed())
		}
	})
}

// TestStopsOnCancel: a wait ends with the context's error.
func TestStopsOnCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		s := New(time.Now().Add(time.Hour), 60, 0, nil)
		if _, err := s.Next(ctx); err != context.DeadlineExceeded {
			t.Fatalf("Next: %v, want the deadline", err)
		}
		if s.Handed() != 0 {
			t.Fatalf("handed %d after a cancelled wait", s.Handed())
		}
	})
}

// TestOver: a run of 1 s at one every 300 ms hands out the four due
// before its end; a generator that falls behind past the end hands out
// no more.
func TestOver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		s := New(time.Now(), 200, time.Second, nil)
		n := 0
		for !s.Over() {
			if _, err := s.Next(ctx); err != nil {
				t.Fatal(err)
			}
			n++
		}
		if n != 4 {
			t.Fatalf("handed out %d in a 1 s run at one every 300 ms, want 4", n)
		}
		late := New(time.Now(), 200, time.Second, nil)
		if _, err := late.Next(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second) // the generator stalls past the end
		if !late.Over() {
			t.Fatal("a run past its end is not over")
		}
		if New(time.Now(), 200, 0, nil).Over() {
			t.Fatal("a run without an end is over")
		}
	})
}
