package store

import (
	"context"
	"sync"
	"time"
)

// replication follows how current a follower's replica is, not only
// whether it hears from a leader: raft's heartbeats keep LastContact
// fresh on a follower whose log cannot take the leader's entries (a full
// or slow disk, a stuck apply). A follower asks the leader for its
// revision (Config.LeaderRevision) every ReplicationCheck, one question at
// a time; once its own replica has applied as much, it is "replicated as
// of" the time it asked. An answer it has not reached yet is kept, and no
// new question is asked until it is reached (a replica that keeps up but
// lags by a few entries would otherwise chase a leader that keeps
// writing), so a stalled replica ages from its last reached answer
// (docs/decisions.md, "A follower's staleness follows its replication").
type replication struct {
	mu sync.Mutex
	// synced is the time of the last question whose answer the replica
	// reached; zero before the first.
	synced time.Time
	// pending is an answer not reached yet: the leader (askedOf) had
	// applied target at askedAt. target 0: none.
	askedAt time.Time
	askedOf string
	target  uint64
	// failed: the last question got no answer (the leader's API is down
	// or slow). With no answer pending, the store then trusts raft's
	// contact alone rather than let its last answer age (no flapping on
	// an API that fails now and then while raft is fine).
	failed bool
}

// replicatedAt reports, for a follower, the time its replica is known to
// have been current as of, and whether it knows. It promotes a pending
// answer that rev reached.
func (r *replication) replicatedAt(rev uint64) (time.Time, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reach(rev)
	switch {
	case r.target > 0 && !r.synced.IsZero():
		return r.synced, true // behind: as of the last answer reached
	case r.target > 0:
		return r.askedAt, true // behind since at least the first answer
	case r.failed || r.synced.IsZero():
		return time.Time{}, false // no answer to go by: raft's contact
	default:
		return r.synced, true
	}
}

// reach promotes the pending answer if rev has reached it. r.mu is held.
func (r *replication) reach(rev uint64) {
	if r.target > 0 && rev >= r.target {
		r.synced, r.target, r.askedOf = r.askedAt, 0, ""
	}
}

// needQuestion reports whether a question should be asked of leader
// now: none is pending, or the pending one was asked of another leader
// (a new leader's answer is asked for; what was synced stays).
func (r *replication) needQuestion(rev uint64, leader string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.reach(rev)
	if r.target > 0 && r.askedOf != leader {
		r.target, r.askedOf = 0, ""
	}
	return r.target == 0
}

// answered records the leader's answer to the question asked at at; it
// reports whether the previous question got none.
func (r *replication) answered(at time.Time, leader string, target uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.failed
	r.askedAt, r.askedOf, r.target, r.failed = at, leader, max(target, 1), false
	return was
}

// unanswered records a question that got no answer; it reports whether
// the previous one did (the change is logged once).
func (r *replication) unanswered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.failed
	r.failed = true
	return !was
}

// trackReplication asks the leader for its revision every
// ReplicationCheck while this node is a follower, until ctx is done.
func (s *Store) trackReplication(ctx context.Context) {
	if s.cfg.LeaderRevision == nil {
		return
	}
	t := time.NewTicker(s.cfg.ReplicationCheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.askReplication(ctx)
		}
	}
}

// askReplication asks the leader for its revision once, if this node is a
// follower with a known leader and no answer pending.
func (s *Store) askReplication(ctx context.Context) {
	lid, addr := s.Leader()
	if s.IsLeader() || lid == "" || addr == "" || lid == s.cfg.NodeID {
		return
	}
	if !s.repl.needQuestion(s.Revision(), lid) {
		return
	}
	at := s.cfg.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ReplicationCheck)
	defer cancel()
	rev, err := s.cfg.LeaderRevision(ctx, addr)
	if err != nil {
		if s.repl.unanswered() {
			s.log.Warn("the leader does not tell its revision: staleness follows raft's contact alone until it does",
				"leader", lid, "err", err)
		}
		return
	}
	if s.repl.answered(at, lid, rev) {
		s.log.Info("the leader tells its revision again: staleness follows replication", "leader", lid)
	}
}
