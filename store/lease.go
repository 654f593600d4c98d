package store

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

const (
	// maxLeasesPerEntry bounds one checkpoint log entry (about 150 bytes a
	// lease).
	maxLeasesPerEntry = 4096
	// maxEntriesPerTick bounds the checkpoint entries one tick commits; at
	// 8 × 4096 a tick replicates 32,768 renewals, so 100,000 instances on a
	// 30 s TTL (about 10,000 renewals a second) never fall behind.
	maxEntriesPerTick = 8
	// maxTerminationsPerEntry bounds the drains ended and the leases
	// expired by one entry, each list on its own (about 150 bytes each).
	maxTerminationsPerEntry = 4096
	// minLeasesShrunk is the smallest high-water mark of held renewals
	// worth making new maps for (see shrinkLeases).
	minLeasesShrunk = 1024
)

// Renew extends an instance's lease by its TTL from now. It is served by
// the leader from memory and replicated in the next checkpoint batch; the
// returned record carries the new deadline. Like Instances', its maps,
// slices and pointers are the store's, and read-only.
func (s *Store) Renew(ctx context.Context, key wire.InstanceKey, inc uint64) (wire.Instance, error) {
	if !s.LeaderReady() {
		return wire.Instance{}, s.notReady()
	}
	s.fsm.mu.RLock()
	cur, err := s.fsm.current(key, inc)
	var rec record
	if err == nil {
		rec = *cur // shares its maps and pointers, read-only (see listRecords)
	}
	s.fsm.mu.RUnlock()
	if err != nil {
		return wire.Instance{}, err
	}
	if rec.lifecycle == status.Terminated {
		return wire.Instance{}, fmt.Errorf("instance %s is deregistered: %w", key, ErrFenced)
	}
	in := rec.view()
	now := s.now()
	if hx := s.HardExpiry(in); !hx.IsZero() && !now.Before(hx) {
		// The registration is over (SPEC §2), whether or not housekeeping
		// has committed its end yet: the address may belong to another
		// process by now.
		return wire.Instance{}, fmt.Errorf("instance %s: incarnation %d is past its hard expiry (%s); register it again: %w",
			key, inc, hx.Format(time.RFC3339), ErrFenced)
	}
	d := now.Add(in.LeaseTTL.D())
	if !now.Before(s.overlay(in).LeaseDeadline) {
		// A renewal that brings an expired lease back is replicated before
		// it is acknowledged: a later leader then knows the lease is live
		// (LeaseExpiry).
		c := command{Op: opHousekeep, At: now, Actor: "node:" + s.cfg.NodeID,
			Leases: []leaseUpdate{{fence: fence{key, inc}, Deadline: d}}}
		if _, err := s.propose(ctx, c); err != nil {
			return wire.Instance{}, err
		}
		// Housekeeping may have judged the lease past its hard expiry at a
		// later reading of the clock and committed its end first.
		s.fsm.mu.RLock()
		cur, ferr := s.fsm.current(key, inc)
		ended := ferr == nil && cur.lifecycle == status.Terminated
		s.fsm.mu.RUnlock()
		if ferr != nil {
			return wire.Instance{}, ferr
		}
		if ended {
			return wire.Instance{}, fmt.Errorf("instance %s: incarnation %d was terminated meanwhile (past its hard expiry, or deregistered); register it again: %w",
				key, inc, ErrFenced)
		}
	}
	s.leaseMu.Lock()
	if old, ok := s.leases[key]; !ok || old.Incarnation != inc || d.After(old.Deadline) {
		s.leases[key] = leaseUpdate{fence: fence{key, inc}, Deadline: d}
		s.dirty[key] = true
		s.leasesPeak = max(s.leasesPeak, len(s.leases))
	}
	s.leaseMu.Unlock()
	s.metrics.renewals.Inc()
	return s.overlay(in), nil
}

// LeaderReady reports whether this node is the leader of the current term
// and has finished taking over in that term (caught up with a Barrier and
// committed its lease grace): only then does it serve renewals and
// pre-checks from its own replica.
func (s *Store) LeaderReady() bool {
	t := s.readyTerm.Load()
	return t != 0 && s.IsLeader() && s.raft.CurrentTerm() == t
}

// notReady is the error of a call that needs a ready leader.
func (s *Store) notReady() error {
	if s.IsLeader() {
		return fmt.Errorf("this node was just elected and is still taking over; retry: %w", ErrNoLeader)
	}
	return s.notLeader()
}

