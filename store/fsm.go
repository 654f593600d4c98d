package store

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cairn-sd/cairn/wire"
	"github.com/hashicorp/raft"
)

// AuditCapacity is how many audit events the store keeps, and
// RefusalCapacity how many refusals, in a ring of their own so that a
// token hammering calls it may not make cannot push the history out.
// They are constants, not settings, so that every replica keeps exactly
// the same trail.
const (
	AuditCapacity   = 10000
	RefusalCapacity = 1000
)

// maxRetiredIDs is how many replaced registration ids an instance keeps.
const maxRetiredIDs = 8

type opcode string

const (
	opApply      opcode = "apply"
	opRegister   opcode = "register"
	opDrain      opcode = "drain"
	opDeregister opcode = "deregister"
	opReport     opcode = "report"
	opHousekeep  opcode = "housekeep"
	opSetMember  opcode = "set_member"
	opDelMember  opcode = "del_member"
	opAudit      opcode = "audit"
	opLeader     opcode = "leader"
	opPutTokens  opcode = "put_tokens"
	opDelToken   opcode = "del_token"
	opHealth     opcode = "health"
)

// command is one entry of the raft log. Everything Apply needs travels in
// it, the time included, so that every replica computes the same state.
type command struct {
	Op          opcode             `json:"op"`
	At          time.Time          `json:"at"`
	Actor       string             `json:"actor,omitempty"`
	Key         wire.InstanceKey   `json:"key,omitzero"`
	Incarnation uint64             `json:"incarnation,omitempty"`
	Services    []wire.Service     `json:"services,omitempty"`
	Register    *wire.Registration `json:"register,omitempty"`
	Report      *wire.Report       `json:"report,omitempty"`
	Leases      []leaseUpdate      `json:"leases,omitempty"`
	Terminate   []fence            `json:"terminate,omitempty"`
	// Expire terminates leases past their hard expiry; each carries when
	// the lease ran out as the leader judged it (Store.LeaseExpiry), so
	// that a renewal applied in between wins.
	Expire      []leaseUpdate `json:"expire,omitempty"`
	PruneBefore time.Time     `json:"prune_before,omitzero"`
	// SilentSince, on opLeader, is the time of the last entry of an
	// earlier term the new leader's replica held when it took over: the
	// last moment the log shows a leader at work. From then until the
	// takeover no lease could be renewed. Only with Grace.
	SilentSince time.Time `json:"silent_since,omitzero"`
	// Grace, on opLeader, makes every lease that was live at SilentSince
	// (not past its hard expiry) run at least one TTL from the takeover,
	// its recorded deadline rewritten. Entries written before it carry
	// none, and replay as they were applied.
	Grace    bool          `json:"grace,omitempty"`
	Member   *wire.Member  `json:"member,omitempty"`
	Event    *wire.Event   `json:"event,omitempty"`
	Tokens   []TokenRecord `json:"tokens,omitempty"`
	Accessor string        `json:"accessor,omitempty"`
	// Health and ServiceEvents are the evaluator's commits.
	Health        []HealthUpdate `json:"health,omitempty"`
	ServiceEvents []ServiceEvent `json:"service_events,omitempty"`
}

// fence names one incarnation of an instance.
type fence struct {
	Key         wire.InstanceKey `json:"key"`
	Incarnation uint64           `json:"incarnation"`
}

type leaseUpdate struct {
	fence
	Deadline time.Time `json:"deadline"`
}

// result is what Apply returns through raft's ApplyFuture.Response.
type result struct {
	Instance wire.Instance
	Created  bool
	Expired  int // registrations a housekeeping entry ended at their hard expiry
	Rev      uint64
	Err      error
}

