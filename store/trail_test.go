package store

import (
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cairn-sd/cairn/wire"
)

func auditCmd(ns, svc, reason string) command {
	return command{Op: opAudit, Event: &wire.Event{Kind: wire.EventReported, Namespace: ns, Service: svc, Reason: reason}}
}

// A tenant that churns 100,000 events keeps to its own history: another
// namespace's events, and the evacuations every service's trail shows,
// all stay (issue 33).
func TestTrailNoisyNamespaceKeepsToItself(t *testing.T) {
	l := newLog(t)
	const quiet = 50
	for i := range quiet {
		l.must(auditCmd("quiet", "db", fmt.Sprint("q", i)))
	}
	l.must(command{Op: opAudit, Event: &wire.Event{Kind: wire.EventEvacuated, Reason: "zone c"}})
	const noisy = 100_000
	for i := range noisy {
		l.must(auditCmd("noisy", "web", fmt.Sprint("n", i)))
	}
	if got := l.f.events.len(); got != AuditCapacity {
		t.Fatalf("trail holds %d events, want its capacity %d", got, AuditCapacity)
	}
	s := &Store{fsm: l.f}
	got := s.Events("quiet", "db", 0)
	if len(got) != quiet+1 {
		t.Fatalf("quiet/db has %d events, want its %d and the evacuation", len(got), quiet)
	}
	for i, e := range got[:quiet] {
		if want := fmt.Sprint("q", i); e.Reason != want {
			t.Fatalf("quiet event %d is %q, want %q", i, e.Reason, want)
		}
	}
	if last := got[quiet]; last.Kind != wire.EventEvacuated {
		t.Errorf("quiet/db's newest event is %s, want the evacuation", last.Kind)
	}
	n := s.Events("noisy", "web", 0)
	if want := AuditCapacity - quiet - 1; len(n) != want+1 {
		t.Fatalf("noisy/web has %d events, want its newest %d and the evacuation", len(n), want)
	}
	if last := n[len(n)-1]; last.Reason != fmt.Sprint("n", noisy-1) {
		t.Errorf("noisy's newest event is %q, want n%d", last.Reason, noisy-1)
	}
	all := s.Events("", "", 0)
	sorted := slices.IsSortedFunc(all, func(a, b wire.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	if len(all) != AuditCapacity || !sorted {
		t.Errorf("every namespace's events: %d, sorted %t; want %d in sequence order", len(all), sorted, AuditCapacity)
	}
}

// A full trail takes from the namespace that holds the most, the later
// name of two that hold as many: a namespace over its share is cut to
// it, one under it keeps every event.
func TestTrailTakesFromTheLargest(t *testing.T) {
	tr := newTrail(10)
	seq := uint64(0)
	push := func(ns string, n int) {
		for range n {
			seq++
			tr.push(wire.Event{Seq: seq, Namespace: ns})
		}
	}
	counts := func() map[string]int {
		m := map[string]int{}
		for ns, q := range tr.byNS {
			m[ns] = q.len()
		}
		return m
	}
	push("a", 7)
	push("b", 3)
	push("c", 4) // a loses 4: a 3, b 3, c 4
	if got, want := counts(), map[string]int{"a": 3, "b": 3, "c": 4}; !maps.Equal(got, want) {
		t.Fatalf("after c's 4: %v, want %v", got, want)
	}
	push("a", 1) // c holds the most
	if got, want := counts(), map[string]int{"a": 4, "b": 3, "c": 3}; !maps.Equal(got, want) {
		t.Fatalf("after a's 1: %v, want %v", got, want)
	}
	push("e", 1) // a holds the most
	push("e", 1) // a, b and c hold 3 each: c, the last name, loses one
	if got, want := counts(), map[string]int{"a": 3, "b": 3, "c": 2, "e": 2}; !maps.Equal(got, want) {
		t.Fatalf("after e's two: %v, want %v", got, want)
	}
	// a lost its oldest each time: 1 to 5 of its 1 to 7 and 15.
	if got := seqs(tr.namespace("a")); !slices.Equal(got, []uint64{6, 7, 15}) {
		t.Errorf("a keeps %v, want 6 7 15", got)
	}
	// d churns: it takes from the others until it holds the most, then
	// from itself; nobody is pushed below it.
	push("d", 10)
	if got, want := counts(), map[string]int{"a": 2, "b": 2, "c": 2, "d": 3, "e": 1}; !maps.Equal(got, want) {
		t.Fatalf("after d's 10: %v, want %v", got, want)
	}
	if got := seqs(tr.namespace("d")); !slices.Equal(got, []uint64{25, 26, 27}) {
		t.Errorf("d keeps %v, want its newest: 25 26 27", got)
	}
	push("e", 10) // a, b, c and d are cut to e's size in turn
	if got, want := counts(), map[string]int{"a": 2, "b": 2, "c": 2, "d": 2, "e": 2}; !maps.Equal(got, want) {
		t.Fatalf("after e's 10: %v, want %v", got, want)
	}
	// A namespace whose last event goes is forgotten.
	tr2 := newTrail(2)
	tr2.push(wire.Event{Seq: 1, Namespace: "b"})
	tr2.push(wire.Event{Seq: 2, Namespace: "a"})
	tr2.push(wire.Event{Seq: 3, Namespace: "c"}) // a and b hold one each: b goes
	if len(tr2.byNS) != 2 || tr2.largest.Len() != 2 || tr2.namespace("b") != nil {
		t.Errorf("a namespace left with no events: %d queues, %d in the heap, b %v", len(tr2.byNS), tr2.largest.Len(), tr2.namespace("b"))
	}
}

func seqs(evs []wire.Event) []uint64 {
	out := make([]uint64, len(evs))
	for i, e := range evs {
		out[i] = e.Seq
	}
	return out
}

// A trail built again from its list (a snapshot's restore) holds the
// same events in the same queues, and takes the same ones after.
func TestTrailRestoresTheSame(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	nss := []string{"", "a", "b", "c", "d"}
	tr := newTrail(64)
	seq := uint64(0)
	for range 2000 {
		seq++
		tr.push(wire.Event{Seq: seq, Namespace: nss[r.IntN(len(nss))]})
		if seq%97 != 0 {
			continue
		}
		back := newTrail(64)
		for _, e := range tr.list() {
			back.push(e)
		}
		for _, ns := range nss {
			if !slices.Equal(tr.namespace(ns), back.namespace(ns)) {
				t.Fatalf("at seq %d namespace %q: restored %v, want %v", seq, ns, back.namespace(ns), tr.namespace(ns))
			}
		}
		e := wire.Event{Seq: seq + 1, Namespace: nss[r.IntN(len(nss))]}
		tr.push(e)
		back.push(e)
		seq++
		if !slices.Equal(tr.list(), back.list()) {
			t.Fatalf("at seq %d the restored trail took another event", seq)
		}
	}
}
