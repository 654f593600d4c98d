package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
	"github.com/hashicorp/raft"
)

// t0 is the clock of the FSM tests. It is UTC so that times survive the
// JSON round trips of log entries and snapshots unchanged.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// fataler is what the helpers need of a *testing.T or a *rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// applyAt encodes c as a log entry at index and applies it to f, returning
// the FSM's result.
func applyAt(t fataler, f *fsm, index uint64, c command) result {
	t.Helper()
	b, err := encodeCommand(c)
	if err != nil {
		t.Fatalf("encoding %s command: %v", c.Op, err)
	}
	return applyRaw(t, f, index, b)
}

func applyRaw(t fataler, f *fsm, index uint64, data []byte) result {
	t.Helper()
	got := f.Apply(&raft.Log{Type: raft.LogCommand, Index: index, Data: data})
	r, ok := got.(result)
	if !ok {
		t.Fatalf("Apply returned %T, want result", got)
	}
	return r
}

// fsmLog drives one fsm with increasing indexes and times: each entry is one
// second after the previous one.
type fsmLog struct {
	t     fataler
	f     *fsm
	index uint64
	now   time.Time
}

func newLog(t fataler) *fsmLog { return &fsmLog{t: t, f: newFSM(), now: t0} }

// apply stamps c with the next index and, unless c carries one, the next
// time, and applies it.
func (l *fsmLog) apply(c command) result {
	l.t.Helper()
	l.index++
	l.now = l.now.Add(time.Second)
	if c.At.IsZero() {
		c.At = l.now
	}
	return applyAt(l.t, l.f, l.index, c)
}

// must applies c and fails on an error result.
func (l *fsmLog) must(c command) result {
	l.t.Helper()
	r := l.apply(c)
	if r.Err != nil {
		l.t.Fatalf("applying %s: %v", c.Op, r.Err)
	}
	return r
}

func webService() wire.Service {
	return wire.Service{
		Namespace: "prod", Name: "web",
		Ports: []wire.Port{{Name: "http", Number: 8080}, {Name: "admin", Number: 9090}},
		Capability: wire.Capability{Readiness: "self", Dependencies: []wire.Dependency{
			{Name: "db"}, {Name: "cache", Shared: true},
		}},
		Policy: wire.Policy{DrainWindow: wire.Duration(10 * time.Second), LeaseTTL: wire.Duration(30 * time.Second)},
	}
}

func webKey(id string) wire.InstanceKey {
	return wire.InstanceKey{Namespace: "prod", Service: "web", ID: id}
}

func applySvc(svcs ...wire.Service) command {
	return command{Op: opApply, Actor: "test", Services: svcs}
}

func registerCmd(id string, addrs ...string) command {
	if len(addrs) == 0 {
		addrs = []string{"10.0.0.1"}
	}
	return command{Op: opRegister, Actor: "registrar", Key: webKey(id),
		Register: &wire.Registration{ID: id, Addresses: addrs, Ports: map[string]int{"http": 8080}}}
}

func mutateCmd(op opcode, id string, inc uint64) command {
	return command{Op: op, Actor: "instance:" + id, Key: webKey(id), Incarnation: inc}
}

func reportCmd(id string, inc uint64, rep wire.Report) command {
	c := mutateCmd(opReport, id, inc)
	c.Report = &rep
	return c
}

// withoutRev is f's state with the revision cleared, for comparing the
// state before and after an entry that must change nothing else.
func withoutRev(f *fsm) fsmState {
	s := f.state()
	s.Rev = 0
	return s
}

func instanceOf(t fataler, f *fsm, key wire.InstanceKey) wire.Instance {
	t.Helper()
	f.mu.RLock()
	defer f.mu.RUnlock()
	in := f.instances.get(key)
	if in == nil {
		t.Fatalf("instance %s is missing", key)
	}
	return cloneInstance(in.view())
}

// byteSink is a raft.SnapshotSink over a buffer.
type byteSink struct {
	bytes.Buffer
	closed, cancelled bool
}

func (s *byteSink) ID() string    { return "test" }
func (s *byteSink) Cancel() error { s.cancelled = true; return nil }
func (s *byteSink) Close() error  { s.closed = true; return nil }

