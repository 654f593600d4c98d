package store

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

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
				Lifecycle: old.lifecycle, LeaseTTL: old.leaseTTL, LeaseDeadline: fromNanos(old.leaseDeadline)})
			if !now.Before(hardExpiry(in.LeaseDeadline, in.LeaseTTL.D())) {
				over := *old
				over.lifecycle = status.Terminated
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
// refuse: so that a stale incarnation, or a drain the disruption budget
// does not allow, costs no log entry and leaves the revision alone. The
// FSM checks again when the entry applies; before this leader has caught
// up (LeaderReady) the FSM alone decides.
func (s *Store) precheck(c command) error {
	if !s.LeaderReady() {
		return nil
	}
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	in, err := s.fsm.current(c.Key, c.Incarnation)
	if err != nil {
		return err
	}
	if c.Op != opDeregister && in.lifecycle == status.Terminated {
		return fmt.Errorf("instance %s is deregistered: %w", c.Key, ErrFenced)
	}
	if c.Report != nil {
		return c.Report.Validate(*s.fsm.services[c.Key.ServiceKey()])
	}
	_, err = s.fsm.disruption(c, in)
	return err
}

// Drain marks an instance draining; it is terminated after the service's
// drain window. A drain the service's disruption budget does not allow
// is refused with ErrBudget (ForceDrain overrides it).
func (s *Store) Drain(ctx context.Context, actor string, key wire.InstanceKey, inc uint64) (wire.Instance, error) {
	return s.drain(ctx, actor, key, inc, false)
}

// DrainSelf is the drain an instance asks for itself: it counts toward
// the disruption budget but is not judged against it, as an involuntary
// loss is not (the process leaves anyway).
func (s *Store) DrainSelf(ctx context.Context, actor string, key wire.InstanceKey, inc uint64) (wire.Instance, error) {
	c := command{Op: opDrain, Actor: actor, Key: key, Incarnation: inc}
	if err := s.precheck(c); err != nil {
		return wire.Instance{}, err
	}
	r, err := s.propose(ctx, c)
	return s.replyDeadline(r.Instance), err
}

func (s *Store) drain(ctx context.Context, actor string, key wire.InstanceKey, inc uint64, force bool) (wire.Instance, error) {
	c := command{Op: opDrain, Actor: actor, Key: key, Incarnation: inc, Budget: true, Evacs: true, Force: force}
	if err := s.precheck(c); err != nil {
		return wire.Instance{}, err
	}
	r, err := s.propose(ctx, c)
	return s.replyDeadline(r.Instance), err
}

// Deregister terminates an instance. The record stays as a tombstone for
// TombstoneTTL so that its incarnation stays fenced. The deregistration
// of a ready, available instance is a voluntary disruption, judged
// against the disruption budget like a drain (ForceDeregister overrides
// it).
func (s *Store) Deregister(ctx context.Context, actor string, key wire.InstanceKey, inc uint64) (wire.Instance, error) {
	return s.deregister(ctx, actor, key, inc, false)
}

func (s *Store) deregister(ctx context.Context, actor string, key wire.InstanceKey, inc uint64, force bool) (wire.Instance, error) {
	c := command{Op: opDeregister, Actor: actor, Key: key, Incarnation: inc, Budget: true, Evacs: true, Force: force}
	if err := s.precheck(c); err != nil {
		return wire.Instance{}, err
	}
	r, err := s.propose(ctx, c)
	if err == nil {
		s.forgetLease(key)
	}
	return r.Instance, err
}

// Report stores an instance's self-report.
func (s *Store) Report(ctx context.Context, actor string, key wire.InstanceKey, inc uint64, rep wire.Report) (wire.Instance, error) {
	c := command{Op: opReport, Actor: actor, Key: key, Incarnation: inc, Report: &rep}
	if err := s.precheck(c); err != nil {
		return wire.Instance{}, err
	}
	r, err := s.propose(ctx, c)
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

func timeoutOf(ctx context.Context) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		return time.Until(dl)
	}
	return 5 * time.Second
}

func sortFences(fs []fence) {
	sort.Slice(fs, func(i, j int) bool { return fs[i].Key.String() < fs[j].Key.String() })
}