// fsm is the replicated state machine. Apply, Snapshot and Restore are
// called by raft from one goroutine; readers call the exported read methods
// concurrently, so all state sits behind mu.
type fsm struct {
	mu        sync.RWMutex
	rev       uint64
	nextInc   uint64
	eventSeq  uint64
	services  map[wire.ServiceKey]*wire.Service
	instances index
	members   map[string]wire.Member
	tokens    map[string]TokenRecord // by accessor
	tokenRev  uint64                 // index of the last token change
	// leaderSince is when the current leader took over.
	leaderSince time.Time
	events      ring // at most AuditCapacity
	refusals    ring // at most RefusalCapacity

	// The log's clock, for a new leader's takeover entry (silentSince);
	// not part of the replicated state (a restore estimates it). logTime
	// is the latest time a command entry carries, logTerm the raft term
	// of the last one, and prevTermTime the latest time of the entries of
	// terms before logTerm.
	logTime, prevTermTime time.Time
	logTerm               uint64

	// These share what many records repeat (see intern.go and
	// record.go): strings, service keys, per service the ports map of its
	// last instance, origins and verdict heads (headKey is the buffer
	// their keys are made in).
	strs    interner
	keys    map[wire.ServiceKey]*wire.ServiceKey
	ports   map[wire.ServiceKey]map[string]int
	origins map[origin]*origin
	heads   map[string]*verdictHead
	headKey []byte

	// withdrawn collects, during one Apply, the instances it took out of
	// rotation; onWithdraw, if set, gets them at the end of the Apply,
	// under f.mu: it must only queue them.
	withdrawn  []Withdrawal
	onWithdraw func(rev uint64, ws []Withdrawal)

	// onRegister is called, under no lock, after a registration created a
	// new incarnation, and onExpire with the number of registrations an
	// entry ended at their hard expiry. Used for metrics; may be nil.
	onRegister func()
	onExpire   func(n int)
}

func newFSM() *fsm {
	return &fsm{
		services:  map[wire.ServiceKey]*wire.Service{},
		instances: newIndex(),
		members:   map[string]wire.Member{},
		tokens:    map[string]TokenRecord{},
		events:    newRing(AuditCapacity),
		refusals:  newRing(RefusalCapacity),
		keys:      map[wire.ServiceKey]*wire.ServiceKey{},
		ports:     map[wire.ServiceKey]map[string]int{},
	}
}

// Apply implements raft.FSM.
func (f *fsm) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	c, err := decodeCommand(l.Data)
	if err != nil {
		// A log entry this version cannot read: refuse it the same way on
		// every replica rather than crash.
		return result{Err: fmt.Errorf("store: decoding log entry %d: %w", l.Index, err)}
	}
	f.mu.Lock()
	if l.Term > f.logTerm {
		f.prevTermTime, f.logTerm = f.logTime, l.Term
	}
	r := f.apply(l.Index, c)
	if ws := f.withdrawn; len(ws) > 0 && f.onWithdraw != nil {
		// Under the lock, so that a reader that sees this revision finds
		// its withdrawals already fed (onWithdraw only queues them).
		for i := range ws {
			ws[i].Rev = l.Index
		}
		f.onWithdraw(l.Index, ws)
	}
	f.withdrawn = nil
	f.mu.Unlock()
	if r.Created && f.onRegister != nil {
		f.onRegister()
	}
	if r.Expired > 0 && f.onExpire != nil {
		f.onExpire(r.Expired)
	}
	return r
}

func (f *fsm) apply(index uint64, c command) result {
	f.rev = index
	if c.At.After(f.logTime) {
		f.logTime = c.At
	}
	r := result{Rev: index}
	switch c.Op {
	case opApply:
		r.Err = f.applyServices(index, c)
	case opRegister:
		r.Instance, r.Created, r.Err = f.register(index, c)
	case opDrain, opDeregister, opReport:
		r.Instance, r.Err = f.mutate(c)
	case opHousekeep:
		r.Expired = f.housekeep(c)
	case opSetMember:
		if c.Member != nil {
			m := *c.Member
			m.Leader, m.Voter = false, false
			f.members[m.NodeID] = m
		}
	case opDelMember:
		if c.Member != nil {
			delete(f.members, c.Member.NodeID)
		}
	case opAudit:
		if c.Event != nil {
			f.record(*c.Event)
		}
	case opLeader:
		f.leaderSince = c.At
		if c.Grace {
			f.grace(c.At, c.SilentSince)
		}
	case opHealth:
		f.commitHealth(c)
	case opPutTokens:
		r.Err = f.putTokens(index, c)
	case opDelToken:
		t, ok := f.tokens[c.Accessor]
		if !ok {
			r.Err = fmt.Errorf("token %q is not stored (tokens of ACL files live in the files): %w", c.Accessor, ErrNotFound)
			break
		}
		delete(f.tokens, c.Accessor)
		f.tokenRev = index
		f.record(wire.Event{At: c.At, Kind: wire.EventTokenDeleted, Reason: fmt.Sprintf("%s token %s", t.Scope, t.Accessor), Actor: c.Actor})
	default:
		r.Err = fmt.Errorf("store: unknown operation %q in log entry %d", c.Op, index)
	}
	return r
}

