package store

import (
	"context"
	"fmt"
	"time"
)

// maxLeasesPerEntry bounds one checkpoint log entry (about 150 bytes a
// lease); the rest wait for the next tick.
const maxLeasesPerEntry = 4096

// Renew extends an instance's lease by its TTL from now. It is served by
// the leader from memory and replicated in the next checkpoint batch; the
// returned record carries the new deadline.
func (s *Store) Renew(_ context.Context, key InstanceKey, inc uint64) (Instance, error) {
	if !s.leaderReady.Load() {
		return Instance{}, s.notLeader()
	}
	s.fsm.mu.RLock()
	cur, err := s.fsm.current(key, inc)
	var in Instance
	if err == nil {
		in = cur.clone()
	}
	s.fsm.mu.RUnlock()
	if err != nil {
		return Instance{}, err
	}
	if in.Lifecycle == Terminated {
		return Instance{}, fmt.Errorf("instance %s is deregistered: %w", key, ErrFenced)
	}
	d := s.now().Add(in.LeaseTTL.D())
	s.leaseMu.Lock()
	if old, ok := s.leases[key]; !ok || old.Incarnation != inc || d.After(old.Deadline) {
		s.leases[key] = leaseUpdate{fence: fence{key, inc}, Deadline: d}
		s.dirty[key] = true
	}
	s.leaseMu.Unlock()
	s.metrics.renewals.Inc()
	return s.overlay(in), nil
}

// LeaderReady reports whether this node is the leader and has finished
// taking over (caught up and extended the leases): only then does it
// accept renewals.
func (s *Store) LeaderReady() bool { return s.leaderReady.Load() }

// overlay applies the leader's unreplicated renewal of in, if any.
func (s *Store) overlay(in Instance) Instance {
	if in.ID == "" {
		return in
	}
	s.leaseMu.Lock()
	l, ok := s.leases[in.Key()]
	s.leaseMu.Unlock()
	if ok && l.Incarnation == in.Incarnation && in.Lifecycle != Terminated && l.Deadline.After(in.LeaseDeadline) {
		in.LeaseDeadline = l.Deadline
	}
	return in
}

func (s *Store) forgetLease(key InstanceKey) {
	s.leaseMu.Lock()
	delete(s.leases, key)
	delete(s.dirty, key)
	s.leaseMu.Unlock()
}

// Run drives the leader's duties until ctx is done: on election it catches
// up, extends every lease by one TTL and records its own address; while
// leader it checkpoints renewals, ends drain windows and prunes tombstones
// every LeaseCheckpoint. It returns nil when ctx is done.
func (s *Store) Run(ctx context.Context) error {
	t := time.NewTicker(s.cfg.LeaseCheckpoint)
	defer t.Stop()
	leaderCh := s.raft.LeaderCh()
	isLeader := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case l := <-leaderCh:
			s.metrics.transitions.Inc()
			if !l {
				isLeader = false
				s.stepDown()
				s.log.Info("lost leadership")
				continue
			}
			isLeader = true
			if err := s.takeOver(ctx); err != nil {
				// Retried on the next tick.
				s.log.Warn("taking over as leader", "err", err)
			}
		case <-t.C:
			if !isLeader {
				continue
			}
			if !s.leaderReady.Load() {
				if err := s.takeOver(ctx); err != nil {
					s.log.Warn("taking over as leader", "err", err)
				}
				continue
			}
			if err := s.housekeep(ctx); err != nil {
				s.log.Warn("housekeeping", "err", err)
			}
		}
	}
}

func (s *Store) stepDown() {
	s.leaderReady.Store(false)
	s.leaseMu.Lock()
	clear(s.leases)
	clear(s.dirty)
	s.leaseMu.Unlock()
}

// takeOver makes a new leader ready: Barrier so that the FSM holds every
// committed entry, then every live lease is extended to at least now + TTL
// (it could have been renewed on the old leader in the meantime), and this
// node's addresses are recorded.
func (s *Store) takeOver(ctx context.Context) error {
	if err := s.raft.Barrier(timeoutOf(ctx)).Error(); err != nil {
		return fmt.Errorf("barrier: %w", err)
	}
	now := s.now()
	s.fsm.mu.RLock()
	s.leaseMu.Lock()
	n := 0
	for k, in := range s.fsm.instances {
		if in.Lifecycle == Terminated {
			continue
		}
		d := now.Add(in.LeaseTTL.D())
		if d.After(in.LeaseDeadline) {
			s.leases[k] = leaseUpdate{fence: fence{k, in.Incarnation}, Deadline: d}
			s.dirty[k] = true
			n++
		}
	}
	self := s.fsm.members[s.cfg.NodeID]
	s.leaseMu.Unlock()
	s.fsm.mu.RUnlock()
	s.leaderReady.Store(true)
	s.log.Info("leader ready", "leases_extended", n, "revision", s.Revision())
	if self.HTTPAddr != s.cfg.HTTPAddr || self.RaftAddr != s.RaftAddr() {
		m := Member{NodeID: s.cfg.NodeID, RaftAddr: s.RaftAddr(), HTTPAddr: s.cfg.HTTPAddr}
		if _, err := s.propose(ctx, command{Op: opSetMember, Actor: "node:" + s.cfg.NodeID, Member: &m}); err != nil {
			return fmt.Errorf("recording own address: %w", err)
		}
	}
	return s.housekeep(ctx)
}

// housekeep replicates pending renewals (in batches), terminates instances
// whose drain window is over and prunes old tombstones: one log entry, and
// none when there is nothing to do.
func (s *Store) housekeep(ctx context.Context) error {
	now := s.now()
	c := command{Op: opHousekeep, At: now, Actor: "node:" + s.cfg.NodeID}
	s.leaseMu.Lock()
	for k := range s.dirty {
		if len(c.Leases) == maxLeasesPerEntry {
			break
		}
		c.Leases = append(c.Leases, s.leases[k])
		delete(s.dirty, k)
	}
	s.leaseMu.Unlock()
	pruneBefore := now.Add(-s.cfg.TombstoneTTL)
	s.fsm.mu.RLock()
	for k, in := range s.fsm.instances {
		switch in.Lifecycle {
		case Draining:
			svc := s.fsm.services[k.ServiceKey()]
			if svc != nil && !now.Before(in.DrainingSince.Add(svc.Policy.DrainWindow.D())) {
				c.Terminate = append(c.Terminate, fence{k, in.Incarnation})
			}
		case Terminated:
			if in.TerminatedAt.Before(pruneBefore) {
				c.PruneBefore = pruneBefore
			}
		}
	}
	s.fsm.mu.RUnlock()
	if len(c.Leases) == 0 && len(c.Terminate) == 0 && c.PruneBefore.IsZero() {
		return nil
	}
	if _, err := s.propose(ctx, c); err != nil {
		// Put the renewals back so that the next tick retries them.
		s.leaseMu.Lock()
		for _, l := range c.Leases {
			if cur, ok := s.leases[l.Key]; ok && cur.Incarnation == l.Incarnation {
				s.dirty[l.Key] = true
			}
		}
		s.leaseMu.Unlock()
		return err
	}
	return nil
}
