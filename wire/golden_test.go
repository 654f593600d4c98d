package wire_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/golden"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

var (
	t0 = time.Date(2025, 3, 1, 12, 0, 1, 123456789, time.UTC)
	ev = &wire.Evidence{Class: "probe", Observer: "n1", At: t0}
)

// goldenInstances is one instance of every lifecycle, with a committed
// verdict of every kind and every field of Instance and Health set
// somewhere.
func goldenInstances() []wire.Instance {
	base := func(id string, inc uint64) wire.Instance {
		return wire.Instance{Namespace: "prod", Service: "web", ID: id, Incarnation: inc,
			Addresses: []string{"10.0.0.1", "2001:db8::1"}, Ports: map[string]int{"http": 8080, "admin": 9090},
			Region: "eu", Zone: "eu-1", Weight: 100, Lifecycle: status.Ready, LeaseTTL: wire.Duration(30 * time.Second),
			LeaseDeadline: t0.Add(30 * time.Second), Registrar: "registrar", SourceRevision: inc + 1, RegisteredAt: t0}
	}
	starting := base("a", 1)
	starting.Lifecycle = status.Starting
	starting.LeaseTTLDefault = true
	starting.RegistrationID = "boot-2"
	starting.RetiredRegistrationIDs = []string{"boot-0", "boot-1"}
	starting.Report = &wire.SelfReport{Ready: false, Dependencies: map[string]wire.DependencyState{
		"db": wire.DepFailed, "cache": wire.DepOK, "queue": wire.DepDegraded}, At: t0, Reporter: "instance:a"}
	starting.Health = &wire.Health{Incarnation: 1, Verdict: status.Unknown, Reasons: []string{"lifecycle starting"}, At: t0}

	ready := base("b", 2)
	ready.Health = &wire.Health{Incarnation: 2, Verdict: status.Healthy, Eligible: true, HealthEligible: true,
		Flags: 0x01 | 0x04, EligibleSince: t0, Evidence: ev, At: t0.Add(time.Second)}

	degraded := base("c", 3)
	degraded.Health = &wire.Health{Incarnation: 3, Verdict: status.Degraded, Eligible: true, HealthEligible: true,
		Flags: 0x01 | 0x08 | 0x40, EligibleSince: t0, Reasons: []string{"dependency cache degraded"}, Evidence: ev, At: t0}

	draining := base("d", 4)
	draining.Lifecycle = status.Draining
	draining.DrainingSince = t0.Add(2 * time.Second)
	draining.Health = &wire.Health{Incarnation: 4, Verdict: status.Unhealthy, Flags: 0x10 | 0x20 | 0x02, FailingSince: t0,
		Failing: []wire.FailingClass{{Class: "probe", Since: t0, Hard: true, Why: "connection refused"},
			{Class: "report", Since: t0, Why: "not ready"}},
		Reasons: []string{"probe failing", "lifecycle draining"}, Evidence: &wire.Evidence{}, At: t0}

	terminated := base("e", 5)
	terminated.Lifecycle = status.Terminated
	terminated.DrainingSince = t0
	terminated.TerminatedAt = t0.Add(time.Minute)
	terminated.Health = &wire.Health{Incarnation: 5, Verdict: status.Quarantined, Flags: 0x80, FailingSince: t0,
		Failing:         []wire.FailingClass{{Class: "outcome", Since: t0, Why: "3 of 4 callers failing"}},
		QuarantineLevel: 2, QuarantineUntil: t0.Add(2 * time.Minute), Reasons: []string{"flapping"}, Evidence: ev, At: t0}

	bare := base("f", 6)
	return []wire.Instance{starting, ready, degraded, draining, terminated, bare}
}

func goldenService() wire.Service {
	frac, admit, slow, ej, flap := 0.25, wire.Duration(12*time.Second), wire.Duration(0), 20, 0
	return wire.Service{Namespace: "prod", Name: "web",
		Ports:      []wire.Port{{Name: "http", Number: 80, Protocol: "tcp"}, {Name: "dns", Number: 53, Protocol: "udp"}},
		Capability: wire.Capability{Readiness: "self", Dependencies: []wire.Dependency{{Name: "db"}, {Name: "cache", Shared: true}}},
		Check: &wire.Check{Type: "http", Port: "http", Path: "/healthz", Interval: wire.Duration(2 * time.Second),
			Timeout: wire.Duration(time.Second)},
		Policy: wire.Policy{DNSTTL: wire.Duration(5 * time.Second), ARecordLimit: 8, MinHealthyFraction: &frac,
			WithdrawAfter: 3, AdmitAfter: 5, AdmitMin: &admit, SlowStart: &slow, DrainWindow: wire.Duration(30 * time.Second),
			LeaseTTL: wire.Duration(30 * time.Second), ShrinkCap: 0.33, MaxEjectionPercent: &ej, OutcomeQuorum: 2,
			CorrelatedFailureFraction: 0.5, FlapLimit: &flap},
		Revision: 9}
}