// Withdrawal is one instance an applied log entry took out of rotation:
// drained, deregistered, terminated, replaced by a new incarnation, or
// withdrawn by a committed verdict. Lifecycle is its lifecycle after the
// entry.
type Withdrawal struct {
	Key         wire.InstanceKey
	Incarnation uint64
	Lifecycle   wire.Lifecycle
	// Rev is the revision of the entry.
	Rev uint64
}

// withdraw records in as taken out of rotation by the entry being
// applied (under f.mu).
func (f *fsm) withdraw(in *record) {
	f.withdrawn = append(f.withdrawn, Withdrawal{Key: in.key(), Incarnation: in.incarnation, Lifecycle: in.lifecycle.wire()})
}

func (f *fsm) record(e wire.Event) {
	f.internEvent(&e)
	f.eventSeq++
	e.Seq = f.eventSeq
	if e.Kind == wire.EventRefused {
		f.refusals.push(e)
		return
	}
	f.events.push(e)
}

func (f *fsm) putTokens(index uint64, c command) error {
	for i, t := range c.Tokens {
		if err := t.validate(); err != nil {
			return fmt.Errorf("tokens[%d]: %w", i, err)
		}
	}
	for _, t := range c.Tokens {
		if cur, ok := f.tokens[t.Accessor]; ok && cur.sameGrant(t) {
			continue
		}
		t.Namespaces = slices.Clone(t.Namespaces)
		if t.CreatedAt.IsZero() {
			t.CreatedAt = c.At
		}
		f.tokens[t.Accessor] = t
		f.tokenRev = index
		f.record(wire.Event{At: c.At, Kind: wire.EventTokenCreated, Reason: fmt.Sprintf("%s token %s from %s", t.Scope, t.Accessor, t.Source), Actor: c.Actor})
	}
	return nil
}

// ring is a fixed-capacity buffer of events, oldest first. Pushing onto a
// full ring drops the oldest: O(1), no copying.
type ring struct {
	buf   []wire.Event
	start int
}

func newRing(capacity int) ring { return ring{buf: make([]wire.Event, 0, capacity)} }

func (r *ring) push(e wire.Event) {
	if len(r.buf) < cap(r.buf) {
		r.buf = append(r.buf, e)
		return
	}
	r.buf[r.start] = e
	r.start = (r.start + 1) % len(r.buf)
}

func (r *ring) len() int { return len(r.buf) }

// at returns the i-th oldest event.
func (r *ring) at(i int) wire.Event { return r.buf[(r.start+i)%len(r.buf)] }

func (r *ring) list() []wire.Event {
	out := make([]wire.Event, 0, len(r.buf))
	for i := range r.buf {
		out = append(out, r.at(i))
	}
	return out
}

func (f *fsm) applyServices(index uint64, c command) error {
	next := make([]wire.Service, len(c.Services))
	seen := map[wire.ServiceKey]bool{}
	for i, s := range c.Services {
		s = s.WithDefaults()
		if err := s.Validate(); err != nil {
			return fmt.Errorf("service %d (%s): %w", i, s.Key(), err)
		}
		if seen[s.Key()] {
			return fmt.Errorf("service %d: %w", i, invalid("name", "%s is defined twice", s.Key()))
		}
		seen[s.Key()] = true
		next[i] = s
	}
	// All or nothing: nothing changes until every document is valid.
	for _, s := range next {
		old := f.services[s.Key()]
		if old != nil {
			s.Revision = old.Revision
			if reflect.DeepEqual(*old, s) {
				continue
			}
		}
		s.Revision = index
		f.services[s.Key()] = &s
		f.record(wire.Event{At: c.At, Kind: wire.EventApplied, Namespace: s.Namespace, Service: s.Name, Actor: c.Actor})
	}
	return nil
}