// roundTrip snapshots f, persists the snapshot and restores it into into.
func roundTrip(t fataler, f, into *fsm) {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer snap.Release()
	var sink byteSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatalf("Persist: %v", err)
	}
	if !sink.closed || sink.cancelled {
		t.Fatalf("Persist left the sink closed=%t cancelled=%t, want closed", sink.closed, sink.cancelled)
	}
	if err := into.Restore(io.NopCloser(&sink.Buffer)); err != nil {
		t.Fatalf("Restore: %v", err)
	}
}

func TestFSMIgnoresNonCommandEntries(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	before := l.f.state()
	for _, typ := range []raft.LogType{raft.LogNoop, raft.LogBarrier, raft.LogConfiguration} {
		if got := l.f.Apply(&raft.Log{Type: typ, Index: 100, Data: []byte("junk")}); got != nil {
			t.Errorf("Apply(%s) = %v, want nil", typ, got)
		}
	}
	if after := l.f.state(); !reflect.DeepEqual(before, after) {
		t.Errorf("non-command entries changed the state:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestFSMRefusesUnreadableEntries(t *testing.T) {
	tests := []struct {
		name string
		data string
		want string
	}{
		{"not json", "{", "decoding log entry"},
		{"wrong type", `{"op": 7}`, "decoding log entry"},
		{"unknown op", `{"op": "explode", "at": "2025-03-01T12:00:00Z"}`, `unknown operation "explode"`},
		{"null", `null`, `unknown operation ""`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLog(t)
			l.must(applySvc(webService()))
			l.must(registerCmd("a"))
			before := withoutRev(l.f)
			r := applyRaw(t, l.f, 10, []byte(tt.data))
			if r.Err == nil || !strings.Contains(r.Err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", r.Err, tt.want)
			}
			if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
				t.Errorf("a refused entry changed the state:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

func TestFSMApplyIsAllOrNothing(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	before := withoutRev(l.f)

	changed := webService()
	changed.Ports[0].Number = 8081
	other := webService()
	other.Name = "api"
	bad := webService()
	bad.Name = "Bad_Name"
	r := l.apply(applySvc(changed, other, bad))
	var fe *wire.FieldError
	if !errors.As(r.Err, &fe) || fe.Field != "name" || !errors.Is(r.Err, wire.ErrInvalid) {
		t.Fatalf("error %v, want a *FieldError on name wrapping ErrInvalid", r.Err)
	}
	if !strings.Contains(r.Err.Error(), "service 2") {
		t.Errorf("error %q does not say which document is invalid (service 2)", r.Err)
	}
	if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
		t.Errorf("a refused apply changed the state:\nbefore %+v\nafter  %+v", before, after)
	}
}

func TestFSMApplyFillsDefaults(t *testing.T) {
	l := newLog(t)
	r := l.must(applySvc(wire.Service{Namespace: "prod", Name: "db",
		Ports: []wire.Port{{Name: "pg", Number: 5432}},
		Check: &wire.Check{Type: "http"}}))
	half, ten := 0.5, 10
	want := wire.Service{
		Namespace: "prod", Name: "db",
		Ports:      []wire.Port{{Name: "pg", Number: 5432, Protocol: "tcp"}},
		Capability: wire.Capability{Readiness: "probe"},
		Check: &wire.Check{Type: "http", Port: "pg", Path: "/",
			Interval: wire.Duration(wire.DefaultCheckInterval), Timeout: wire.Duration(wire.DefaultCheckTimeout)},
		Policy: wire.Policy{
			DNSTTL: wire.Duration(wire.DefaultDNSTTL), ARecordLimit: wire.DefaultARecordLimit,
			MinHealthyFraction: &half, WithdrawAfter: wire.DefaultWithdrawAfter,
			AdmitAfter: wire.DefaultAdmitAfter, AdmitMin: ptr(wire.Duration(wire.DefaultAdmitMin)),
			SlowStart: ptr(wire.Duration(wire.DefaultSlowStart)), DrainWindow: wire.Duration(wire.DefaultDrainWindow),
			LeaseTTL: wire.Duration(wire.DefaultLeaseTTL), ShrinkCap: wire.DefaultShrinkCap,
			MaxEjectionPercent: &ten, FlapLimit: ptr(wire.DefaultFlapLimit),
			OutcomeQuorum: wire.DefaultOutcomeQuorum, CorrelatedFailureFraction: wire.DefaultCorrelatedFailure,
		},
		Revision: r.Rev,
	}
	got := l.f.state().Services
	if len(got) != 1 || !reflect.DeepEqual(got[0], want) {
		t.Errorf("stored services\n%+v\nwant\n%+v", got, []wire.Service{want})
	}
}

// TestFSMIdempotentApplyCreatesNoEvent: a retried write changes nothing
// and leaves no audit entry.
func TestFSMIdempotentApplyCreatesNoEvent(t *testing.T) {
	ok := wire.Report{Ready: true, Dependencies: map[string]wire.DependencyState{"db": wire.DepOK}}
	tests := []struct {
		name  string
		setup func(l *fsmLog) uint64 // returns the incarnation
		retry func(inc uint64) command
	}{
		{"apply the same service", func(l *fsmLog) uint64 { return 0 },
			func(uint64) command { return applySvc(webService()) }},
		{"apply the same service with its defaults spelled out", func(l *fsmLog) uint64 { return 0 },
			func(uint64) command { return applySvc(webService().WithDefaults()) }},
		{"register the same instance", func(l *fsmLog) uint64 { return l.must(registerCmd("a")).Instance.Incarnation },
			func(uint64) command { return registerCmd("a") }},
		{"drain a draining instance", func(l *fsmLog) uint64 {
			inc := l.must(registerCmd("a")).Instance.Incarnation
			l.must(mutateCmd(opDrain, "a", inc))
			return inc
		}, func(inc uint64) command { return mutateCmd(opDrain, "a", inc) }},
		{"deregister a terminated instance", func(l *fsmLog) uint64 {
			inc := l.must(registerCmd("a")).Instance.Incarnation
			l.must(mutateCmd(opDeregister, "a", inc))
			return inc
		}, func(inc uint64) command { return mutateCmd(opDeregister, "a", inc) }},
		{"report the same", func(l *fsmLog) uint64 {
			inc := l.must(registerCmd("a")).Instance.Incarnation
			l.must(reportCmd("a", inc, ok))
			return inc
		}, func(inc uint64) command { return reportCmd("a", inc, ok) }},
		{"report the same, no dependencies", func(l *fsmLog) uint64 {
			inc := l.must(registerCmd("a")).Instance.Incarnation
			l.must(reportCmd("a", inc, wire.Report{Ready: true}))
			return inc
		}, func(inc uint64) command { return reportCmd("a", inc, wire.Report{Ready: true}) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLog(t)
			l.must(applySvc(webService()))
			inc := tt.setup(l)
			before := l.f.state()
			l.must(tt.retry(inc))
			after := l.f.state()
			if after.EventSeq != before.EventSeq || len(after.Events) != len(before.Events) {
				t.Errorf("the retry recorded %d events: %+v", after.EventSeq-before.EventSeq, after.Events[len(before.Events):])
			}
			if !reflect.DeepEqual(before.Services, after.Services) {
				t.Errorf("the retry changed the services:\nbefore %+v\nafter  %+v", before.Services, after.Services)
			}
			for i := range after.Instances {
				b, a := before.Instances[i], after.Instances[i]
				// A retry is a sign of life: it may move the lease
				// deadline and the report time, nothing else.
				b.LeaseDeadline, a.LeaseDeadline = time.Time{}, time.Time{}
				if b.Report != nil && a.Report != nil {
					b.Report.At, a.Report.At = time.Time{}, time.Time{}
				}
				if !reflect.DeepEqual(a, b) {
					t.Errorf("the retry changed instance %s:\nbefore %+v\nafter  %+v", a.Key(), b, a)
				}
			}
		})
	}
}

func TestFSMRegisterRetryWithNewLifecycleKeepsIncarnation(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	c := registerCmd("a")
	c.Register.Lifecycle = "starting"
	first := l.must(c).Instance
	c = registerCmd("a")
	c.Register.Lifecycle = "ready"
	r := l.must(c)
	if r.Created || r.Instance.Incarnation != first.Incarnation || r.Instance.Lifecycle != status.Ready {
		t.Errorf("starting→ready retry: created=%t incarnation %d lifecycle %s, want false %d ready",
			r.Created, r.Instance.Incarnation, r.Instance.Lifecycle, first.Incarnation)
	}
	// A different registration that names the record it replaces is a
	// new incarnation.
	c = registerCmd("a", "10.0.0.2")
	c.Register.Replaces = first.Incarnation
	r = l.must(c)
	if !r.Created || r.Instance.Incarnation <= first.Incarnation {
		t.Errorf("new addresses: created=%t incarnation %d, want true and > %d", r.Created, r.Instance.Incarnation, first.Incarnation)
	}
}

func TestFSMAuditRingIsCapped(t *testing.T) {
	l := newLog(t)
	const extra = 25
	for i := 0; i < AuditCapacity+extra; i++ {
		l.must(command{Op: opAudit, Event: &wire.Event{Kind: wire.EventReported, Namespace: "prod", Service: "web",
			Reason: fmt.Sprint(i), Seq: 999999 /* ignored: the FSM numbers events */}})
	}
	st := l.f.state()
	if len(st.Events) != AuditCapacity {
		t.Fatalf("%d events kept, want %d", len(st.Events), AuditCapacity)
	}
	if st.EventSeq != AuditCapacity+extra {
		t.Errorf("event sequence %d, want %d", st.EventSeq, AuditCapacity+extra)
	}
	for i, e := range st.Events {
		if want := uint64(extra + i + 1); e.Seq != want {
			t.Fatalf("event %d has Seq %d, want %d (oldest dropped first, Seq increasing by one)", i, e.Seq, want)
		}
		if want := fmt.Sprint(extra + i); e.Reason != want {
			t.Fatalf("event %d is %q, want %q", i, e.Reason, want)
		}
	}
}

func TestFSMHousekeepTerminatesOnlyMatchingDrainingInstance(t *testing.T) {
	tests := []struct {
		name      string
		lifecycle status.Lifecycle
		staleInc  bool
		want      status.Lifecycle
	}{
		{"draining, current incarnation", status.Draining, false, status.Terminated},
		{"draining, stale incarnation", status.Draining, true, status.Draining},
		{"ready, current incarnation", status.Ready, false, status.Ready},
		{"starting, current incarnation", status.Starting, false, status.Starting},
		{"terminated, current incarnation", status.Terminated, false, status.Terminated},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLog(t)
			l.must(applySvc(webService()))
			c := registerCmd("a")
			if tt.lifecycle == status.Starting {
				c.Register.Lifecycle = "starting"
			}
			inc := l.must(c).Instance.Incarnation
			switch tt.lifecycle {
			case status.Draining:
				l.must(mutateCmd(opDrain, "a", inc))
			case status.Terminated:
				l.must(mutateCmd(opDeregister, "a", inc))
			}
			fenceInc := inc
			if tt.staleInc {
				fenceInc = inc - 1
			}
			before := instanceOf(t, l.f, webKey("a"))
			seq := l.f.state().EventSeq
			l.must(command{Op: opHousekeep, Actor: "node:n1", Terminate: []fence{{webKey("a"), fenceInc}}})
			after := instanceOf(t, l.f, webKey("a"))
			if after.Lifecycle != tt.want {
				t.Fatalf("lifecycle %s, want %s", after.Lifecycle, tt.want)
			}
			st := l.f.state()
			if tt.want == status.Terminated && tt.lifecycle == status.Draining {
				if after.TerminatedAt != l.now {
					t.Errorf("TerminatedAt %v, want the entry's time %v", after.TerminatedAt, l.now)
				}
				if e := st.Events[len(st.Events)-1]; st.EventSeq != seq+1 || e.Kind != wire.EventTerminated || e.Incarnation != inc {
					t.Errorf("last event %+v (seq %d→%d), want one %s event for incarnation %d", e, seq, st.EventSeq, wire.EventTerminated, inc)
				}
				return
			}
			if !reflect.DeepEqual(before, after) || st.EventSeq != seq {
				t.Errorf("housekeeping changed what it must not:\nbefore %+v\nafter  %+v\nevents %d→%d", before, after, seq, st.EventSeq)
			}
		})
	}
}

func TestFSMHousekeepPrunesOnlyOldTombstones(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	incs := map[string]uint64{}
	for _, id := range []string{"old-tomb", "edge-tomb", "new-tomb", "old-draining", "ready"} {
		incs[id] = l.must(registerCmd(id)).Instance.Incarnation
	}
	l.must(mutateCmd(opDeregister, "old-tomb", incs["old-tomb"]))
	l.must(mutateCmd(opDrain, "old-draining", incs["old-draining"]))
	l.must(mutateCmd(opDeregister, "edge-tomb", incs["edge-tomb"]))
	cut := l.now // edge-tomb was terminated exactly at the cut: kept
	l.must(mutateCmd(opDeregister, "new-tomb", incs["new-tomb"]))
	l.must(command{Op: opHousekeep, PruneBefore: cut})

	var got []string
	for _, in := range l.f.state().Instances {
		got = append(got, in.ID)
	}
	want := []string{"edge-tomb", "new-tomb", "old-draining", "ready"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("instances after pruning before %v: %v, want %v", cut, got, want)
	}
	// The pruned instance's incarnation is not reused.
	if r := l.must(registerCmd("old-tomb")); r.Instance.Incarnation <= incs["ready"] {
		t.Errorf("re-registered pruned instance got incarnation %d, want > %d", r.Instance.Incarnation, incs["ready"])
	}
}

func TestFSMLeaseCheckpoint(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	reg := l.must(registerCmd("a")).Instance
	inc, d0 := reg.Incarnation, reg.LeaseDeadline
	later := d0.Add(time.Minute)
	tests := []struct {
		name  string
		lease leaseUpdate
		want  time.Time
	}{
		{"stale incarnation ignored", leaseUpdate{fence{webKey("a"), inc - 1}, later}, d0},
		{"future incarnation ignored", leaseUpdate{fence{webKey("a"), inc + 1}, later}, d0},
		{"unknown instance ignored", leaseUpdate{fence{webKey("zz"), inc}, later}, d0},
		{"earlier deadline ignored", leaseUpdate{fence{webKey("a"), inc}, d0.Add(-time.Second)}, d0},
		{"later deadline extends", leaseUpdate{fence{webKey("a"), inc}, later}, later},
		{"never moves back", leaseUpdate{fence{webKey("a"), inc}, d0}, later},
	}
	for _, tt := range tests {
		l.must(command{Op: opHousekeep, Leases: []leaseUpdate{tt.lease}})
		if got := instanceOf(t, l.f, webKey("a")).LeaseDeadline; !got.Equal(tt.want) {
			t.Errorf("%s: deadline %v, want %v", tt.name, got, tt.want)
		}
	}
	l.must(mutateCmd(opDeregister, "a", inc))
	l.must(command{Op: opHousekeep, Leases: []leaseUpdate{{fence{webKey("a"), inc}, later.Add(time.Hour)}}})
	if got := instanceOf(t, l.f, webKey("a")).LeaseDeadline; !got.Equal(later) {
		t.Errorf("a terminated instance's lease moved to %v", got)
	}
}

func TestFSMReportRules(t *testing.T) {
	tests := []struct {
		name    string
		report  *wire.Report
		wantErr error
		field   string
	}{
		{"declared dependencies", &wire.Report{Ready: true, Dependencies: map[string]wire.DependencyState{"db": wire.DepOK, "cache": wire.DepFailed}}, nil, ""},
		{"undeclared dependency", &wire.Report{Ready: true, Dependencies: map[string]wire.DependencyState{"db": wire.DepOK, "queue": wire.DepOK}}, wire.ErrInvalid, "dependencies"},
		{"unknown state", &wire.Report{Ready: true, Dependencies: map[string]wire.DependencyState{"db": "meh"}}, wire.ErrInvalid, "dependencies"},
		{"missing body", nil, wire.ErrInvalid, "body"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newLog(t)
			l.must(applySvc(webService()))
			inc := l.must(registerCmd("a")).Instance.Incarnation
			before := withoutRev(l.f)
			c := mutateCmd(opReport, "a", inc)
			c.Report = tt.report
			r := l.apply(c)
			if tt.wantErr == nil {
				if r.Err != nil {
					t.Fatalf("report refused: %v", r.Err)
				}
				if got := r.Instance.Report; got == nil || !reflect.DeepEqual(got.Dependencies, tt.report.Dependencies) || got.At != l.now {
					t.Errorf("stored report %+v, want %+v at %v", got, tt.report, l.now)
				}
				return
			}
			var fe *wire.FieldError
			if !errors.Is(r.Err, tt.wantErr) || !errors.As(r.Err, &fe) || fe.Field != tt.field {
				t.Fatalf("error %v, want %v on field %q", r.Err, tt.wantErr, tt.field)
			}
			if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
				t.Errorf("a refused report changed the state:\nbefore %+v\nafter  %+v", before, after)
			}
		})
	}
}

func TestFSMMutationsOfUnknownOrFencedInstances(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	inc := l.must(registerCmd("a")).Instance.Incarnation
	tests := []struct {
		name string
		c    command
		want error
	}{
		{"drain unknown", mutateCmd(opDrain, "zz", inc), ErrNotFound},
		{"drain stale", mutateCmd(opDrain, "a", inc-1), ErrFenced},
		{"drain future", mutateCmd(opDrain, "a", inc+1), ErrFenced},
		{"deregister stale", mutateCmd(opDeregister, "a", 0), ErrFenced},
		{"report stale", reportCmd("a", inc+7, wire.Report{Ready: true}), ErrFenced},
		{"register for an undefined service", command{Op: opRegister, Key: wire.InstanceKey{Namespace: "prod", Service: "nope", ID: "a"},
			Register: &wire.Registration{ID: "a", Addresses: []string{"10.0.0.1"}, Ports: map[string]int{"http": 1}}}, ErrNotFound},
		{"register without a body", command{Op: opRegister, Key: webKey("a")}, wire.ErrInvalid},
	}
	for _, tt := range tests {
		before := withoutRev(l.f)
		r := l.apply(tt.c)
		if !errors.Is(r.Err, tt.want) {
			t.Errorf("%s: error %v, want %v", tt.name, r.Err, tt.want)
		}
		if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
			t.Errorf("%s changed the state", tt.name)
		}
	}
	// Once deregistered, drain and report are fenced even with the
	// current incarnation.
	l.must(mutateCmd(opDeregister, "a", inc))
	for _, c := range []command{mutateCmd(opDrain, "a", inc), reportCmd("a", inc, wire.Report{Ready: true})} {
		if r := l.apply(c); !errors.Is(r.Err, ErrFenced) {
			t.Errorf("%s of a terminated instance: error %v, want ErrFenced", c.Op, r.Err)
		}
	}
}