// LeaseExpiry returns when in's lease runs out as this node can tell: its
// recorded deadline, which a takeover moves to one TTL after it for every
// lease live when the cluster last had a leader at work (fsm.grace: time
// without a leader never counts against a lease). For a lease that was
// live shortly before the current leader took over, it is also never
// before one TTL after that, without rewriting the recorded deadline: this
// covers replicas that applied takeovers written before grace existed. A
// renewal that revives an expired lease is replicated before it is
// acknowledged, so any renewal a new leader may have missed was made on a
// live lease. A follower adds two checkpoint intervals for renewals the
// leader holds but has not replicated yet.
func (s *Store) LeaseExpiry(in wire.Instance) time.Time {
	in = s.overlay(in)
	s.fsm.mu.RLock()
	since := s.fsm.leaderSince
	s.fsm.mu.RUnlock()
	return s.leaseExpiry(in, since)
}

// HardExpiry returns when in's registration is over, as this node can
// tell: HardExpiryTTLs lease TTLs after its last renewal, counted from
// LeaseExpiry so that a new leader's grace holds here too. At that time
// the leader terminates it (with an audit event "expired"), whatever its
// capability and whatever probes say. An instance without a lease TTL
// never expires: HardExpiry returns the zero time.
func (s *Store) HardExpiry(in wire.Instance) time.Time {
	if in.LeaseTTL <= 0 {
		return time.Time{}
	}
	return hardExpiry(s.LeaseExpiry(in), in.LeaseTTL.D())
}

// leaseExpiry is LeaseExpiry for in, already overlaid, with the leader's
// takeover time since; it takes no lock of the FSM.
func (s *Store) leaseExpiry(in wire.Instance, since time.Time) time.Time {
	exp := in.LeaseDeadline
	if g := since.Add(in.LeaseTTL.D()); !since.IsZero() && g.After(exp) && exp.After(since.Add(-s.graceWindow())) {
		exp = g
	}
	if !s.LeaderReady() {
		exp = exp.Add(2 * s.cfg.LeaseCheckpoint)
	}
	return exp
}

// graceWindow is how long before a takeover a renewal can have been
// acknowledged by the old leader and not replicated: two checkpoint
// intervals (the last one may have failed) plus the longest a dead leader
// goes unnoticed and an election takes (about four election timeouts).
func (s *Store) graceWindow() time.Duration {
	return 2*s.cfg.LeaseCheckpoint + 4*s.cfg.ElectionTimeout
}

// overlay applies the leader's unreplicated renewal of in, if any.
// overlay applies the leader's unreplicated renewal of in, if any.
func (s *Store) overlay(in wire.Instance) wire.Instance {
	if in.ID == "" {
		return in
	}
	s.leaseMu.Lock()
	l, ok := s.leases[in.Key()]
	s.leaseMu.Unlock()
	if ok && l.Incarnation == in.Incarnation && in.Lifecycle != status.Terminated && l.Deadline.After(in.LeaseDeadline) {
		in.LeaseDeadline = l.Deadline
	}
	return in
}

// replyDeadline is overlay for the record a command's apply returned: a
// checkpoint may have replicated a renewal, and forgotten it, between
// that apply and this call, and the replica's current record then holds
// the newer deadline that the overlay no longer can. (Not for callers
// holding the FSM's lock.)
func (s *Store) replyDeadline(in wire.Instance) wire.Instance {
	in = s.overlay(in)
	if in.ID == "" {
		return in
	}
	s.fsm.mu.RLock()
	cur := s.fsm.instances.get(in.Key())
	if cur != nil && cur.incarnation == in.Incarnation && cur.lifecycle != status.Terminated && cur.leaseDeadline > nanos(in.LeaseDeadline) {
		in.LeaseDeadline = fromNanos(cur.leaseDeadline)
	}
	s.fsm.mu.RUnlock()
	return in
}

func (s *Store) forgetLease(key wire.InstanceKey) {
	s.leaseMu.Lock()
	delete(s.leases, key)
	delete(s.dirty, key)
	s.leaseMu.Unlock()
}

