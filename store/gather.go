package store

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// gatherWindow is how long the first of a group of self-reports waits
// for others before the group goes to raft together.
//
// Every raft commit makes bolt fdatasync twice, and on a server given
// one core the DNS readers wait through each one (docs/decisions.md,
// "Bolt's fdatasync still holds the one processor"). raft already puts
// the entries that queue up during one commit into the next, but a
// report that finds raft idle is committed alone, and so is the next:
// at 400 self-reports a second the churn bench counted 69 commits a
// second. Holding the first report of a group a moment lets the reports
// that arrive meanwhile share its commit. Each report stays its own log
// entry, with its own revision and result; only their fsyncs are shared.
const gatherWindow = 2 * time.Millisecond

// gatherMax bounds a group: raft's MaxAppendEntries, what its leader
// loop takes from the apply queue in one commit (and the queue's size,
// with BatchApplyCh).
const gatherMax = 64

// gatherer groups raft applies (see gatherWindow). There is no
// goroutine of its own: the first caller of a group waits out the
// window and then applies the whole group, and every caller waits for
// its own entry's future.
type gatherer struct {
	// apply hands one entry to raft (Raft.Apply); wait is the window
	// (a sleep of gatherWindow). Tests set both.
	apply func(b []byte, timeout time.Duration) raft.ApplyFuture
	wait  func()

	mu      sync.Mutex
	pending []*gathered
	open    bool // a group is gathering: its first caller is waiting
}

type gathered struct {
	b       []byte
	timeout time.Duration
	done    chan raft.ApplyFuture // buffered: the applier never waits
}

// add applies b as part of a group, and returns its future.
func (g *gatherer) add(b []byte, timeout time.Duration) raft.ApplyFuture {
	e := &gathered{b: b, timeout: timeout, done: make(chan raft.ApplyFuture, 1)}
	g.mu.Lock()
	g.pending = append(g.pending, e)
	first, full := !g.open, len(g.pending) >= gatherMax
	g.open = true
	var group []*gathered
	if full {
		// A full group goes now, by whichever caller filled it; the
		// first caller of the group finds nothing when it wakes.
		group, g.pending, g.open = g.pending, nil, false
	}
	g.mu.Unlock()
	if first && !full {
		g.wait()
		g.mu.Lock()
		if g.open {
			group, g.pending, g.open = g.pending, nil, false
		}
		g.mu.Unlock()
	}
	// With raft's apply queue buffered (BatchApplyCh), these do not
	// wait for the leader loop, which then takes them all at once.
	for _, x := range group {
		x.done <- g.apply(x.b, x.timeout)
	}
	return <-e.done
}
