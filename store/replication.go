package store

import (
	"context"
	"sync/atomic"
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
//
// Only the tracking goroutine writes it; readers (LastContact, on every DNS
// query) load asOf, an atomic, and take no lock.
type replication struct {
	// synced is the time of the last question whose answer the replica
	// reached (or the last time this node was leader); zero before.
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

	// asOf is what readers see: the time the replica is known current
	// as of; nil when raft's contact alone decides.
	asOf atomic.Pointer[time.Time]
}

// replicatedAt reports, for a follower, the time its replica is known to
// have been current as of, and whether it knows.
func (r *replication) replicatedAt() (time.Time, bool) {
	if p := r.asOf.Load(); p != nil {
		return *p, true
	}
	return time.Time{}, false
}

// publish stores what readers see.
func (r *replication) publish() {
	var at time.Time
	switch {
	case r.target > 0 && !r.synced.IsZero():
		at = r.synced // behind: as of the last answer reached
	case r.target > 0:
		at = r.askedAt // behind since at least the first answer
	case r.failed || r.synced.IsZero():
		r.asOf.Store(nil) // no answer to go by: raft's contact
		return
	default:
		at = r.synced
	}
	r.asOf.Store(&at)
}

// leading records that this node is the leader at now: current, with
// nothing pending, so that it is not stale the moment it steps down.
func (r *replication) leading(now time.Time) {
	r.synced, r.target, r.askedOf, r.failed = now, 0, "", false
	r.publish()
}

// reach promotes the pending answer if rev has reached it.
func (r *replication) reach(rev uint64) {
	if r.target > 0 && rev >= r.target {
		r.synced, r.target, r.askedOf = r.askedAt, 0, ""
		r.publish()
	}
}

// needQuestion reports whether a question should be asked of leader
// now: none is pending, or the pending one was asked of another leader
// (a new leader's answer is asked for; what was synced stays).
func (r *replication) needQuestion(rev uint64, leader string) bool {
	r.reach(rev)
	if r.target > 0 && r.askedOf != leader {
		r.target, r.askedOf = 0, ""
		r.publish()
	}
	return r.target == 0
}

// answered records the leader's answer to the question asked at at; it
// reports whether the previous question got none.
func (r *replication) answered(at time.Time, leader string, target uint64) bool {
	was := r.failed
	r.askedAt, r.askedOf, r.target, r.failed = at, leader, max(target, 1), false
	r.publish()
	return was
}

// unanswered records a question that got no answer; it reports whether
// the previous one did (the change is logged once).
func (r *replication) unanswered() bool {
	was := r.failed
	r.failed = true
	r.publish()
	return !was
}

// reachCheck is how often the tracking goroutine checks whether the
// replica has reached the pending answer: the precision of a follower's
// age, which readers take without looking at the replica.
const reachCheck = 50 * time.Millisecond

// trackReplication asks the leader for its revision every
// ReplicationCheck while this node is a follower, and follows the
// replica towards the answer, until ctx is done.
func (s *Store) trackReplication(ctx context.Context) {
	if s.cfg.LeaderRevision == nil {
		return
	}
	ask := time.NewTicker(s.cfg.ReplicationCheck)
	defer ask.Stop()
	reach := time.NewTicker(min(reachCheck, s.cfg.ReplicationCheck))
	defer reach.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reach.C:
			if s.IsLeader() {
				s.repl.leading(s.cfg.Now())
			} else {
				s.repl.reach(s.Revision())
			}
		case <-ask.C:
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
	s.repl.reach(s.Revision())
}
