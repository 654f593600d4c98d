// Package store owns cairn's replicated desired state — service
// definitions, instances with their incarnations and leases, cluster
// membership and the audit trail — and hides raft from everything else.
//
// Writes go through raft on the leader; a follower returns ErrNotLeader and
// the API forwards the request. Lease renewals are not replicated one by
// one: the leader keeps them in memory and replicates them in batches every
// LeaseCheckpoint, and a new leader extends every lease by one TTL before it
// accepts renewals, so a leader change never expires a lease that was
// renewed on the old leader (etcd's lease-extension rule).
//
// Reads are served from the local replica and may lag the leader by the
// replication delay.
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"

	"github.com/cairn-sd/cairn/internal/pace"
	"github.com/cairn-sd/cairn/wire"
)

// logCacheEntries is how many of the newest raft log entries the leader
// keeps in memory (see Open).
const logCacheEntries = 64

// Store is the replicated store of one node. Its methods are safe for
// concurrent use.
type Store struct {
	cfg     Config
	log     *slog.Logger
	fsm     *fsm
	raft    *raft.Raft
	trans   raft.Transport
	closers []func() error
	metrics *metrics

	// readyTerm is the raft term in which this node finished taking over
	// as leader (0: not ready); see LeaderReady.
	readyTerm  atomic.Uint64
	caughtUp   atomic.Bool
	catchUpTo  atomic.Uint64 // the leader's revision when asked; 0: not asked yet
	handingOff atomic.Bool

	// hkMu serialises housekeepOnce (Run's ticks, Handoff); the records
	// buffer and the pacer are its.
	hkMu    sync.Mutex
	hkRecs  []*record
	hkSvcs  []wire.ServiceKey
	hkCands []expiryCandidate
	hkPacer *pace.Pacer
	// expiryWins paces hard expiries per service (expirypace.go), and
	// expiriesHeld is how many the last tick held back.
	expiryWins   map[wire.ServiceKey]*expiryWindow
	expiriesHeld int

	gather gatherer // self-reports' group commits

	leaseMu sync.Mutex
	leases  map[wire.InstanceKey]leaseUpdate // renewals held by the leader, until replicated
	dirty   map[wire.InstanceKey]bool        // renewals not yet replicated
	// leasesPeak is the most renewals leases has held since it was last
	// made (see shrinkLeases).
	leasesPeak int

	// withdrawals feeds the entries' withdrawals to the table's builder
	// (Withdrawn, TakeWithdrawals).
	withdrawals withdrawalFeed

	closeOnce sync.Once
	closeErr  error
}

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