func TestFSMMembersAndAudit(t *testing.T) {
	l := newLog(t)
	l.must(command{Op: opSetMember, Member: &wire.Member{NodeID: "n2", RaftAddr: "h:1", HTTPAddr: "h:2", Leader: true, Voter: true}})
	l.must(command{Op: opSetMember, Member: &wire.Member{NodeID: "n1", RaftAddr: "h:3", HTTPAddr: "h:4"}})
	l.must(command{Op: opDelMember, Member: &wire.Member{NodeID: "n1"}})
	l.must(command{Op: opSetMember}) // no member: nothing to do
	want := []wire.Member{{NodeID: "n2", RaftAddr: "h:1", HTTPAddr: "h:2"}}
	if got := l.f.state().Members; !reflect.DeepEqual(got, want) {
		t.Errorf("members %+v, want %+v (leader and voter are never stored)", got, want)
	}
}

func TestSnapshotRestoreReplacesState(t *testing.T) {
	a := newLog(t)
	a.must(applySvc(webService()))
	inc := a.must(registerCmd("a")).Instance.Incarnation
	a.must(reportCmd("a", inc, wire.Report{Ready: true, Dependencies: map[string]wire.DependencyState{"db": wire.DepOK}}))
	a.must(command{Op: opSetMember, Member: &wire.Member{NodeID: "n1", RaftAddr: "h:1", HTTPAddr: "h:2"}})

	// The target already holds other state; Restore must discard it.
	b := newLog(t)
	other := webService()
	other.Name = "other"
	b.must(applySvc(other))
	b.must(command{Op: opSetMember, Member: &wire.Member{NodeID: "n9"}})
	roundTrip(t, a.f, b.f)
	if want, got := a.f.state(), b.f.state(); !reflect.DeepEqual(want, got) {
		t.Errorf("restored state\n%+v\nwant\n%+v", got, want)
	}
}

