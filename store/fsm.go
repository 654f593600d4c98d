package store

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cairn-sd/cairn/wire"
	"github.com/hashicorp/raft"
)

// AuditCapacity is how many audit events the store keeps over every
// namespace, shared so that a namespace that churns pushes out its own
// history, not another's (trail.go), and RefusalCapacity how many
// refusals, in a ring of their own so that a token hammering calls it
// may not make cannot push the history out. They are constants, not
// settings, so that every replica keeps exactly the same trail.
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
	// opEvacuate starts or ends an evacuation; opEvacuationStep is the
	// leader's move of them (expiry, return, pause, end).
	opEvacuate       opcode = "evacuate"
	opEvacuationStep opcode = "evacuation_step"
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
	// Evacuate and EvacSteps are the evacuations' entries.
	Evacuate  *wire.EvacuateRequest `json:"evacuate,omitempty"`
	EvacSteps []evacStep            `json:"evac_steps,omitempty"`

	// Budget, on a drain or a deregistration, judges it against the
	// service's disruption budget, and Force lets it past, audited.
	// Entries written before budgets carry neither, and replay as they
	// were applied.
	Budget bool `json:"budget,omitempty"`
	Force  bool `json:"force,omitempty"`
	// Evacs, on a drain or deregistration judged against the budget,
	// counts the evacuations in force as holding part of it. Entries
	// written before evacuations were voluntary disruptions carry
	// Budget alone, and replay as they were applied. (An opEvacuate
	// entry is judged by its Budget flag: none was written with one
	// before.)
	Evacs bool `json:"evacs,omitempty"`
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
	// Evacuation is what an opEvacuate entry started or ended.
	Evacuation wire.Evacuation
	Err        error
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
	// evacs are the evacuations in force, by id.
	evacs    map[uint64]*wire.Evacuation
	events   trail // at most AuditCapacity
	refusals ring  // at most RefusalCapacity

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
	// shifted is set during an Apply that started, renewed, ended or
	// stepped an evacuation (traffic moves between zones); shiftNow
	// when it started or renewed one (traffic must leave the zone at
	// once). onShift, if set, is called after an Apply that set
	// shiftNow, under no lock.
	shifted, shiftNow bool
	// shiftRev is the index of the last entry that moved a shift (or
	// of the snapshot installed last): not replicated state, what a
	// table builder compares its catalog's revision with (ShiftRevision).
	shiftRev uint64
	onShift  func()

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
		evacs:     map[uint64]*wire.Evacuation{},
		events:    newTrail(AuditCapacity),
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
	shifted := f.shifted
	if shifted {
		f.shiftRev = l.Index
	}
	now := f.shiftNow
	f.withdrawn, f.shifted, f.shiftNow = nil, false, false
	f.mu.Unlock()
	if now && f.onShift != nil {
		f.onShift()
	}
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
			f.holdReturns(c.At, c.SilentSince)
		}
	case opHealth:
		f.commitHealth(c)
	case opEvacuate:
		r.Evacuation, r.Err = f.evacuate(index, c)
	case opEvacuationStep:
		f.stepEvacuations(c)
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

func (s *fsmSnapshot) Persist(sink raft.SnapshotSink) error {
	if err := writeState(sink, &s.st, len(s.recs), func(i int) wire.Instance { return s.recs[i].view() }); err != nil {
		return errors.Join(fmt.Errorf("store: writing snapshot: %w", err), sink.Cancel())
	}
	return sink.Close()
}
