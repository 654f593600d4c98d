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
//
// Imports: raft and bolt (it is the only package that does), the wire
// types it stores and status's vocabulary they use (verdicts,
// lifecycles, flags), and two helpers (the label rule, the pacing of
// long work); no other cairn package (cmd/deps_test.go).
//
// Threading: every method is safe for concurrent use. The FSM's state is
// behind one RWMutex, written only by raft's apply goroutine; reads take
// the read lock and copy what they return. Open starts raft's goroutines;
// Run (lease.go) is the store's own loop on every node — lease
// checkpoints, expiries and the takeover on the leader, caught-up
// tracking everywhere, and, on a goroutine it owns, a follower's
// replication (replication.go) — and returns when its ctx ends; Close
// stops raft and closes the files.
//
// Files: store.go (open, close, raft state), write.go (every proposal),
// read.go (queries of the replica), fsm.go and register.go (applying
// commands), lease.go and fsmlease.go (leases and their grace),
// snapshot.go (snapshots and restore), audit.go (the event rings),
// withdrawals.go (the feed of withdrawals for fast publication),
// membership.go, tokens.go, record.go and intern.go (the compact
// in-memory form), raftlog.go (raft's logs into slog), replication.go (how
// current a follower's replica is).
package store

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
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
	// repl is how current a follower's replica is (replication.go).
	repl replication

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
	// shifts is signalled (capacity 1) after an applied entry moved an
	// evacuation (Shifted).
	shifts chan struct{}
	// evacScans are the leader's scans of returning evacuations' scopes
	// (scanEvacuation), by id; only the housekeeping goroutine uses them.
	evacScans map[uint64]evacScan

	closeOnce sync.Once
	closeErr  error
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
	s.shifts = make(chan struct{}, 1)
	s.evacScans = map[uint64]evacScan{}
	s.fsm.onShift = func() {
		select {
		case s.shifts <- struct{}{}:
		default:
		}
	}
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
		// A raft address given as a host name is advertised as written:
		// peers resolve it at every dial, so a server whose address
		// changes under a stable name (a Kubernetes StatefulSet's pod
		// after a restart) is still reached, where the address it had
		// when it joined would be dead.
		var adv net.Addr = addr
		if host, port, _ := net.SplitHostPort(cfg.RaftAddr); net.ParseIP(host) == nil && port != "0" {
			adv = nameAddr(cfg.RaftAddr)
		}
		var tt *raft.NetworkTransport
		switch {
		case cfg.RaftTLS != nil:
			var stream *tlsStream
			stream, err = newTLSStream(cfg.RaftAddr, adv, cfg.RaftTLS)
			if err == nil {
				tt = raft.NewNetworkTransportWithLogger(stream, 3, 5*time.Second, rc.Logger)
			}
		case adv != addr:
			var ln net.Listener
			if ln, err = net.Listen("tcp", cfg.RaftAddr); err == nil {
				tt = raft.NewNetworkTransportWithLogger(&plainStream{Listener: ln, advertise: adv}, 3, 5*time.Second, rc.Logger)
			}
		default:
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

// LastContact returns how current this node's replica is: on a follower,
// the older of when it last heard from a leader and when it last knew its
// replica had applied what the leader had (replication.go: heartbeats
// alone do not tell a follower whose log cannot take the leader's
// entries); the zero time before it ever heard from a leader. On the
// leader it is now.
func (s *Store) LastContact() time.Time {
	if s.IsLeader() {
		return s.cfg.Now()
	}
	c := s.raft.LastContact()
	if c.IsZero() {
		return c
	}
	if r, ok := s.repl.replicatedAt(); ok && r.Before(c) {
		return r
	}
	return c
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

// Snapshot forces a raft snapshot (tests and operators).
func (s *Store) Snapshot() error { return s.raft.Snapshot().Error() }