// Open starts raft for cfg and returns the node's store. A node with
// Bootstrap set and no existing state forms a one-node cluster. Close
// stops raft; Run drives the leader's housekeeping.
func Open(cfg Config) (*Store, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg, log: cfg.Logger.With("component", "store"), fsm: newFSM(),
		leases: map[wire.InstanceKey]leaseUpdate{}, dirty: map[wire.InstanceKey]bool{}}
	s.hkPacer = pace.New(pace.DefaultSlice, pace.DefaultPause, cfg.Now)
	s.metrics = newMetrics(cfg.Registerer, s)
	s.fsm.onRegister = s.metrics.registrations.Inc
	s.withdrawals.ch = make(chan struct{}, 1)
	s.fsm.onWithdraw = s.noteWithdrawals
	s.fsm.onExpire = func(n int) { s.metrics.hardExpiries.Add(float64(n)) }

	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(cfg.NodeID)
	rc.HeartbeatTimeout = cfg.HeartbeatTimeout
	rc.ElectionTimeout = cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = cfg.LeaderLease
	// A buffered apply queue, so that a group of self-reports enters it
	// at once and shares one commit (gather.go). raft checks an Apply's
	// timeout only while the entry waits to enter the queue, so an entry
	// may now sit in it past that timeout; the leader loop empties the
	// queue at every commit.
	rc.BatchApplyCh = true
	rc.MaxAppendEntries = gatherMax
	if cfg.SnapshotThreshold > 0 {
		rc.SnapshotThreshold = cfg.SnapshotThreshold
	}
	// One logger for raft, its transport and its snapshot store: their
	// records reach the server's handler as records (component=raft), at
	// the server's level.
	rc.Logger = newRaftLogger(cfg.Logger, "raft", nil)

	var (
		logs   raft.LogStore
		stable raft.StableStore
		snaps  raft.SnapshotStore
	)
	if cfg.DataDir == "" {
		mem := raft.NewInmemStore()
		logs, stable, snaps = mem, mem, raft.NewInmemSnapshotStore()
	} else {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			return nil, fmt.Errorf("store: creating data dir %q: %w", cfg.DataDir, err)
		}
		bolt, err := raftboltdb.New(raftboltdb.Options{Path: filepath.Join(cfg.DataDir, "raft.db")})
		if err != nil {
			return nil, fmt.Errorf("store: opening raft log %q: %w", filepath.Join(cfg.DataDir, "raft.db"), err)
		}
		s.closers = append(s.closers, bolt.Close)
		// The cache spares the leader reads from bolt when it sends
		// followers what they have just missed; they are seldom more
		// than a few entries behind, and anything older is read from
		// bolt. It holds each entry's bytes, and an evaluator's or a
		// checkpoint's entry carries up to 4,096 updates (about 1.6 MB):
		// 512 entries could pin hundreds of megabytes after a burst.
		cache, err := raft.NewLogCache(logCacheEntries, bolt)
		if err != nil {
			bolt.Close()
			return nil, fmt.Errorf("store: raft log cache: %w", err)
		}
		logs, stable = cache, bolt
		fss, err := raft.NewFileSnapshotStoreWithLogger(cfg.DataDir, 2, rc.Logger)
		if err != nil {
			bolt.Close()
			return nil, fmt.Errorf("store: opening snapshots in %q: %w", cfg.DataDir, err)
		}
		snaps = fss
	}

	trans := cfg.Transport
	if trans == nil {
		addr, err := net.ResolveTCPAddr("tcp", cfg.RaftAddr)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("store: raft address %q: %w", cfg.RaftAddr, err)
		}
		if addr.IP == nil || addr.IP.IsUnspecified() {
			s.close()
			return nil, fmt.Errorf("store: raft address %q must name the host peers reach it on", cfg.RaftAddr)
		}
		var tt *raft.NetworkTransport
		if cfg.RaftTLS != nil {
			var stream *tlsStream
			stream, err = newTLSStream(cfg.RaftAddr, addr, cfg.RaftTLS)
			if err == nil {
				tt = raft.NewNetworkTransportWithLogger(stream, 3, 5*time.Second, rc.Logger)
			}
		} else {
			tt, err = raft.NewTCPTransportWithLogger(cfg.RaftAddr, addr, 3, 5*time.Second, rc.Logger)
		}
		if err != nil {
			s.close()
			return nil, fmt.Errorf("store: listening for raft on %q: %w", cfg.RaftAddr, err)
		}
		trans = tt
		s.closers = append(s.closers, tt.Close)
	}
	s.trans = trans

	if cfg.Bootstrap {
		has, err := raft.HasExistingState(logs, stable, snaps)
		if err != nil {
			s.close()
			return nil, fmt.Errorf("store: reading existing state: %w", err)
		}
		if !has {
			boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: trans.LocalAddr()}}}
			if err := raft.BootstrapCluster(rc, logs, stable, snaps, trans, boot); err != nil {
				s.close()
				return nil, fmt.Errorf("store: bootstrapping: %w", err)
			}
		}
	}
	r, err := raft.NewRaft(rc, s.fsm, logs, stable, snaps, trans)
	if err != nil {
		s.close()
		return nil, fmt.Errorf("store: starting raft: %w", err)
	}
	s.raft = r
	s.gather.apply = r.Apply
	s.gather.wait = func() { time.Sleep(gatherWindow) }
	return s, nil
}

// close runs the closers in reverse order.
func (s *Store) close() error {
	var errs []error
	for i := len(s.closers) - 1; i >= 0; i-- {
		errs = append(errs, s.closers[i]())
	}
	return errors.Join(errs...)
}