func (f *fsm) register(index uint64, c command) (wire.Instance, bool, error) {
	if c.Register == nil {
		return wire.Instance{}, false, invalid("body", "registration is missing")
	}
	reg := *c.Register
	reg.Namespace, reg.Service = c.Key.Namespace, c.Key.Service
	ttlDefault := reg.LeaseTTL == 0
	svc, ok := f.services[c.Key.ServiceKey()]
	if !ok {
		return wire.Instance{}, false, fmt.Errorf("service %s is not defined; apply its definition first: %w", c.Key.ServiceKey(), ErrNotFound)
	}
	if err := reg.Normalize(*svc); err != nil {
		return wire.Instance{}, false, err
	}
	// The definition's strings, not the entry's: every instance of the
	// service, and its key in f.instances, then shares one copy.
	reg.Namespace, reg.Service = svc.Namespace, svc.Name
	key := reg.Key()
	old := f.instances.get(key)
	// A registration past its hard expiry is over, even while its end
	// waits on the pacing of hard expiries: a new one is fenced as if it
	// had ended, and starts a new incarnation, never revives it.
	over, chk := overAt(old, c.At), old
	if over {
		ended := *old
		ended.lifecycle = lcTerminated
		chk = &ended
	}
	if err := fenceRegistration(chk, reg, ttlDefault); err != nil {
		return wire.Instance{}, false, err
	}
	if over {
		f.endAtHardExpiry(old, c.At, fromNanos(old.leaseDeadline), c.Actor, "; registered again")
	}
	if isRetry(old, reg, ttlDefault) {
		// A retry of the committed registration: same incarnation. It
		// re-arms the lease, as any sign of life does.
		if d := nanos(c.At.Add(old.leaseTTL.D())); d > old.leaseDeadline {
			old.leaseDeadline = d
		}
		// A retry may move starting → ready, never back.
		if old.lifecycle == lcStarting && reg.Lifecycle == wire.Ready {
			f.record(wire.Event{At: c.At, Kind: wire.EventRegistered, Namespace: key.Namespace, Service: key.Service,
				Instance: key.ID, Incarnation: old.incarnation, From: string(wire.Starting), To: string(reg.Lifecycle), Actor: c.Actor})
			old.lifecycle = lcReady
		}
		return cloneInstance(old.view()), false, nil
	}
	lc, _ := lifecycleOf(reg.Lifecycle) // starting or ready: Normalize checked
	f.nextInc++
	in := &record{
		svc: f.serviceKey(svc.Key()), id: key.ID,
		incarnation:    f.nextInc,
		sourceRevision: index,
		addresses:      slices.Clone(reg.Addresses),
		ports:          f.sharedPorts(svc.Key(), maps.Clone(reg.Ports)),
		origin:         f.origin(reg.Region, reg.Zone, c.Actor),
		leaseTTL:       reg.LeaseTTL,
		leaseDeadline:  nanos(c.At.Add(reg.LeaseTTL.D())),
		registeredAt:   nanos(c.At),
		weight:         uint16(reg.Weight), // 1–65535: Normalize checked
		lifecycle:      lc,
		ttlDefault:     ttlDefault,
	}
	var retired []string
	e := wire.Event{At: c.At, Kind: wire.EventRegistered, Namespace: key.Namespace, Service: key.Service,
		Instance: key.ID, Incarnation: in.incarnation, To: string(reg.Lifecycle), Actor: c.Actor}
	if old != nil {
		retired = slices.Clone(old.retired())
		if id := old.registrationID(); id != "" && id != reg.RegistrationID {
			retired = append(retired, id)
		}
		if n := len(retired); n > maxRetiredIDs {
			retired = retired[n-maxRetiredIDs:]
		}
		e.From = string(old.lifecycle.wire())
		e.Reason = fmt.Sprintf("replaces incarnation %d", old.incarnation)
	}
	if reg.RegistrationID != "" || len(retired) > 0 {
		in.change(func(m *recordMore) { m.registrationID, m.retired = reg.RegistrationID, retired })
	}
	if old != nil && old.lifecycle != lcTerminated {
		// The old incarnation is gone, and its address may not be the
		// new one's.
		f.withdrawn = append(f.withdrawn, Withdrawal{Key: key, Incarnation: old.incarnation, Lifecycle: wire.Terminated})
	}
	f.instances.put(in)
	f.record(e)
	return cloneInstance(in.view()), true, nil
}

// isRetry reports whether reg (normalised; ttlDefault says whether it
// left lease_ttl to the policy) is a retry of old, the committed record:
// old is starting or ready and holds exactly what reg asks for. What reg
// says it replaces does not matter: the retry of a registration that
// replaced incarnation N names N, and must still find its own result.
func isRetry(old *record, reg wire.Registration, ttlDefault bool) bool {
	return old != nil && (old.lifecycle == lcStarting || old.lifecycle == lcReady) && sameAs(reg, old, ttlDefault)
}

