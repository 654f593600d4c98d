package store

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"time"

	"github.com/cairn-sd/cairn/wire"
	"github.com/hashicorp/raft"
)

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
	// Evacuations are the evacuations in force; absent when none, so
	// that a snapshot without any reads as it did before they existed.
	Evacuations []wire.Evacuation `json:"evacuations,omitempty"`
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
	if len(f.evacs) > 0 {
		s.Evacuations = f.evacuationList()
	}
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
	// The snapshot may start, end or move evacuations: the table builder
	// rebuilds from it at once, as after an entry that does.
	f.mu.Lock()
	f.shiftRev = s.Rev
	f.mu.Unlock()
	if f.onShift != nil {
		f.onShift()
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
	f.evacs = make(map[uint64]*wire.Evacuation, len(s.Evacuations))
	for i := range s.Evacuations {
		f.evacs[s.Evacuations[i].ID] = &s.Evacuations[i]
	}
	// The log's clock is not in a snapshot: the latest time it shows
	// (the newest audit event, or the last takeover), of no known term.
	f.logTime, f.prevTermTime, f.logTerm = s.LeaderSince, time.Time{}, 0
	for _, e := range s.Events {
		if e.At.After(f.logTime) {
			f.logTime = e.At
		}
	}
	f.events, f.refusals = newTrail(AuditCapacity), newRing(RefusalCapacity)
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
	if len(st.Evacuations) > 0 { // omitempty
		if err := value("evacuations", st.Evacuations); err != nil {
			return err
		}
	}
	bw.WriteString("}\n")
	return bw.Flush()
}

func (s *fsmSnapshot) Release() {}