// Run drives the leader's duties until ctx is done: on election it catches
// up and records its lease grace and its own addresses; while leader it
// checkpoints renewals, ends drain windows and prunes tombstones every
// LeaseCheckpoint. On a follower, a goroutine it owns follows its
// replication (replication.go). It returns nil when ctx is done, once
// that goroutine has stopped; call Handoff before cancelling it for a
// clean stop.
func (s *Store) Run(ctx context.Context) error {
	// A follower's replication is asked about on a goroutine of its own:
	// a slow leader must not hold up this loop's takeover.
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { s.trackReplication(ctx) })
	defer wg.Wait()
	defer cancel()
	t := time.NewTicker(s.cfg.LeaseCheckpoint)
	defer t.Stop()
	// Until this node has caught up, it checks often: /readyz waits on it.
	catchUp := time.NewTicker(50 * time.Millisecond)
	defer catchUp.Stop()
	leaderCh := s.raft.LeaderCh()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-catchUp.C:
			if s.CaughtUp() {
				catchUp.Stop()
				continue
			}
			if !s.IsLeader() {
				s.checkCaughtUp(ctx)
			}
		case l := <-leaderCh:
			s.metrics.transitions.Inc()
			if l && s.LeaderReady() {
				// A tick took over first, in this very term: a fold of
				// true→false→true would have moved the term. Taking over
				// again would drop the renewals held since.
				continue
			}
			// LeaderCh may fold true→false→true into one true: whatever
			// it says, what was ready belongs to an older term.
			s.stepDown()
			if !l {
				s.log.Info("lost leadership")
				continue
			}
			if err := s.takeOver(ctx); err != nil {
				s.log.Warn("taking over as leader; retrying on the next tick", "err", err)
			}
		case <-t.C:
			switch {
			case !s.IsLeader():
			case !s.LeaderReady():
				if err := s.takeOver(ctx); err != nil {
					s.log.Warn("taking over as leader; retrying on the next tick", "err", err)
				}
			default:
				if err := s.housekeep(ctx); err != nil {
					s.log.Warn("housekeeping", "err", err)
				}
			}
		}
	}
}

func (s *Store) stepDown() {
	s.readyTerm.Store(0)
	// The pacing of hard expiries is the leader's alone: a leader of a
	// later term starts afresh.
	s.hkMu.Lock()
	clear(s.expiryWins)
	s.metrics.expiriesHeld.Set(0)
	s.hkMu.Unlock()
	s.leaseMu.Lock()
	clear(s.leases)
	clear(s.dirty)
	s.shrinkLeases()
	s.leaseMu.Unlock()
}

// takeOver makes a new leader ready: a Barrier so that the FSM holds every
// committed entry, then a log entry recording when this leader took over
// (the start of every lease's grace), then its own addresses and tokens.
func (s *Store) takeOver(ctx context.Context) error {
	if s.handingOff.Load() {
		return nil
	}
	term := s.raft.CurrentTerm()
	if err := s.raft.Barrier(timeoutOf(ctx)).Error(); err != nil {
		return fmt.Errorf("barrier: %w", s.raftErr(err))
	}
	// The replica now holds every committed entry: the last one of an
	// earlier term is when the cluster last showed a leader at work.
	// Entries of this term (a write served in the first moments of the
	// term, an earlier takeover) do not count.
	s.fsm.mu.RLock()
	silent := s.fsm.silentSince(term)
	s.fsm.mu.RUnlock()
	if _, err := s.propose(ctx, command{Op: opLeader, Actor: "node:" + s.cfg.NodeID, Grace: true, SilentSince: silent}); err != nil {
		return fmt.Errorf("recording the lease grace: %w", err)
	}
	if s.raft.CurrentTerm() != term {
		return fmt.Errorf("term moved from %d to %d while taking over", term, s.raft.CurrentTerm())
	}
	s.readyTerm.Store(term)
	s.log.Info("leader ready", "term", term, "revision", s.Revision())
	return s.housekeep(ctx)
}