// fenceRegistration returns an ErrFenced error when reg (normalised) may
// not take the place of old, the instance's record (nil: none):
//   - a registration id old has retired is a late retry of a replaced
//     registration;
//   - unless reg is a retry of old, a non-zero Replaces must name old's
//     incarnation;
//   - without a registration id, a registration that is not a retry of a
//     live record (starting, ready or draining) must name it in Replaces:
//     the registrar must have seen what it overwrites.
//
// A terminated record, or none, takes any registration that names no
// other incarnation. The FSM and the leader's pre-check both decide with
// it, so that a refusal costs no log entry.
func fenceRegistration(old *record, reg wire.Registration, ttlDefault bool) error {
	if old == nil {
		return nil
	}
	key, inc := old.key(), old.incarnation
	if reg.RegistrationID != "" && slices.Contains(old.retired(), reg.RegistrationID) {
		return fmt.Errorf("instance %s: registration id %q was replaced by incarnation %d: %w",
			key, reg.RegistrationID, inc, ErrFenced)
	}
	if isRetry(old, reg, ttlDefault) {
		return nil
	}
	if reg.Replaces != 0 && reg.Replaces != inc {
		return fmt.Errorf("instance %s: replaces %d is not the current incarnation %d (%s): the registration is late or was "+
			"sent on an old view; read the instance and pass replaces %d (cairn register --replaces %d) to replace it: %w",
			key, reg.Replaces, inc, old.lifecycle.wire(), inc, inc, ErrFenced)
	}
	if reg.Replaces == 0 && reg.RegistrationID == "" && old.lifecycle != lcTerminated {
		what := "with other content"
		if old.lifecycle == lcDraining {
			what = "and draining"
		}
		return fmt.Errorf("instance %s is registered as incarnation %d %s; to replace it, register with replaces %d "+
			"(cairn register --replaces %d), or deregister it first: %w",
			key, inc, what, inc, inc, ErrFenced)
	}
	return nil
}

// current returns the instance c names if c carries its current
// incarnation.
func (f *fsm) current(key wire.InstanceKey, inc uint64) (*record, error) {
	in := f.instances.get(key)
	if in == nil {
		return nil, fmt.Errorf("instance %s is not registered: %w", key, ErrNotFound)
	}
	if inc != in.incarnation {
		return nil, fmt.Errorf("instance %s: incarnation %d is not the current incarnation %d: %w", key, inc, in.incarnation, ErrFenced)
	}
	return in, nil
}

