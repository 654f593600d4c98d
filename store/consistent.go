package store

import (
	"context"
	"errors"
	"fmt"
)

// VerifyRead confirms that a read of this node's replica made after it
// returns nil is linearizable: it sees every write acknowledged before
// the call, by this node or by any earlier leader. It holds when this
// node is the leader of the current term, has taken over in it (its
// Barrier applied every entry committed before the term), and a quorum
// of voters still follows it, as a round of heartbeats sent after the
// call shows (raft's VerifyLeader). A write is acknowledged only once
// the leader's replica has applied it, so the leader's replica then holds
// every acknowledged write. Otherwise it returns ErrNotLeader or
// ErrNoLeader: the caller forwards the read to the leader, or answers
// 503. Renewals are the exception: the leader serves them from memory
// and the deadline it answers with is its own (Renew). Two assumptions
// (docs/decisions.md): raft's VerifyLeader may count a follower's answer
// to a message sent before the call, so a reply delayed across a whole
// election could confirm a deposed leader; and renewals and the refusals
// decided before a proposal (fenced, not found) skip the round, relying
// on raft's leader lease to step a cut-off leader down first.
func (s *Store) VerifyRead(ctx context.Context) error {
	if !s.LeaderReady() {
		return s.notReady()
	}
	term := s.raft.CurrentTerm()
	f := s.raft.VerifyLeader()
	done := make(chan error, 1)
	// The future resolves once a quorum answers or leadership is lost
	// (raft steps down within its leader lease); ctx only bounds the wait.
	go func() { done <- f.Error() }()
	select {
	case err := <-done:
		if err != nil {
			e := s.raftErr(err)
			if !errors.Is(e, ErrNotLeader) && !errors.Is(e, ErrNoLeader) && !errors.Is(e, ErrClosed) {
				e = fmt.Errorf("%v: %w", e, ErrNoLeader)
			}
			return fmt.Errorf("confirming leadership for a consistent read: %w", e)
		}
	case <-ctx.Done():
		return fmt.Errorf("confirming leadership for a consistent read: %v: %w", ctx.Err(), ErrNoLeader)
	}
	if !s.LeaderReady() || s.raft.CurrentTerm() != term {
		return fmt.Errorf("leadership moved while confirming a consistent read: %w", ErrNoLeader)
	}
	return nil
}
