package store

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// sampleHealthCommands are evaluator commits with every field of the
// binary form in use, and the edge cases: empty lists, zero times, no
// evidence, no transition, service events alone.
func sampleHealthCommands(at time.Time) []command {
	ns := time.Date(2025, 3, 1, 12, 0, 1, 123456789, time.UTC)
	full := wire.Health{
		Incarnation: 1, Verdict: status.Unhealthy, Eligible: false, HealthEligible: true, Flags: 0x15,
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
	bare := wire.Health{Incarnation: 2, Verdict: status.Healthy, Eligible: true, HealthEligible: true, At: at}
	negative := wire.Health{Incarnation: 1 << 40, Verdict: status.Unknown, QuarantineLevel: -1,
		EligibleSince: time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		Failing:       []wire.FailingClass{}, Reasons: []string{}, Evidence: &wire.Evidence{}}
	return []command{
		{Op: opHealth, At: at, Actor: "evaluator@n1", Health: []HealthUpdate{
			{Key: webKey("a"), Health: full, Transition: &Transition{From: "eligible", To: "ineligible", Reason: "probe failing"}},
			{Key: webKey("b"), Health: bare},
			{Key: webKey("c"), Health: negative, Transition: &Transition{}},
		}},
		{Op: opHealth, At: at, Actor: "evaluator@n1", ServiceEvents: []ServiceEvent{
			{Kind: wire.EventHealthDisregarded, Namespace: "prod", Service: "web", Detail: "3 of 4 failing"},
			{Kind: wire.EventQuarantined, Namespace: "prod", Service: "web", Instance: "a", Incarnation: 1, Detail: "flapping"},
		}},
		{Op: opHealth, At: at, Actor: "evaluator@n1",
			Health:        []HealthUpdate{{Key: webKey("a"), Health: bare}},
			ServiceEvents: []ServiceEvent{{Kind: wire.EventProbesSetAside, Detail: "zone a"}}},
		{Op: opHealth, At: at},
	}
}

// TestHealthEntryReadsAsJSON checks that a binary entry reads back as the
// same command its JSON form does, so replicas apply the same state
// whichever form the leader wrote.
func TestHealthEntryReadsAsJSON(t *testing.T) {
	at := t0.Add(time.Hour)
	for i, c := range sampleHealthCommands(at) {
		b, err := encodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] != healthMagic {
			t.Fatalf("command %d: encoded as %q, want the binary form", i, b[:1])
		}
		got, err := decodeCommand(b)
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		j, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		want, err := decodeCommand(j)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("command %d:\nbinary %+v\n  json %+v", i, got, want)
		}
		again, err := encodeCommand(got)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("command %d: re-encoding changed the bytes (%v)", i, err)
		}
	}
}