func (f *fsm) mutate(c command) (wire.Instance, error) {
	in, err := f.current(c.Key, c.Incarnation)
	if err != nil {
		return wire.Instance{}, err
	}
	e := wire.Event{At: c.At, Namespace: in.svc.Namespace, Service: in.svc.Name, Instance: in.id,
		Incarnation: in.incarnation, From: string(in.lifecycle.wire()), Actor: c.Actor}
	switch c.Op {
	case opDrain:
		switch in.lifecycle {
		case lcDraining:
			return cloneInstance(in.view()), nil // a retry
		case lcTerminated:
			return wire.Instance{}, fmt.Errorf("instance %s is deregistered: %w", c.Key, ErrFenced)
		}
		in.lifecycle = lcDraining
		in.change(func(m *recordMore) { m.drainingSince = nanos(c.At) })
		f.withdraw(in)
		e.Kind = wire.EventDrained
	case opDeregister:
		if in.lifecycle == lcTerminated {
			return cloneInstance(in.view()), nil // a retry
		}
		in.lifecycle = lcTerminated
		in.change(func(m *recordMore) { m.terminatedAt = nanos(c.At) })
		f.withdraw(in)
		e.Kind = wire.EventDeregistered
	case opReport:
		if in.lifecycle == lcTerminated {
			return wire.Instance{}, fmt.Errorf("instance %s is deregistered: %w", c.Key, ErrFenced)
		}
		if c.Report == nil {
			return wire.Instance{}, invalid("body", "report is missing")
		}
		if err := c.Report.Validate(*f.services[c.Key.ServiceKey()]); err != nil {
			return wire.Instance{}, err
		}
		prev := in.report()
		// No dependencies are a nil map, as a snapshot restores them: a
		// reader's copy shares the record's map (listRecords), so a
		// restored replica must hold the same value, not an empty one.
		rep := &wire.SelfReport{Ready: c.Report.Ready, At: c.At, Reporter: f.strs.str(c.Actor)}
		if len(c.Report.Dependencies) > 0 {
			rep.Dependencies = maps.Clone(c.Report.Dependencies)
		}
		in.change(func(m *recordMore) { m.report = rep })
		// maps.Equal, not reflect.DeepEqual: a snapshot restores an empty
		// map as nil, and a restored replica must decide as the others do.
		if prev != nil && prev.Ready == rep.Ready && maps.Equal(prev.Dependencies, rep.Dependencies) {
			return cloneInstance(in.view()), nil // no news: not worth an audit entry
		}
		e.Kind, e.From = wire.EventReported, ""
		e.Reason = fmt.Sprintf("ready=%t", c.Report.Ready)
		for _, k := range sortedKeys(c.Report.Dependencies) {
			e.Reason += fmt.Sprintf(" %s=%s", k, c.Report.Dependencies[k])
		}
	}
	if e.Kind != wire.EventReported {
		e.To = string(in.lifecycle.wire())
	}
	f.record(e)
	return cloneInstance(in.view()), nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// fsmState is the serialised form of the whole state: a snapshot.
type fsmState struct {
	Rev         uint64          `json:"rev"`
	NextInc     uint64          `json:"next_incarnation"`
	EventSeq    uint64          `json:"event_seq"`
	Services    []wire.Service  `json:"services"`
	Instances   []wire.Instance `json:"instances"`
	Members     []wire.Member   `json:"members"`
	Tokens      []TokenRecord   `json:"tokens"`
	TokenRev    uint64          `json:"token_rev"`
	LeaderSince time.Time       `json:"leader_since"`
	Events      []wire.Event    `json:"events"`
	Refusals    []wire.Event    `json:"refusals"`
}

// state copies the whole state, the instances as the API shows them
// (sharing their slices, maps and pointers with the records, read-only),
// sorted by key.
func (f *fsm) state() fsmState {
	s, recs := f.copyState()
	s.Instances = views(recs)
	return s
}

// copyState is state with its instances left out, and a copy of the
// records (sorted) instead: a snapshot makes their views one at a time,
// as it writes them. The records are copied under the lock, and sorted
// once it is released.
func (f *fsm) copyState() (fsmState, []record) {
	s, recs := f.copyStateLocked()
	sortRecords(recs)
	return s, recs
}

func (f *fsm) copyStateLocked() (fsmState, []record) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	recs := listRecords(&f.instances, nil)
	s := fsmState{Rev: f.rev, NextInc: f.nextInc, EventSeq: f.eventSeq,
		TokenRev: f.tokenRev, LeaderSince: f.leaderSince,
		Events: f.events.list(), Refusals: f.refusals.list()}
	for _, t := range f.tokens {
		t.Namespaces = slices.Clone(t.Namespaces)
		s.Tokens = append(s.Tokens, t)
	}
	sort.Slice(s.Tokens, func(i, j int) bool { return s.Tokens[i].Accessor < s.Tokens[j].Accessor })
	for _, svc := range f.services {
		s.Services = append(s.Services, *svc)
	}
	sort.Slice(s.Services, func(i, j int) bool { return s.Services[i].Key().String() < s.Services[j].Key().String() })
	for _, m := range f.members {
		s.Members = append(s.Members, m)
	}
	sort.Slice(s.Members, func(i, j int) bool { return s.Members[i].NodeID < s.Members[j].NodeID })
	return s, recs
}

// Snapshot implements raft.FSM. The copy is taken under the lock; the
// encoding happens in Persist, off raft's apply path.
func (f *fsm) Snapshot() (raft.FSMSnapshot, error) {
	st, recs := f.copyState()
	return &fsmSnapshot{st: st, recs: recs}, nil
}

// Restore implements raft.FSM. It replaces the whole state.
func (f *fsm) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	var s fsmState
	dec := json.NewDecoder(rc)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return fmt.Errorf("store: decoding snapshot: %w", err)
	}
	if err := f.load(s); err != nil {
		return fmt.Errorf("store: restoring snapshot: %w", err)
	}
	return nil
}

