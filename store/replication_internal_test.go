package store

import (
	"testing"
	"time"
)

// TestReplicationBookkeeping: an answer not reached keeps the follower
// current as of its last reached one (or, before any, as of the first
// question), a new leader's question does not make it fresher, a failed
// question with nothing pending falls back to raft's contact, and a node
// that steps down is current as of its last tick as leader.
func TestReplicationBookkeeping(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var r replication
	check := func(rev uint64, want time.Time, wantOK bool) {
		t.Helper()
		r.reach(rev) // the tracking goroutine's check
		if got, ok := r.replicatedAt(); ok != wantOK || !got.Equal(want) {
			t.Errorf("at revision %d: replicated as of %v (%t), want %v (%t)", rev, got, ok, want, wantOK)
		}
	}
	check(5, time.Time{}, false) // never asked: contact decides

	r.answered(at(1), "n1", 10) // behind from the first answer on
	check(5, at(1), true)
	if r.needQuestion(5, "n1") {
		t.Error("a question asked with an answer pending")
	}
	check(10, at(1), true) // reached
	if !r.needQuestion(10, "n1") {
		t.Error("no question asked after the answer was reached")
	}
	r.answered(at(2), "n1", 20)
	check(12, at(1), true) // stalled: as of the last reached
	// A new leader: the pending answer is dropped and asked again, and
	// the follower is no fresher for it.
	if !r.needQuestion(12, "n3") {
		t.Error("no question asked of a new leader")
	}
	check(12, at(1), true)
	r.answered(at(9), "n3", 25)
	check(24, at(1), true)
	check(25, at(9), true)

	// The leader's API fails: contact decides, logged once.
	if !r.unanswered() || r.unanswered() {
		t.Error("unanswered should report the change once")
	}
	check(25, time.Time{}, false)
	if !r.answered(at(10), "n3", 25) {
		t.Error("answered should report the recovery")
	}
	check(25, at(10), true)

	// A leader is current; stepping down, as of its last tick as leader.
	r.answered(at(11), "n3", 40)
	r.leading(at(20))
	check(30, at(20), true)
	if !r.needQuestion(30, "n4") {
		t.Error("no question asked after stepping down")
	}
}