// housekeep replicates pending renewals (in batches), terminates instances
// whose drain window is over, prunes old tombstones, and records this
// node's own addresses when the store lacks them. It commits nothing when
// there is nothing to do.
func (s *Store) housekeep(ctx context.Context) error {
	if err := s.recordSelf(ctx); err != nil {
		return err
	}
	if err := s.stepEvacuationsNow(ctx); err != nil {
		// The leases and drains below are due whatever became of it.
		s.log.Warn("housekeeping", "err", err)
	}
	for i := 0; i < maxEntriesPerTick; i++ {
		more, err := s.housekeepOnce(ctx)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// recordSelf commits this node's addresses when the store lacks them.
func (s *Store) recordSelf(ctx context.Context) error {
	s.fsm.mu.RLock()
	self := s.fsm.members[s.cfg.NodeID]
	s.fsm.mu.RUnlock()
	if self.HTTPAddr == s.cfg.HTTPAddr && self.RaftAddr == s.RaftAddr() && self.Region == s.cfg.Region && self.Zone == s.cfg.Zone {
		return nil
	}
	m := wire.Member{NodeID: s.cfg.NodeID, RaftAddr: s.RaftAddr(), HTTPAddr: s.cfg.HTTPAddr, Region: s.cfg.Region, Zone: s.cfg.Zone}
	if _, err := s.propose(ctx, command{Op: opSetMember, Actor: "node:" + s.cfg.NodeID, Member: &m}); err != nil {
		return fmt.Errorf("recording own address: %w", err)
	}
	return nil
}

// housekeepOnce commits one housekeeping entry and reports whether work
// is still waiting (renewals, or terminations past the entry's bound).
func (s *Store) housekeepOnce(ctx context.Context) (bool, error) {
	s.hkMu.Lock()
	defer s.hkMu.Unlock()
	c := command{Op: opHousekeep, Actor: "node:" + s.cfg.NodeID}
	s.leaseMu.Lock()
	for k := range s.dirty {
		if len(c.Leases) == maxLeasesPerEntry {
			break
		}
		c.Leases = append(c.Leases, s.leases[k])
		delete(s.dirty, k)
	}
	more := len(s.dirty) > 0
	s.leaseMu.Unlock()
	// Read the clock after taking the renewals: an entry that carries a
	// renewal judged every lease at a time no earlier than that renewal.
	now := s.now()
	c.At = now
	pruneBefore := now.Add(-s.cfg.TombstoneTTL)
	// The scan visits every instance, a millisecond or more at 10,000:
	// it takes the services' keys at once, then their records and then
	// looks at those a slice at a time (package pace), so that a server
	// on one core keeps answering. (Taking all the records at once was
	// itself a slice of more than a millisecond at 8,000.) A record that
	// comes during a pause waits for the next tick. (A pointer a record,
	// where a key was 48 bytes: the lists are kept from one tick to the
	// next.)
	s.hkPacer.Begin()
	s.fsm.mu.RLock()
	since := s.fsm.leaderSince
	svcs := s.fsm.instances.services(s.hkSvcs[:0])
	recs := s.hkRecs[:0]
	cands := s.hkCands[:0]
	for i, k := range svcs {
		if i%16 == 15 && s.hkPacer.Due() {
			s.fsm.mu.RUnlock()
			s.hkPacer.Pause()
			s.fsm.mu.RLock()
		}
		recs = s.fsm.instances.appendService(recs, k)
	}
	clear(svcs)
	s.hkSvcs = svcs[:0]
	for i, in := range recs {
		if i%64 == 63 && s.hkPacer.Due() {
			s.fsm.mu.RUnlock()
			s.hkPacer.Pause()
			s.fsm.mu.RLock()
		}
		k := in.key()
		if s.fsm.instances.get(k) != in {
			continue // gone or replaced meanwhile
		}
		if in.lifecycle == status.Draining {
			svc := s.fsm.services[k.ServiceKey()]
			if svc != nil && !now.Before(fromNanos(in.drainingSince()).Add(svc.Policy.DrainWindow.D())) {
				if len(c.Terminate) == maxTerminationsPerEntry {
					more = true
					continue
				}
				c.Terminate = append(c.Terminate, fence{k, in.incarnation})
				continue
			}
		}
		switch {
		case in.lifecycle == status.Terminated:
			if in.terminatedAt() < nanos(pruneBefore) {
				c.PruneBefore = pruneBefore
			}
		case in.leaseTTL > 0:
			if now.Before(hardExpiry(fromNanos(in.leaseDeadline), in.leaseTTL.D())) {
				continue // renewals and grace only move it later
			}
			// The overlay takes leaseMu under the FSM's read lock; nothing
			// takes them in the other order.
			exp := s.leaseExpiry(s.overlay(wire.Instance{Namespace: k.Namespace, Service: k.Service, ID: k.ID,
				Incarnation: in.incarnation, Lifecycle: in.lifecycle, LeaseTTL: in.leaseTTL,
				LeaseDeadline: fromNanos(in.leaseDeadline)}), since)
			if now.Before(hardExpiry(exp, in.leaseTTL.D())) {
				continue
			}
			cands = append(cands, expiryCandidate{leaseUpdate{fence: fence{k, in.incarnation}, Deadline: exp}, k.ServiceKey()})
		}
	}
	// Hard expiries are paced by each service's shrink cap: after a
	// zone's power loss, its registrations end a window at a time.
	var limited bool
	c.Expire, limited = s.paceExpiries(now, cands, maxTerminationsPerEntry)
	more = more || limited
	clear(cands)
	s.hkCands = cands[:0]
	s.fsm.mu.RUnlock()
	clear(recs) // keep no record alive past its instance
	s.hkRecs = recs[:0]
	if len(c.Leases) == 0 && len(c.Terminate) == 0 && len(c.Expire) == 0 && c.PruneBefore.IsZero() {
		if s.expiriesHeld > 0 {
			// The log's clock must show that this leader was at work
			// while it held registrations past their hard expiry: a
			// next leader's grace revives only what was live when the
			// log last moved (fsm.grace). An empty entry a tick.
			if _, err := s.propose(ctx, c); err != nil {
				return false, err
			}
		}
		s.noteHeldExpiries(ctx)
		return false, nil
	}
	// Map order is random; the log fixes the order for every replica, and
	// sorting makes the audit trail read in a stable order too.
	sortFences(c.Terminate)
	sort.Slice(c.Expire, func(i, j int) bool { return c.Expire[i].Key.String() < c.Expire[j].Key.String() })
	_, err := s.propose(ctx, c)
	if err == nil {
		s.noteHeldExpiries(ctx)
	}
	if err != nil {
		s.unpace(c.Expire)
		// Put the renewals back so that the next tick retries them.
		s.leaseMu.Lock()
		for _, l := range c.Leases {
			if cur, ok := s.leases[l.Key]; ok && cur.Incarnation == l.Incarnation {
				s.dirty[l.Key] = true
			}
		}
		s.leaseMu.Unlock()
		return false, err
	}
	// The replica now holds these deadlines: forget each renewal that no
	// newer one has replaced meanwhile, so that the leader holds only
	// what it has not replicated yet (about 130 bytes an instance
	// otherwise, for every instance that ever renewed under it).
	s.leaseMu.Lock()
	for _, l := range c.Leases {
		if cur, ok := s.leases[l.Key]; ok && cur == l && !s.dirty[l.Key] {
			delete(s.leases, l.Key)
		}
	}
	s.shrinkLeases()
	s.leaseMu.Unlock()
	return more, nil
}

// shrinkLeases replaces the maps of held renewals with smaller ones once
// they hold under a quarter of their high-water mark: a Go map keeps the
// size of its peak, and one burst (every instance renewing in the same
// second) would pin it. Maps that never held many are left alone. Called
// with leaseMu held.
func (s *Store) shrinkLeases() {
	if s.leasesPeak < minLeasesShrunk || len(s.leases) > s.leasesPeak/4 {
		return
	}
	leases := make(map[wire.InstanceKey]leaseUpdate, len(s.leases))
	for k, l := range s.leases {
		leases[k] = l
	}
	dirty := make(map[wire.InstanceKey]bool, len(s.dirty))
	for k, d := range s.dirty {
		dirty[k] = d
	}
	s.leases, s.dirty, s.leasesPeak = leases, dirty, len(leases)
}

// Handoff prepares a leader for a planned stop: it replicates pending
// renewals and hands leadership to another voter, so the cluster need not
// wait out an election timeout. On a follower it does nothing.
func (s *Store) Handoff(ctx context.Context) error {
	if !s.IsLeader() {
		return nil
	}
	// From here on this node neither takes over again nor holds renewals
	// in memory: followers forward them to whoever leads next.
	s.handingOff.Store(true)
	wasReady := s.LeaderReady()
	s.readyTerm.Store(0)
	for i := 0; wasReady && i < maxEntriesPerTick; i++ {
		more, err := s.housekeepOnce(ctx)
		if err != nil {
			return err
		}
		if !more {
			break
		}
	}
	ms, err := s.Members()
	if err != nil || len(ms) < 2 {
		return err
	}
	if err := s.raft.LeadershipTransfer().Error(); err != nil {
		return fmt.Errorf("store: transferring leadership: %w", err)
	}
	return nil
}