// load replaces the state with s, or refuses s and changes nothing.
func (f *fsm) load(s fsmState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	services := make(map[wire.ServiceKey]*wire.Service, len(s.Services))
	for i := range s.Services {
		services[s.Services[i].Key()] = &s.Services[i]
	}
	oldServices, oldKeys, oldPorts, oldOrigins, oldHeads := f.services, f.keys, f.ports, f.origins, f.heads
	f.services = services
	f.keys, f.ports, f.origins, f.heads = map[wire.ServiceKey]*wire.ServiceKey{}, map[wire.ServiceKey]map[string]int{}, nil, nil
	instances := newIndex()
	for i := range s.Instances {
		r, err := f.recordOf(&s.Instances[i])
		if err != nil {
			f.services, f.keys, f.ports, f.origins, f.heads = oldServices, oldKeys, oldPorts, oldOrigins, oldHeads
			return fmt.Errorf("instances[%d]: %w", i, err)
		}
		instances.put(r)
		s.Instances[i] = wire.Instance{} // the record holds what it needs
	}
	f.instances = instances
	f.rev, f.nextInc, f.eventSeq = s.Rev, s.NextInc, s.EventSeq
	f.members = make(map[string]wire.Member, len(s.Members))
	for _, m := range s.Members {
		f.members[m.NodeID] = m
	}
	f.tokens = make(map[string]TokenRecord, len(s.Tokens))
	for _, t := range s.Tokens {
		f.tokens[t.Accessor] = t
	}
	f.tokenRev, f.leaderSince = s.TokenRev, s.LeaderSince
	// The log's clock is not in a snapshot: the latest time it shows
	// (the newest audit event, or the last takeover), of no known term.
	f.logTime, f.prevTermTime, f.logTerm = s.LeaderSince, time.Time{}, 0
	for _, e := range s.Events {
		if e.At.After(f.logTime) {
			f.logTime = e.At
		}
	}
	f.events, f.refusals = newRing(AuditCapacity), newRing(RefusalCapacity)
	for _, e := range s.Events {
		f.internEvent(&e)
		f.events.push(e)
	}
	for _, e := range s.Refusals {
		f.internEvent(&e)
		f.refusals.push(e)
	}
	return nil
}

// fsmSnapshot is the state, its instances as copies of their records.
type fsmSnapshot struct {
	st   fsmState
	recs []record
}

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeState(sink, &s.st, len(s.recs), func(i int) wire.Instance { return s.recs[i].view() }); err != nil {
		return errors.Join(fmt.Errorf("store: writing snapshot: %w", err), sink.Cancel())
	}
	return sink.Close()
}

// writeState writes st, with the n instances instance returns in place
// of st.Instances, as the JSON object encoding/json makes of it, but one
// instance and one event at a time through a small buffer: encoding it
// in one go holds the whole document in memory, about 550 bytes an
// instance with its verdict, on top of the state itself (55 MB at
// 100,000 instances, in a buffer grown by doubling), every time raft
// takes a snapshot. TestWriteStateIsJSON checks that it writes what
// json.Marshal would.
func writeState(w io.Writer, st *fsmState, n int, instance func(i int) wire.Instance) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	first := true
	field := func(name string) {
		if first {
			bw.WriteString(`{"`)
			first = false
		} else {
			bw.WriteString(`,"`)
		}
		bw.WriteString(name)
		bw.WriteString(`":`)
	}
	value := func(name string, v any) error {
		field(name)
		return enc.Encode(v) // its newline is whitespace between tokens
	}
	// list writes a slice element by element; a nil slice is null, as
	// encoding/json writes it.
	list := func(name string, n int, isNil bool, elem func(i int) any) error {
		field(name)
		if isNil {
			_, err := bw.WriteString("null")
			return err
		}
		bw.WriteByte('[')
		for i := range n {
			if i > 0 {
				bw.WriteByte(',')
			}
			if err := enc.Encode(elem(i)); err != nil {
				return err
			}
		}
		return bw.WriteByte(']')
	}
	// The fields in fsmState's order, under their JSON names; bufio's
	// error is sticky, so the first one is the one returned.
	for _, err := range []error{
		value("rev", st.Rev),
		value("next_incarnation", st.NextInc),
		value("event_seq", st.EventSeq),
		value("services", st.Services),
		list("instances", n, false, func(i int) any { in := instance(i); return &in }),
		value("members", st.Members),
		value("tokens", st.Tokens),
		value("token_rev", st.TokenRev),
		value("leader_since", st.LeaderSince),
		list("events", len(st.Events), st.Events == nil, func(i int) any { return &st.Events[i] }),
		value("refusals", st.Refusals),
	} {
		if err != nil {
			return err
		}
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

func (s *fsmSnapshot) Release() {}