// Close shuts raft down and closes the log. It is safe to call twice.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.readyTerm.Store(0)
		var errs []error
		if s.raft != nil {
			errs = append(errs, s.raft.Shutdown().Error())
		}
		errs = append(errs, s.close())
		s.closeErr = errors.Join(errs...)
	})
	return s.closeErr
}

// NodeID returns this node's id.
func (s *Store) NodeID() string { return s.cfg.NodeID }

// RaftAddr returns the address raft advertises.
func (s *Store) RaftAddr() string { return string(s.trans.LocalAddr()) }

// IsLeader reports whether raft says this node is the leader. Writes may
// still fail until LeaderReady.
func (s *Store) IsLeader() bool { return s.raft.State() == raft.Leader }

// State returns the raft state: Leader, Follower, Candidate or Shutdown.
func (s *Store) State() string { return s.raft.State().String() }

// LastContact returns when this node last heard from a leader; the zero
// time before it ever has. On the leader it is now.
func (s *Store) LastContact() time.Time {
	if s.IsLeader() {
		return s.cfg.Now()
	}
	return s.raft.LastContact()
}

// CaughtUp reports whether this node's replica has, at least once since
// it started, applied everything the leader had applied when asked (on
// the leader: taken over). Followers ask through Config.LeaderRevision,
// in Run; without it (a store in tests) a follower counts as caught up
// once it has heard from a leader. It latches: a node that later loses
// its leader keeps serving what it has, marked stale by its readers.
func (s *Store) CaughtUp() bool {
	if s.caughtUp.Load() {
		return true
	}
	target := s.catchUpTo.Load()
	heard := s.cfg.LeaderRevision == nil && !s.IsLeader() && !s.raft.LastContact().IsZero()
	if s.LeaderReady() || target > 0 && s.Revision() >= target || heard {
		s.caughtUp.Store(true)
		return true
	}
	return false
}

// checkCaughtUp asks the leader for its revision once, then CaughtUp
// latches when the local replica has applied as much. (Asking again each
// time would chase a leader that keeps writing.)
func (s *Store) checkCaughtUp(ctx context.Context) {
	if s.CaughtUp() || s.catchUpTo.Load() > 0 || s.cfg.LeaderRevision == nil {
		return
	}
	lid, addr := s.Leader()
	if lid == "" || addr == "" || lid == s.cfg.NodeID {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.LeaseCheckpoint)
	defer cancel()
	rev, err := s.cfg.LeaderRevision(ctx, addr)
	if err != nil {
		s.log.Debug("asking the leader for its revision", "leader", lid, "err", err)
		return
	}
	s.catchUpTo.Store(max(rev, 1))
	s.log.Info("catching up with the leader", "leader", lid, "leader_revision", rev, "revision", s.Revision())
}

// Leader returns the leader's id and HTTP address as recorded in the
// membership; empty strings when no leader is known.
func (s *Store) Leader() (id, httpAddr string) {
	_, lid := s.raft.LeaderWithID()
	if lid == "" {
		return "", ""
	}
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	return string(lid), s.fsm.members[string(lid)].HTTPAddr
}

// Revision returns the revision of the local replica: the raft index of the
// last applied entry. It only grows.
func (s *Store) Revision() uint64 {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	return s.fsm.rev
}

// WaitLeader blocks until some node is leader, or ctx is done.
func (s *Store) WaitLeader(ctx context.Context) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if addr, _ := s.raft.LeaderWithID(); addr != "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("store: waiting for a leader: %w", ctx.Err())
		case <-t.C:
		}
	}
}

func (s *Store) now() time.Time { return s.cfg.Now().UTC().Round(0) }

// propose replicates c and returns the FSM's result. It checks both of
// raft's error paths: the future's Error and the FSM's Response.
func (s *Store) propose(ctx context.Context, c command) (result, error) {
	if s.raft.State() == raft.Shutdown {
		return result{}, ErrClosed
	}
	if s.raft.State() != raft.Leader {
		return result{}, s.notLeader()
	}
	if c.At.IsZero() {
		c.At = s.now()
	}
	b, err := encodeCommand(c)
	if err != nil {
		return result{}, fmt.Errorf("store: encoding %s command: %w", c.Op, err)
	}
	timeout := 5 * time.Second
	if dl, ok := ctx.Deadline(); ok {
		timeout = time.Until(dl)
	}
	start := time.Now()
	var f raft.ApplyFuture
	if c.Op == opReport {
		f = s.gather.add(b, timeout) // see gatherWindow
	} else {
		f = s.raft.Apply(b, timeout)
	}
	if err := f.Error(); err != nil {
		return result{}, fmt.Errorf("store: applying %s: %w", c.Op, s.raftErr(err))
	}
	s.metrics.applyDuration.Observe(time.Since(start).Seconds())
	r, ok := f.Response().(result)
	if !ok {
		return result{}, fmt.Errorf("store: unexpected response %T", f.Response())
	}
	return r, r.Err
}

