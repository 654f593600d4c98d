package store

import (
	"cmp"
	"slices"
	"strings"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// Services returns every service definition, sorted by key.
func (s *Store) Services() []wire.Service {
	s.fsm.mu.RLock()
	out := make([]wire.Service, 0, len(s.fsm.services))
	for _, svc := range s.fsm.services {
		out = append(out, *svc)
	}
	s.fsm.mu.RUnlock()
	// By "namespace/name" as strings, without making them: a refresh of
	// the publish loop sorts every service this way.
	slices.SortFunc(out, func(a, b wire.Service) int { return compareServiceKeys(a.Namespace, a.Name, b.Namespace, b.Name) })
	return out
}

// compareServiceKeys compares ns1+"/"+n1 with ns2+"/"+n2, allocating nothing.
func compareServiceKeys(ns1, n1, ns2, n2 string) int {
	if ns1 == ns2 {
		return strings.Compare(n1, n2)
	}
	// The first difference is within the shorter namespace, or where
	// it ends: there one key has '/' and the other a namespace byte.
	l := min(len(ns1), len(ns2))
	if c := strings.Compare(ns1[:l], ns2[:l]); c != 0 {
		return c
	}
	if len(ns1) == l {
		return cmp.Compare(byte('/'), ns2[l])
	}
	return cmp.Compare(ns1[l], byte('/'))
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
	Lifecycle    status.Lifecycle
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
	// Ramp is the incarnation's deploy ramp (wire.Instance.Ramp), 0 for
	// none.
	Ramp wire.Duration
}

// EachInstance calls fn with every instance, terminated ones included,
// in no particular order, holding the replica's read lock: fn must be
// quick and must not call the Store. It spares a caller that needs a few
// fields of every instance the views AllInstances makes.
func (s *Store) EachInstance(fn func(Entry)) {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	for in := range s.fsm.instances.all {
		fn(entryOf(in))
	}
}

// EachInstanceOf is EachInstance for the instances of one service: the
// read lock is held for that service only, so that a caller walking
// every service (the publish loop's catalog) may pause between two and
// let the one core answer queries meanwhile.
func (s *Store) EachInstanceOf(k wire.ServiceKey, fn func(Entry)) {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	for _, in := range s.fsm.instances.svcs[k] {
		fn(entryOf(in))
	}
}

func entryOf(in *record) Entry {
	return Entry{Key: in.key(), Incarnation: in.incarnation, Lifecycle: in.lifecycle,
		Region: in.origin.region, Zone: in.origin.zone, Addresses: in.addresses, Ports: in.ports,
		Weight: int(in.weight), LeaseTTL: in.leaseTTL, LeaseDeadline: in.leaseDeadline,
		RegisteredAt: in.registeredAt, Report: in.report(), Verdict: in.verdict, Ramp: in.ramp()}
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

// Events returns up to limit audit events of one service, newest last,
// with the events of evacuations of every service (a zone-wide
// evacuation concerns each). An empty ns returns every service's.
func (s *Store) Events(ns, svc string, limit int) []wire.Event {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	tr, rf := &s.fsm.events, s.fsm.refusals.list()
	if ns == "" {
		return newestOf(limit, func(wire.Event) bool { return true }, tr.list(), rf)
	}
	return newestOf(limit, func(e wire.Event) bool {
		return e.Namespace == ns && e.Service == svc || e.Namespace == "" && e.Kind.Evacuation()
	}, tr.namespace(ns), tr.namespace(""), rf)
}

// newestOf returns up to limit (none: all) of the events of srcs, each
// ordered by sequence number, that keep accepts: the newest, oldest
// first.
func newestOf(limit int, keep func(wire.Event) bool, srcs ...[]wire.Event) []wire.Event {
	var out []wire.Event
	next := make([]int, len(srcs)) // the newest not yet taken of each
	for i, src := range srcs {
		next[i] = len(src) - 1
	}
	for limit <= 0 || len(out) < limit {
		pick := -1
		for i, src := range srcs {
			if next[i] >= 0 && (pick < 0 || src[next[i]].Seq > srcs[pick][next[pick]].Seq) {
				pick = i
			}
		}
		if pick < 0 {
			break
		}
		e := srcs[pick][next[pick]]
		next[pick]--
		if keep(e) {
			out = append(out, e)
		}
	}
	slices.Reverse(out)
	return out
}
