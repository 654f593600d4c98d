package store

import (
	"sync"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// withdrawalFeed holds the withdrawals applied since the reader last took
// them: at most maxPendingWithdrawals, past which it only says so.
type withdrawalFeed struct {
	mu       sync.Mutex
	rev      uint64
	ws       []Withdrawal
	overflow bool
	ch       chan struct{} // capacity 1: signalled after each entry with withdrawals
}

// maxPendingWithdrawals bounds what the feed holds for a reader that
// falls behind; past it the reader rebuilds its table from the replica.
const maxPendingWithdrawals = 1 << 16

func (s *Store) noteWithdrawals(rev uint64, ws []Withdrawal) {
	f := &s.withdrawals
	f.mu.Lock()
	f.rev = max(f.rev, rev)
	if f.overflow || len(f.ws)+len(ws) > maxPendingWithdrawals {
		f.overflow, f.ws = true, nil
	} else {
		f.ws = append(f.ws, ws...)
	}
	f.mu.Unlock()
	select {
	case f.ch <- struct{}{}:
	default:
	}
}

// Withdrawn is signalled when applied log entries have taken instances
// out of rotation (drained, deregistered, terminated, replaced, withdrawn
// by a verdict): the one reader, the node's table builder, then calls
// TakeWithdrawals and publishes them at once (SPEC §2: withdrawals are
// published on commit, admissions on the next build).
func (s *Store) Withdrawn() <-chan struct{} { return s.withdrawals.ch }

// TakeWithdrawals returns the withdrawals applied since the last call and
// the revision of the last entry among them. overflow reports that more
// came than the feed holds: the reader should rebuild from the replica.
func (s *Store) TakeWithdrawals() (rev uint64, ws []Withdrawal, overflow bool) {
	f := &s.withdrawals
	f.mu.Lock()
	defer f.mu.Unlock()
	rev, ws, overflow = f.rev, f.ws, f.overflow
	f.ws, f.overflow = nil, false
	return rev, ws, overflow
}

// Withdrawal is one instance an applied log entry took out of rotation:
// drained, deregistered, terminated, replaced by a new incarnation, or
// withdrawn by a committed verdict. Lifecycle is its lifecycle after the
// entry.
type Withdrawal struct {
	Key         wire.InstanceKey
	Incarnation uint64
	Lifecycle   status.Lifecycle
	// Rev is the revision of the entry.
	Rev uint64
}

// withdraw records in as taken out of rotation by the entry being
// applied (under f.mu).
func (f *fsm) withdraw(in *record) {
	f.withdrawn = append(f.withdrawn, Withdrawal{Key: in.key(), Incarnation: in.incarnation, Lifecycle: in.lifecycle})
}