// raftErr translates raft's errors into the store's sentinels.
func (s *Store) raftErr(err error) error {
	switch {
	case errors.Is(err, raft.ErrNotLeader), errors.Is(err, raft.ErrLeadershipTransferInProgress):
		return s.notLeader()
	case errors.Is(err, raft.ErrLeadershipLost):
		// The entry may or may not commit; every write is idempotent, so
		// the caller retries.
		return fmt.Errorf("leadership lost while committing; retry: %w", ErrNoLeader)
	case errors.Is(err, raft.ErrRaftShutdown):
		return ErrClosed
	case errors.Is(err, raft.ErrEnqueueTimeout):
		return fmt.Errorf("commit timed out: %w", ErrNoLeader)
	}
	return err
}

func (s *Store) notLeader() error {
	if addr, _ := s.raft.LeaderWithID(); addr == "" {
		return ErrNoLeader
	}
	return ErrNotLeader
}

// ApplyServices validates and stores service definitions, all or none,
// and returns the revision they were committed at.
func (s *Store) ApplyServices(ctx context.Context, actor string, svcs []wire.Service) (uint64, error) {
	if len(svcs) == 0 {
		return 0, invalid("services", "at least one service definition is required")
	}
	seen := map[wire.ServiceKey]bool{}
	for i := range svcs {
		svcs[i] = svcs[i].WithDefaults()
		svcs[i].Revision = 0
		if err := svcs[i].Validate(); err != nil {
			return 0, fmt.Errorf("document %d: %w", i+1, err)
		}
		if seen[svcs[i].Key()] {
			return 0, fmt.Errorf("document %d: %w", i+1, invalid("name", "%s is defined twice", svcs[i].Key()))
		}
		seen[svcs[i].Key()] = true
	}
	r, err := s.propose(ctx, command{Op: opApply, Actor: actor, Services: svcs})
	return r.Rev, err
}

// Register registers an instance. It returns the committed record and
// whether a new incarnation was created: an identical retry of a live
// registration returns the committed one. A registration that would
// replace a record it does not name (see Registration.Replaces) is
// refused with ErrFenced and changes nothing.
func (s *Store) Register(ctx context.Context, actor string, reg wire.Registration) (wire.Instance, bool, error) {
	// A ready leader refuses bad input without a log entry; before it has
	// caught up, its replica may lack the service, and the FSM decides.
	if s.LeaderReady() {
		svc, ok := s.Service(reg.Namespace, reg.Service)
		if !ok {
			return wire.Instance{}, false, fmt.Errorf("service %s/%s is not defined; apply its definition first: %w", reg.Namespace, reg.Service, ErrNotFound)
		}
		// Check a copy: the log carries the request as sent, so that the
		// FSM knows which fields took their defaults.
		check := reg
		check.Addresses = slices.Clone(reg.Addresses)
		check.Ports = maps.Clone(reg.Ports)
		if err := check.Normalize(svc); err != nil {
			return wire.Instance{}, false, err
		}
		now := s.now()
		s.fsm.mu.RLock()
		old := s.fsm.instances.get(reg.Key())
		if overAt(old, now) {
			// Past its hard expiry, as the FSM will judge it (unless a
			// renewal this leader holds says otherwise): the FSM ends it
			// and starts a new incarnation.
			k := old.key()
			in := s.overlay(wire.Instance{Namespace: k.Namespace, Service: k.Service, ID: k.ID, Incarnation: old.incarnation,
				Lifecycle: old.lifecycle.wire(), LeaseTTL: old.leaseTTL, LeaseDeadline: fromNanos(old.leaseDeadline)})
			if !now.Before(hardExpiry(in.LeaseDeadline, in.LeaseTTL.D())) {
				over := *old
				over.lifecycle = lcTerminated
				old = &over
			}
		}
		err := fenceRegistration(old, check, reg.LeaseTTL == 0)
		s.fsm.mu.RUnlock()
		if err != nil {
			return wire.Instance{}, false, err
		}
	}
	r, err := s.propose(ctx, command{Op: opRegister, Actor: actor, Key: reg.Key(), Register: &reg})
	if err != nil {
		return wire.Instance{}, false, err
	}
	s.forgetLease(r.Instance.Key())
	return r.Instance, r.Created, nil
}

