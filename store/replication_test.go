package store_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestFollowerStaleWhenReplicationStalls: a follower that hears the
// leader's heartbeats but whose replica does not reach the revision the
// leader told it is current only as of the last revision it did reach:
// its LastContact stops moving though raft's contact stays fresh. Once it
// reaches it, LastContact follows replication again; while the leader
// does not tell its revision, it follows raft's contact alone.
//
// The stall is the leader's answer (its revision plus one, an entry the
// follower cannot have until the leader writes again), not a real disk:
// an in-memory raft log cannot be made to fail its appends while
// heartbeats go on. integration's TestStoreFollowerDiskFull stalls a
// real one. The store's clock is set in the past, so that raft's own
// contact (real time) is always the later of the two.
func TestFollowerStaleWhenReplicationStalls(t *testing.T) {
	const (
		normal = iota
		stall
		fail
	)
	var mode atomic.Int32
	var stalled atomic.Int32 // questions answered with a revision not there yet
	var leader atomic.Pointer[store.Store]
	ask := func(context.Context, string) (uint64, error) {
		l := leader.Load()
		if l == nil {
			return 0, errors.New("no leader yet")
		}
		switch mode.Load() {
		case stall:
			stalled.Add(1)
			return l.Revision() + 1, nil
		case fail:
			return 0, errors.New("the leader's API does not answer")
		}
		return l.Revision(), nil
	}
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	var nodes []*node
	for i := 1; i <= 2; i++ {
		cfg := storetest.Fast(store.Config{NodeID: fmt.Sprintf("n%d", i), HTTPAddr: fmt.Sprintf("127.0.0.1:%d", i),
			Bootstrap: i == 1, LeaderRevision: ask, Now: clk.Now})
		nodes = append(nodes, startNode(t, cfg))
	}
	n1, n2 := nodes[0], nodes[1]
	storetest.WaitFor(t, wait, func() error {
		if !n1.LeaderReady() {
			return fmt.Errorf("n1 is %s", n1.State())
		}
		return nil
	})
	leader.Store(n1.Store)
	mustApply(t, n1.Store, webService(time.Minute))
	n1.trans.Connect(n2.trans.LocalAddr(), n2.trans)
	n2.trans.Connect(n1.trans.LocalAddr(), n1.trans)
	if err := n1.Join(t.Context(), "test", wire.Member{NodeID: "n2", RaftAddr: n2.RaftAddr(), HTTPAddr: "127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	// caughtUpAsOf waits until n2 is current as of at (a question asked
	// then, reached).
	caughtUpAsOf := func(at time.Time) {
		t.Helper()
		storetest.WaitFor(t, wait, func() error {
			if lc := n2.LastContact(); !lc.Equal(at) {
				return fmt.Errorf("n2 (revision %d, leader %d) current as of %v, want %v", n2.Revision(), n1.Revision(), lc, at)
			}
			return nil
		})
	}
	clk.Advance(time.Hour)
	t1 := clk.Now()
	caughtUpAsOf(t1)
	if lc := n1.LastContact(); !lc.Equal(clk.Now()) {
		t.Errorf("the leader's LastContact %v, want now (%v)", lc, clk.Now())
	}

	// Stalled: the leader says it has an entry n2 has not. Every
	// question asked after t1 is answered so.
	mode.Store(stall)
	clk.Advance(time.Hour)
	storetest.WaitFor(t, wait, func() error {
		if stalled.Load() == 0 {
			return errors.New("n2 has not asked the leader yet")
		}
		return nil
	})
	asked := stalled.Load()
	clk.Advance(time.Hour)
	// n2 hears from the leader (it knows it, and raft counts it a
	// follower) and is still current only as of t1, however long.
	storetest.WaitFor(t, wait, func() error {
		if lid, _ := n2.Leader(); lid != "n1" || n2.State() != "Follower" {
			return fmt.Errorf("n2 is %s, leader %q", n2.State(), lid)
		}
		return nil
	})
	if lc := n2.LastContact(); lc.After(t1) {
		t.Errorf("n2, stalled since %v, is current as of %v", t1, lc)
	}
	if got := stalled.Load(); got != asked {
		t.Errorf("n2 asked %d more questions with an answer pending", got-asked)
	}

	// The leader writes: n2 reaches the answer, and the next question
	// makes it current again.
	mode.Store(normal)
	mustRegister(t, n1.Store, registration("a", "10.0.0.1"))
	clk.Advance(time.Hour)
	caughtUpAsOf(clk.Now())

	// The leader's API fails while raft is fine: raft's contact, which
	// is real time and so later than the store's clock, decides.
	mode.Store(fail)
	clk.Advance(time.Hour)
	storetest.WaitFor(t, wait, func() error {
		if lc := n2.LastContact(); !lc.After(clk.Now()) {
			return fmt.Errorf("n2 current as of %v, want raft's contact (after %v)", lc, clk.Now())
		}
		return nil
	})
	mode.Store(normal)
	clk.Advance(time.Hour)
	caughtUpAsOf(clk.Now())
}
