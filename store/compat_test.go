package store

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// The files testdata/snapshot-52b3ec4*.json were written by the code of
// 52b3ec4 (the FSM before its records were compacted) from goldenLog: the
// snapshot, and the instances as its listings showed them. The records
// changed form, not what a replica serves or writes, so:
//
//   - a snapshot written by that code restores, its instances listed as
//     that code listed them, and is written back byte for byte;
//   - the same log applied by this code snapshots to the same bytes.
const (
	oldSnapshotFile  = "testdata/snapshot-52b3ec4.json"
	oldInstancesFile = "testdata/snapshot-52b3ec4.instances.json"
)

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// snapshotBytes is what f's snapshot persists.
func snapshotBytes(t *testing.T, f *fsm) []byte {
	t.Helper()
	snap, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var sink byteSink
	if err := snap.Persist(&sink); err != nil {
		t.Fatal(err)
	}
	return sink.Bytes()
}

func instancesJSON(t *testing.T, ins []wire.Instance) []byte {
	t.Helper()
	b, err := json.MarshalIndent(ins, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestOldSnapshotRestores(t *testing.T) {
	old, listed := readFile(t, oldSnapshotFile), readFile(t, oldInstancesFile)
	f := newFSM()
	if err := f.Restore(io.NopCloser(bytes.NewReader(old))); err != nil {
		t.Fatalf("restoring the old snapshot: %v", err)
	}
	if got := instancesJSON(t, f.state().Instances); !bytes.Equal(got, listed) {
		t.Errorf("the restored instances list as\n%s\nthe old code listed\n%s", got, listed)
	}
	if got := snapshotBytes(t, f); !bytes.Equal(got, old) {
		t.Errorf("the restored replica snapshots as\n%s\nwant the old snapshot\n%s", got, old)
	}
}

func TestSameLogSameSnapshot(t *testing.T) {
	l := goldenLog(t)
	if got, want := instancesJSON(t, l.f.state().Instances), readFile(t, oldInstancesFile); !bytes.Equal(got, want) {
		t.Errorf("the log's instances list as\n%s\nthe old code listed\n%s", got, want)
	}
	if got, want := snapshotBytes(t, l.f), readFile(t, oldSnapshotFile); !bytes.Equal(got, want) {
		t.Errorf("the log snapshots as\n%s\nthe old code wrote\n%s", got, want)
	}
}

// goldenLog applies a log that leaves every kind of instance record in
// the replica: starting, ready, draining, terminated; with and without a
// registration id, retired ids, a self-report, a verdict of every shape,
// a locality, a weight, a lease left to the policy or set.
func goldenLog(t fataler) *fsmLog {
	l := newLog(t)
	api := wire.Service{Namespace: "prod", Name: "api", Ports: []wire.Port{{Name: "grpc", Number: 9000}},
		Policy: wire.Policy{LeaseTTL: wire.Duration(10 * time.Second)}}
	l.must(applySvc(webService(), api))
	reg := func(svc, id string, r wire.Registration, actor string) result {
		r.ID = id
		if r.Ports == nil {
			r.Ports = map[string]int{"http": 8080}
			if svc == "api" {
				r.Ports = map[string]int{"grpc": 9000}
			}
		}
		return l.must(command{Op: opRegister, Actor: actor, Key: wire.InstanceKey{Namespace: "prod", Service: svc, ID: id}, Register: &r})
	}
	a := reg("web", "a", wire.Registration{Addresses: []string{"10.0.0.1"}, Region: "eu", Zone: "eu-1", Weight: 50}, "registrar")
	b := reg("web", "b", wire.Registration{Addresses: []string{"10.0.0.2", "2001:db8::2"}, Ports: map[string]int{"http": 8080, "admin": 9090},
		Lifecycle: "starting", LeaseTTL: wire.Duration(5 * time.Second), RegistrationID: "boot-1"}, "registrar")
	reg("web", "b", wire.Registration{Addresses: []string{"10.0.0.2"}, RegistrationID: "boot-2"}, "registrar")
	c := reg("web", "b", wire.Registration{Addresses: []string{"10.0.0.3"}, RegistrationID: "boot-3"}, "other")
	_ = b
	d := reg("web", "d", wire.Registration{Addresses: []string{"10.0.0.4"}, Region: "eu", Zone: "eu-2"}, "registrar")
	e := reg("web", "e", wire.Registration{Addresses: []string{"10.0.0.5"}}, "registrar")
	x := reg("api", "x", wire.Registration{Addresses: []string{"10.1.0.1"}, Region: "us", Zone: "us-1", Weight: 65535}, "svc:api")
	reg("api", "y", wire.Registration{Addresses: []string{"10.1.0.2"}, LeaseTTL: wire.Duration(time.Minute)}, "svc:api")

	l.must(reportCmd("a", a.Instance.Incarnation, wire.Report{Ready: false, Dependencies: map[string]wire.DependencyState{"db": wire.DepFailed, "cache": wire.DepOK}}))
	l.must(reportCmd("d", d.Instance.Incarnation, wire.Report{Ready: true}))
	l.must(mutateCmd(opDrain, "d", d.Instance.Incarnation))
	l.must(mutateCmd(opDeregister, "e", e.Instance.Incarnation))
	l.must(command{Op: opHousekeep, Leases: []leaseUpdate{{fence{webKey("a"), a.Instance.Incarnation}, l.now.Add(time.Minute)}}})

	at := l.now.Add(time.Second)
	ns := time.Date(2025, 3, 1, 12, 0, 1, 123456789, time.UTC)
	full := wire.Health{
		Incarnation: a.Instance.Incarnation, Verdict: status.Quarantined, Eligible: false, HealthEligible: false, Flags: 0x15,
		EligibleSince: ns, FailingSince: ns.Add(time.Second),
		Failing: []wire.FailingClass{
			{Class: "probe", Since: ns, Hard: true, Why: "connection refused"},
			{Class: "report", Since: ns.Add(-time.Hour), Why: "not ready: é"},
		},
		QuarantineLevel: 3, QuarantineUntil: ns.Add(time.Minute),
		Reasons:  []string{"probe failing", "report failing", "probe failing"},
		Evidence: &wire.Evidence{Class: "probe", Observer: "n1", At: ns},
		At:       at,
	}
	healthy := wire.Health{Incarnation: c.Instance.Incarnation, Verdict: status.Healthy, Eligible: true, HealthEligible: true, Flags: 1,
		EligibleSince: ns, Evidence: &wire.Evidence{Class: "probe", Observer: "n2", At: ns.Add(time.Second)}, At: at}
	unknown := wire.Health{Incarnation: x.Instance.Incarnation, Verdict: status.Unknown, Eligible: true, HealthEligible: true, Flags: 1,
		EligibleSince: ns, Reasons: []string{"no fresh evidence (silence is unknown)"}, At: at}
	zeroEv := wire.Health{Incarnation: d.Instance.Incarnation, Verdict: status.Unknown, Evidence: &wire.Evidence{},
		Reasons: []string{"lifecycle draining"}, At: at}
	l.must(command{Op: opHealth, At: at, Actor: "evaluator@n1", Health: []HealthUpdate{
		{Key: webKey("a"), Health: full, Transition: &Transition{From: "eligible", To: "withdrawn", Reason: "probe failing"}},
		{Key: webKey("b"), Health: healthy},
		{Key: webKey("d"), Health: zeroEv},
		{Key: wire.InstanceKey{Namespace: "prod", Service: "api", ID: "x"}, Health: unknown},
	}})
	return l
}