// precheck refuses, before anything is proposed, a mutation the FSM would
// refuse: so that a stale incarnation costs no log entry and leaves the
// revision alone. The FSM checks again when the entry applies; before this
// leader has caught up (LeaderReady) the FSM alone decides.
func (s *Store) precheck(op opcode, key wire.InstanceKey, inc uint64, rep *wire.Report) error {
	if !s.LeaderReady() {
		return nil
	}
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	in, err := s.fsm.current(key, inc)
	if err != nil {
		return err
	}
	if op != opDeregister && in.lifecycle == lcTerminated {
		return fmt.Errorf("instance %s is deregistered: %w", key, ErrFenced)
	}
	if rep != nil {
		return rep.Validate(*s.fsm.services[key.ServiceKey()])
	}
	return nil
}

// Drain marks an instance draining; it is terminated after the service's
// drain window.
func (s *Store) Drain(ctx context.Context, actor string, key wire.InstanceKey, inc uint64) (wire.Instance, error) {
	if err := s.precheck(opDrain, key, inc, nil); err != nil {
		return wire.Instance{}, err
	}
	r, err := s.propose(ctx, command{Op: opDrain, Actor: actor, Key: key, Incarnation: inc})
	return s.replyDeadline(r.Instance), err
}

// Deregister terminates an instance. The record stays as a tombstone for
// TombstoneTTL so that its incarnation stays fenced.
func (s *Store) Deregister(ctx context.Context, actor string, key wire.InstanceKey, inc uint64) (wire.Instance, error) {
	if err := s.precheck(opDeregister, key, inc, nil); err != nil {
		return wire.Instance{}, err
	}
	r, err := s.propose(ctx, command{Op: opDeregister, Actor: actor, Key: key, Incarnation: inc})
	if err == nil {
		s.forgetLease(key)
	}
	return r.Instance, err
}

// Report stores an instance's self-report.
func (s *Store) Report(ctx context.Context, actor string, key wire.InstanceKey, inc uint64, rep wire.Report) (wire.Instance, error) {
	if err := s.precheck(opReport, key, inc, &rep); err != nil {
		return wire.Instance{}, err
	}
	r, err := s.propose(ctx, command{Op: opReport, Actor: actor, Key: key, Incarnation: inc, Report: &rep})
	return s.replyDeadline(r.Instance), err
}

// Audit appends an event to the replicated audit trail (refusals, say).
func (s *Store) Audit(ctx context.Context, e wire.Event) error {
	if e.At.IsZero() {
		e.At = s.now()
	}
	_, err := s.propose(ctx, command{Op: opAudit, At: e.At, Actor: e.Actor, Event: &e})
	return err
}

// Services returns every service definition, sorted by key.
func (s *Store) Services() []wire.Service {
	s.fsm.mu.RLock()
	out := make([]wire.Service, 0, len(s.fsm.services))
	for _, svc := range s.fsm.services {
		out = append(out, *svc)
	}
	s.fsm.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Key().String() < out[j].Key().String() })
	return out
}

// Service returns one service definition.
func (s *Store) Service(ns, name string) (wire.Service, bool) {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	svc, ok := s.fsm.services[wire.ServiceKey{Namespace: ns, Name: name}]
	if !ok {
		return wire.Service{}, false
	}
	return *svc, true
}