func TestRestoreRefusesBadSnapshots(t *testing.T) {
	for _, data := range []string{"", "{", `{"rev": 1, "surprise": true}`} {
		f := newFSM()
		if err := f.Restore(io.NopCloser(strings.NewReader(data))); err == nil {
			t.Errorf("Restore(%q) succeeded", data)
		}
	}
}

// TestRestoredReplicaRecordsTheSameEvents is the regression test for a
// divergence found by TestPropSnapshotRestore: a report without
// dependencies is stored with an empty map, which a snapshot restores as
// nil, and the restored replica then took a repeat of the same report for
// news and recorded an audit event the other replicas did not.
func TestRestoredReplicaRecordsTheSameEvents(t *testing.T) {
	a := newLog(t)
	a.must(applySvc(webService()))
	inc := a.must(registerCmd("a")).Instance.Incarnation
	a.must(reportCmd("a", inc, wire.Report{Ready: true}))

	restored := newFSM()
	roundTrip(t, a.f, restored)
	again := reportCmd("a", inc, wire.Report{Ready: true})
	again.At = a.now.Add(time.Second)
	applyAt(t, restored, a.index+1, again)
	a.must(again)
	if want, got := a.f.state(), restored.state(); !reflect.DeepEqual(want, got) {
		t.Errorf("restored replica diverged: %s", firstDiff(got, want))
	}
}