func goldenEvents() []wire.Event {
	return []wire.Event{
		{Seq: 1, At: t0, Kind: wire.EventRegistered, Namespace: "prod", Service: "web", Instance: "a", Incarnation: 1,
			To: "starting", Actor: "registrar"},
		{Seq: 2, At: t0, Kind: wire.EventEligibility, Namespace: "prod", Service: "web", Instance: "b", Incarnation: 2,
			From: "eligible", To: "withdrawn", Reason: "probe failing", Evidence: ev, Actor: "evaluator@n1"},
		{Seq: 3, At: t0, Kind: wire.EventHealthDisregarded, Namespace: "prod", Service: "web", Actor: "evaluator@n1"},
	}
}

func goldenViews() map[string]any {
	tier := 1
	ep := wire.Endpoint{InstanceID: "b", Incarnation: 2, Addresses: []string{"10.0.0.2"}, Ports: map[string]int{"http": 8080},
		Region: "eu", Zone: "eu-1", Lifecycle: status.Draining, Verdict: status.Degraded, Eligible: true, Weight: 40, BaseWeight: 100,
		Reasons: []string{"slow start"}, LeaseDeadline: t0, LeaseExpiry: t0.Add(time.Second), LeaseExpired: true,
		Registrar: "registrar", Report: &wire.SelfReport{Ready: true, At: t0, Reporter: "instance:b"},
		Flags: []string{"eligible", "slow_start"}, VerdictEvidence: ev, VerdictAt: t0,
		Evidence: []wire.ClassEvidence{{Class: "probe", Observer: "n1", At: t0, OK: true, Detail: "200"}},
		Tier:     &tier, InTable: true, TableVersion: 11, TableRevision: 10,
		Evaluator: &wire.EvaluatorVerdict{Verdict: status.Unhealthy, Eligible: false, HealthEligible: false,
			Reasons: []string{"probe failing"}, Evidence: ev, At: t0}}
	bare := wire.Endpoint{InstanceID: "c", Lifecycle: status.Terminated, Verdict: status.Unknown}
	view := wire.View{Revision: 10, HealthDisregarded: true, TableVersion: 11, TableRevision: 10,
		Freshness: wire.Freshness{Stale: true, AgeSeconds: 1.5}, Endpoints: []wire.Endpoint{ep, bare}}
	return map[string]any{
		"view":   view,
		"detail": wire.ServiceDetail{Definition: goldenService(), View: view},
		"summary": wire.ServiceSummary{Namespace: "prod", Name: "web", Ports: 2, Instances: 3, Eligible: 2, Revision: 10,
			HealthDisregarded: true, Zones: []wire.ZoneCount{{Zone: "eu-1", Instances: 2, Eligible: 1}, {Instances: 1, Eligible: 1}}},
		"registered": wire.Registered{Instance: goldenInstances()[0], Created: true},
		"registration": []wire.Registration{
			{Namespace: "prod", Service: "web", ID: "a", Addresses: []string{"10.0.0.1"}, Ports: map[string]int{"http": 8080},
				Region: "eu", Zone: "eu-1", Weight: 7, LeaseTTL: wire.Duration(10 * time.Second), Lifecycle: "starting",
				RegistrationID: "boot-1", Replaces: 3},
			{ID: "b", Addresses: []string{"10.0.0.2"}, Ports: map[string]int{"http": 8080}},
		},
	}
}

func indent(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "\t")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// roundTrip decodes the golden bytes into a new value of v's type and
// encodes them again: what the API, a snapshot or a client reads back
// must be written the same.
func roundTrip(t *testing.T, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	p := reflect.New(reflect.TypeOf(v))
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(p.Interface()); err != nil {
		t.Fatalf("%s does not decode: %v", name, err)
	}
	if got := indent(t, p.Elem().Interface()); !bytes.Equal(got, b) {
		t.Errorf("%s decodes and encodes back as\n%s", name, got)
	}
}

// TestGoldenJSON pins the API's JSON (which is also the store's snapshot
// and command encoding of instances and services) byte for byte: a
// refactor of the types behind it must not change what clients and
// older replicas read.
func TestGoldenJSON(t *testing.T) {
	views := goldenViews()
	cases := []struct {
		name string
		v    any
	}{
		{"instances.golden", goldenInstances()},
		{"service.golden", goldenService()},
		{"events.golden", goldenEvents()},
		{"view.golden", views["view"]},
		{"detail.golden", views["detail"]},
		{"summary.golden", views["summary"]},
		{"registered.golden", views["registered"]},
		{"registration.golden", views["registration"]},
	}
	for _, c := range cases {
		golden.Check(t, c.name, indent(t, c.v))
		if !golden.Updating() {
			roundTrip(t, c.name, c.v)
		}
	}
}