// Instances returns the instances of a service, terminated ones included,
// sorted by id. On the leader, lease deadlines include renewals not yet
// replicated. The instances share their Addresses, Ports,
// RetiredRegistrationIDs, Report and their Health's lists and evidence
// with the store's records, which the store never modifies in place:
// callers must not modify them either.
func (s *Store) Instances(ns, svc string) []wire.Instance {
	s.fsm.mu.RLock()
	recs := listRecords(&s.fsm.instances, &wire.ServiceKey{Namespace: ns, Name: svc})
	s.fsm.mu.RUnlock()
	sortRecords(recs)
	out := views(recs)
	for i := range out {
		out[i] = s.overlay(out[i])
	}
	return out
}

// AllInstances returns every instance of every service, terminated ones
// included, sorted by key. Like Instances', their slices, maps and
// pointers are the store's, and read-only.
func (s *Store) AllInstances() []wire.Instance {
	s.fsm.mu.RLock()
	recs := listRecords(&s.fsm.instances, nil)
	s.fsm.mu.RUnlock()
	sortRecords(recs)
	return views(recs)
}

// Entry is what EachInstance shows of one instance: the fields a reader
// of every instance needs, without the cost of a wire.Instance. Its
// slices, maps and pointers are the replica's, read-only as those of
// Instances' copies are, and may be kept.
type Entry struct {
	Key          wire.InstanceKey
	Incarnation  uint64
	Lifecycle    wire.Lifecycle
	Region, Zone string
	Addresses    []string
	Ports        map[string]int
	Weight       int
	LeaseTTL     wire.Duration
	// LeaseDeadline and RegisteredAt are unix nanoseconds in the
	// replica's record (the leader's unreplicated renewals not applied).
	LeaseDeadline, RegisteredAt int64
	Report                      *wire.SelfReport
	// Verdict is the last committed verdict, nil before the first.
	Verdict *Verdict
}

// EachInstance calls fn with every instance, terminated ones included,
// in no particular order, holding the replica's read lock: fn must be
// quick and must not call the Store. It spares a caller that needs a few
// fields of every instance the views AllInstances makes.
func (s *Store) EachInstance(fn func(Entry)) {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	for in := range s.fsm.instances.all {
		fn(Entry{Key: in.key(), Incarnation: in.incarnation, Lifecycle: in.lifecycle.wire(),
			Region: in.origin.region, Zone: in.origin.zone, Addresses: in.addresses, Ports: in.ports,
			Weight: int(in.weight), LeaseTTL: in.leaseTTL, LeaseDeadline: in.leaseDeadline,
			RegisteredAt: in.registeredAt, Report: in.report(), Verdict: in.verdict})
	}
}

// Instance returns one instance, a copy of its own.
func (s *Store) Instance(key wire.InstanceKey) (wire.Instance, bool) {
	s.fsm.mu.RLock()
	in := s.fsm.instances.get(key)
	var out wire.Instance
	if in != nil {
		out = cloneInstance(in.view())
	}
	s.fsm.mu.RUnlock()
	return s.overlay(out), in != nil
}

// Events returns up to limit audit events of one service, newest last. An
// empty ns returns every service's.
func (s *Store) Events(ns, svc string, limit int) []wire.Event {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	// Walk both rings from the newest, merging by sequence number.
	var out []wire.Event
	ev, rf := &s.fsm.events, &s.fsm.refusals
	i, j := ev.len()-1, rf.len()-1
	for (i >= 0 || j >= 0) && (limit <= 0 || len(out) < limit) {
		var e wire.Event
		if j < 0 || i >= 0 && ev.at(i).Seq > rf.at(j).Seq {
			e, i = ev.at(i), i-1
		} else {
			e, j = rf.at(j), j-1
		}
		if ns == "" || e.Namespace == ns && e.Service == svc {
			out = append(out, e)
		}
	}
	slices.Reverse(out)
	return out
}

// Members returns the servers of the raft configuration with the
// addresses recorded for them.
func (s *Store) Members() ([]wire.Member, error) {
	f := s.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("store: reading raft configuration: %w", err)
	}
	_, lid := s.raft.LeaderWithID()
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	var out []wire.Member
	for _, srv := range f.Configuration().Servers {
		m := s.fsm.members[string(srv.ID)]
		m.NodeID = string(srv.ID)
		m.RaftAddr = string(srv.Address)
		m.Voter = srv.Suffrage == raft.Voter
		m.Leader = srv.ID == lid
		out = append(out, m)
	}
	return out, nil
}