// TestFSMRefusalsHaveTheirOwnRing: refusals, however many, never push the
// lifecycle history out of the trail.
func TestFSMRefusalsHaveTheirOwnRing(t *testing.T) {
	l := newLog(t)
	l.must(command{Op: opAudit, Event: &wire.Event{Kind: wire.EventReported, Namespace: "prod", Service: "web", Reason: "history"}})
	for i := 0; i < 3*RefusalCapacity; i++ {
		l.must(command{Op: opAudit, Event: &wire.Event{Kind: wire.EventRefused, Namespace: "prod", Service: "web", Reason: fmt.Sprint(i)}})
	}
	st := l.f.state()
	if len(st.Events) != 1 || st.Events[0].Reason != "history" {
		t.Fatalf("history after a flood of refusals: %+v", st.Events)
	}
	if len(st.Refusals) != RefusalCapacity || st.Refusals[RefusalCapacity-1].Seq != 1+3*RefusalCapacity {
		t.Fatalf("%d refusals kept (newest seq %d), want %d ending at %d", len(st.Refusals),
			st.Refusals[len(st.Refusals)-1].Seq, RefusalCapacity, 1+3*RefusalCapacity)
	}
}

// TestFSMRegistrationID: a registration id tells a restarted process from
// a retry when nothing else differs; a retry never moves ready back to
// starting.
func TestFSMRegistrationID(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	c := registerCmd("a")
	c.Register.RegistrationID = "boot-1"
	first := l.must(c).Instance
	if again := l.must(c); again.Created || again.Instance.Incarnation != first.Incarnation {
		t.Fatalf("retry with the same registration id: created=%t incarnation %d, want false %d", again.Created, again.Instance.Incarnation, first.Incarnation)
	}
	c = registerCmd("a")
	c.Register.RegistrationID = "boot-2"
	second := l.must(c)
	if !second.Created || second.Instance.Incarnation <= first.Incarnation {
		t.Fatalf("new registration id: created=%t incarnation %d, want a new one above %d", second.Created, second.Instance.Incarnation, first.Incarnation)
	}
	if r := l.apply(command{Op: opDrain, Key: webKey("a"), Incarnation: first.Incarnation}); !errors.Is(r.Err, ErrFenced) {
		t.Fatalf("the old process drained the new one: %v", r.Err)
	}
	c.Register.Lifecycle = "starting"
	if r := l.must(c); r.Created || r.Instance.Lifecycle != status.Ready {
		t.Fatalf("a late retry saying starting: created=%t lifecycle %s, want false ready", r.Created, r.Instance.Lifecycle)
	}
	// A late retry of the predecessor's registration does not fence its
	// successor.
	late := registerCmd("a")
	late.Register.RegistrationID = "boot-1"
	if r := l.apply(late); !errors.Is(r.Err, ErrFenced) {
		t.Fatalf("late retry of a replaced registration id: %+v, %v; want ErrFenced", r.Instance, r.Err)
	}
	if in := l.f.instances.get(webKey("a")); in.incarnation != second.Instance.Incarnation || in.registrationID() != "boot-2" {
		t.Fatalf("after the late retry the record is %+v; want incarnation %d of boot-2", in, second.Instance.Incarnation)
	}
}

// TestFSMRetryMatchesAfterPolicyChange: a registration that left
// lease_ttl to the policy is still an identical retry after the policy's
// lease_ttl changes.
func TestFSMRetryMatchesAfterPolicyChange(t *testing.T) {
	l := newLog(t)
	l.must(applySvc(webService()))
	first := l.must(registerCmd("a")).Instance
	svc := webService()
	svc.Policy.LeaseTTL = wire.Duration(time.Minute)
	l.must(applySvc(svc))
	if r := l.must(registerCmd("a")); r.Created || r.Instance.Incarnation != first.Incarnation {
		t.Fatalf("identical retry after a policy change: created=%t incarnation %d, want the committed %d", r.Created, r.Instance.Incarnation, first.Incarnation)
	}
}
func ptr[T any](v T) *T { return &v }