// TestHealthEntryFallsBackToJSON: what the binary form cannot carry goes
// as JSON rather than failing the commit.
func TestHealthEntryFallsBackToJSON(t *testing.T) {
	for name, h := range map[string]wire.Health{
		"invalid UTF-8": {Reasons: []string{"bad\xff"}},
		"year 10000":    {At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"another field": {},
	} {
		c := command{Op: opHealth, At: t0, Health: []HealthUpdate{{Key: webKey("a"), Health: h}}}
		if name == "another field" {
			c.Incarnation = 7
		}
		b, err := encodeCommand(c)
		if name == "year 10000" {
			// JSON cannot write it either: the commit fails as it did.
			if err == nil {
				t.Errorf("%s: encoded, want an error", name)
			}
			continue
		}
		if err != nil || b[0] != '{' {
			t.Errorf("%s: got %q, %v; want JSON", name, b, err)
		}
	}
}

// TestHealthEntryRefusesDamage: every truncation and every changed
// version is an error, never a panic or a silently different command.
func TestHealthEntryRefusesDamage(t *testing.T) {
	b, err := encodeHealthEntry(sampleHealthCommands(t0)[0])
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(b); n++ {
		if _, err := decodeHealthEntry(b[:n]); err == nil {
			t.Fatalf("truncated to %d of %d bytes: decoded", n, len(b))
		}
	}
	if _, err := decodeHealthEntry(append(slices.Clone(b), 0)); err == nil {
		t.Fatal("trailing byte: decoded")
	}
	v2 := slices.Clone(b)
	v2[1] = healthVersion + 1
	if _, err := decodeHealthEntry(v2); err == nil {
		t.Fatal("unknown version: decoded")
	}
	r := applyRaw(t, newFSM(), 1, v2)
	if r.Err == nil {
		t.Fatal("FSM applied an entry of an unknown version")
	}
}

// TestHealthEntryKnowsEveryField fails when a type the binary form
// carries gains or loses a field: add it to encodeHealthEntry and
// decodeHealthEntry (and to sampleHealthCommands), then here.
func TestHealthEntryKnowsEveryField(t *testing.T) {
	known := map[reflect.Type][]string{
		reflect.TypeFor[HealthUpdate]():     {"Key", "Health", "Transition"},
		reflect.TypeFor[wire.InstanceKey](): {"Namespace", "Service", "ID"},
		reflect.TypeFor[wire.Health](): {"Incarnation", "Verdict", "Eligible", "HealthEligible", "Flags",
			"EligibleSince", "FailingSince", "Failing", "QuarantineLevel", "QuarantineUntil", "Reasons", "Evidence", "At"},
		reflect.TypeFor[wire.FailingClass](): {"Class", "Since", "Hard", "Why"},
		reflect.TypeFor[wire.Evidence]():     {"Class", "Observer", "At"},
		reflect.TypeFor[Transition]():        {"From", "To", "Reason"},
		reflect.TypeFor[ServiceEvent]():      {"Kind", "Namespace", "Service", "Instance", "Incarnation", "Detail"},
	}
	for typ, want := range known {
		var got []string
		for f := range typ.Fields() {
			got = append(got, f.Name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s has fields %v; the binary health entry knows %v", typ, got, want)
		}
	}
}

// FuzzDecodeHealthEntry: any bytes decode to a command or an error, and
// what decodes encodes back to the same bytes.
func FuzzDecodeHealthEntry(f *testing.F) {
	for _, c := range sampleHealthCommands(t0) {
		b, err := encodeHealthEntry(c)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{healthMagic, healthVersion})
	f.Add([]byte{healthMagic, healthVersion, 1, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := decodeHealthEntry(data)
		if err != nil {
			return
		}
		b, err := encodeHealthEntry(c)
		if err != nil {
			t.Fatalf("decoded %+v but cannot encode it: %v", c, err)
		}
		if !bytes.Equal(b, data) {
			t.Fatalf("decode/encode changed the entry:\n%x\n%x", data, b)
		}
	})
}

// BenchmarkHealthEntry encodes and decodes a round of 200 flips, in the
// binary form and in JSON.
func BenchmarkHealthEntry(b *testing.B) {
	at := t0.Add(time.Hour)
	ups := make([]HealthUpdate, 200)
	for i := range ups {
		ups[i] = HealthUpdate{Key: wire.InstanceKey{Namespace: "prod", Service: "svc-17", ID: "i-" + string(rune('a'+i%26)) + "0123456789"},
			Health: wire.Health{Incarnation: uint64(i + 1), Verdict: status.Unhealthy, HealthEligible: false, Flags: 4,
				EligibleSince: at.Add(-time.Hour), FailingSince: at,
				Failing:  []wire.FailingClass{{Class: "probe", Since: at, Why: "connection refused"}},
				Reasons:  []string{"probe failing"},
				Evidence: &wire.Evidence{Class: "probe", Observer: "n1", At: at}, At: at},
			Transition: &Transition{From: "eligible", To: "ineligible", Reason: "probe failing"}}
	}
	c := command{Op: opHealth, At: at, Actor: "evaluator@n1", Health: ups}
	for _, form := range []struct {
		name string
		enc  func(command) ([]byte, error)
	}{{"binary", encodeCommand}, {"json", func(c command) ([]byte, error) { return json.Marshal(c) }}} {
		data, err := form.enc(c)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(form.name+"/encode", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := form.enc(c); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(form.name+"/decode", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := decodeCommand(data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