// Join adds m as a voter (or updates its address) and records its HTTP
// address. Only the leader can.
func (s *Store) Join(ctx context.Context, actor string, m wire.Member) error {
	if err := wire.CheckLabel("node_id", m.NodeID); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(m.RaftAddr); err != nil {
		return invalid("raft_addr", "%q is not host:port", m.RaftAddr)
	}
	if _, _, err := net.SplitHostPort(m.HTTPAddr); err != nil {
		return invalid("http_addr", "%q is not host:port", m.HTTPAddr)
	}
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	if err := s.raft.AddVoter(raft.ServerID(m.NodeID), raft.ServerAddress(m.RaftAddr), 0, timeoutOf(ctx)).Error(); err != nil {
		return fmt.Errorf("store: adding voter %q: %w", m.NodeID, s.raftErr(err))
	}
	_, err := s.propose(ctx, command{Op: opSetMember, Actor: actor, Member: &m})
	return err
}

// Leave removes a server from the cluster.
func (s *Store) Leave(ctx context.Context, actor, nodeID string) error {
	if s.raft.State() != raft.Leader {
		return s.notLeader()
	}
	ms, err := s.Members()
	if err != nil {
		return err
	}
	found := false
	for _, m := range ms {
		found = found || m.NodeID == nodeID
	}
	if !found {
		// Already gone: a retried leave succeeds, as it did the first time.
		return nil
	}
	del := func() error {
		_, err := s.propose(ctx, command{Op: opDelMember, Actor: actor, Member: &wire.Member{NodeID: nodeID}})
		return err
	}
	// A leader that removes itself can commit nothing afterwards, so it
	// forgets its address first; for any other node the address goes only
	// once the node is out, so a failed removal leaves it reachable.
	if nodeID == s.cfg.NodeID {
		if err := del(); err != nil {
			return err
		}
	}
	if err := s.raft.RemoveServer(raft.ServerID(nodeID), 0, timeoutOf(ctx)).Error(); err != nil {
		return fmt.Errorf("store: removing %q: %w", nodeID, s.raftErr(err))
	}
	if nodeID != s.cfg.NodeID {
		return del()
	}
	return nil
}

// PutTokens stores tokens (digests, never secrets); a token already
// stored with the same grant is left as it is.
func (s *Store) PutTokens(ctx context.Context, actor string, toks []TokenRecord) error {
	for i, t := range toks {
		if err := t.validate(); err != nil {
			return fmt.Errorf("tokens[%d]: %w", i, err)
		}
	}
	_, err := s.propose(ctx, command{Op: opPutTokens, Actor: actor, Tokens: toks})
	return err
}

// DeleteToken removes the token with the given accessor.
func (s *Store) DeleteToken(ctx context.Context, actor, accessor string) error {
	s.fsm.mu.RLock()
	_, ok := s.fsm.tokens[accessor]
	s.fsm.mu.RUnlock()
	if !ok && s.LeaderReady() {
		return fmt.Errorf("token %q is not stored (tokens of ACL files live in the files): %w", accessor, ErrNotFound)
	}
	_, err := s.propose(ctx, command{Op: opDelToken, Actor: actor, Accessor: accessor})
	return err
}

// Tokens returns the stored tokens, sorted by accessor, and the revision
// of their last change (to rebuild an authorizer only when they change).
func (s *Store) Tokens() ([]TokenRecord, uint64) {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	out := make([]TokenRecord, 0, len(s.fsm.tokens))
	for _, t := range s.fsm.tokens {
		t.Namespaces = slices.Clone(t.Namespaces)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Accessor < out[j].Accessor })
	return out, s.fsm.tokenRev
}

// TokenRevision returns the revision of the last token change.
func (s *Store) TokenRevision() uint64 {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	return s.fsm.tokenRev
}

// Snapshot forces a raft snapshot (tests and operators).
func (s *Store) Snapshot() error { return s.raft.Snapshot().Error() }

func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return 5 * time.Second
}

func sortFences(fs []fence) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].Key.String() < fs[j].Key.String() })
}
