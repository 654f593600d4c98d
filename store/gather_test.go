package store

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// appliedFuture is a settled raft.ApplyFuture carrying what was applied.
type appliedFuture struct {
	raft.ApplyFuture
	b string
}

// Reports that arrive while the first of a group waits are applied with
// it, back to back, each with its own future; a group that fills is
// applied at once by whoever filled it; and one arriving after a group
// went starts the next.
func TestGatherGroupsReports(t *testing.T) {
	var mu sync.Mutex
	var groups [][]string // each run of applies by one caller
	var cur []string
	g := &gatherer{}
	g.apply = func(b []byte, _ time.Duration) raft.ApplyFuture {
		mu.Lock()
		cur = append(cur, string(b))
		mu.Unlock()
		return appliedFuture{b: string(b)}
	}
	// The window stays open until n reports are pending or another
	// caller took the group (a poll with a deadline, not a sleep
	// standing in for arrival).
	n := 10
	g.wait = func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			g.mu.Lock()
			k, open := len(g.pending), g.open
			g.mu.Unlock()
			if k >= n || !open || time.Now().After(deadline) {
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	flushGroup := func() {
		mu.Lock()
		groups = append(groups, cur)
		cur = nil
		mu.Unlock()
	}
	run := func(k int, tag string) {
		t.Helper()
		var wg sync.WaitGroup
		for i := range k {
			wg.Add(1)
			go func() {
				defer wg.Done()
				b := fmt.Sprintf("%s%d", tag, i)
				f := g.add([]byte(b), time.Second)
				if got := f.(appliedFuture).b; got != b {
					t.Errorf("report %s got the future of %s", b, got)
				}
			}()
		}
		wg.Wait()
		flushGroup()
	}
	run(10, "a")
	if len(groups[0]) != 10 {
		t.Fatalf("10 reports in one window were applied as %v; want one group of 10", groups[0])
	}
	// A full group goes without waiting out the window.
	n = 1 << 30
	run(gatherMax, "b")
	if len(groups[1]) != gatherMax {
		t.Fatalf("a full group of %d was applied as %d", gatherMax, len(groups[1]))
	}
	g.mu.Lock()
	open, left := g.open, len(g.pending)
	g.mu.Unlock()
	if open || left != 0 {
		t.Fatalf("after the groups: open %v, %d pending; want closed, none", open, left)
	}
	// Alone, a report is applied once its window ends.
	n = 1
	run(1, "c")
	if len(groups[2]) != 1 {
		t.Fatalf("a lone report was applied as %v", groups[2])
	}
}
