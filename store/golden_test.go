package store

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/golden"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// goldenCommands are log entries that carry every lifecycle a
// registration names and every verdict the evaluator commits, in both
// the JSON and the binary health form.
func goldenCommands() []command {
	at := t0.Add(time.Minute)
	reg := func(id string, lc string) command {
		return command{Op: opRegister, At: at, Actor: "registrar", Key: webKey(id), Register: &wire.Registration{
			Namespace: "prod", Service: "web", ID: id, Addresses: []string{"10.0.0.9"}, Ports: map[string]int{"http": 8080},
			Weight: 100, LeaseTTL: wire.Duration(30 * time.Second), Lifecycle: lc}}
	}
	ev := &wire.Evidence{Class: "probe", Observer: "n1", At: at}
	var updates []HealthUpdate
	for i, v := range []status.Verdict{status.Unknown, status.Healthy, status.Degraded, status.Unhealthy, status.Quarantined} {
		h := wire.Health{Incarnation: uint64(i + 1), Verdict: v, Eligible: i < 3, HealthEligible: i < 2, Flags: status.Flags(1<<i | 1<<(6-i)),
			EligibleSince: at, Reasons: []string{v.String()}, At: at}
		if i >= 3 {
			h.FailingSince = at
			h.Failing = []wire.FailingClass{{Class: "probe", Since: at, Hard: i == 3, Why: "refused"}}
			h.QuarantineLevel, h.QuarantineUntil = i-3, at.Add(time.Minute)
			h.Evidence = ev
		}
		u := HealthUpdate{Key: webKey(v.String()), Health: h}
		if i == 4 {
			u.Transition = &Transition{From: "eligible", To: "withdrawn", Reason: "flapping"}
		}
		updates = append(updates, u)
	}
	health := command{Op: opHealth, At: at, Actor: "evaluator@n1", Health: updates,
		ServiceEvents: []ServiceEvent{{Kind: wire.EventHealthDisregarded, Namespace: "prod", Service: "web", Detail: "2 of 5"}}}
	// A health command with anything else set goes as JSON.
	asJSON := health
	asJSON.Incarnation = 1
	return []command{reg("s", "starting"), reg("r", "ready"), health, asJSON,
		mutateCmd(opDrain, "r", 2), {Op: opHousekeep, At: at, Terminate: []fence{{webKey("r"), 2}}}}
}

// TestGoldenCommands pins how the leader writes log entries: a replica
// of another version reads them.
func TestGoldenCommands(t *testing.T) {
	var out strings.Builder
	for _, c := range goldenCommands() {
		b, err := encodeCommand(c)
		if err != nil {
			t.Fatal(err)
		}
		if b[0] == healthMagic {
			out.WriteString("binary " + hex.EncodeToString(b) + "\n")
		} else {
			out.WriteString("json " + string(b) + "\n")
		}
		back, err := decodeCommand(b)
		if err != nil {
			t.Fatalf("%s: %v", c.Op, err)
		}
		if again, _ := encodeCommand(back); !bytes.Equal(again, b) {
			t.Errorf("%s decodes and encodes back as\n%q\nnot\n%q", c.Op, again, b)
		}
	}
	golden.Check(t, "commands.golden", []byte(out.String()))
}

// TestGoldenSnapshot pins the bytes of a snapshot that holds every
// lifecycle and every verdict, and that it restores and writes back the
// same.
func TestGoldenSnapshot(t *testing.T) {
	l := goldenLog(t)
	at := l.now.Add(time.Second)
	s := l.must(command{Op: opRegister, Actor: "svc:api", Key: wire.InstanceKey{Namespace: "prod", Service: "api", ID: "s"},
		Register: &wire.Registration{ID: "s", Addresses: []string{"10.1.0.3"}, Ports: map[string]int{"grpc": 9000}, Lifecycle: "starting"}})
	y := l.f.state().Instances
	var yInc uint64
	for _, in := range y {
		if in.ID == "y" {
			yInc = in.Incarnation
		}
	}
	l.must(command{Op: opHealth, At: at, Actor: "evaluator@n1", Health: []HealthUpdate{
		{Key: wire.InstanceKey{Namespace: "prod", Service: "api", ID: "s"}, Health: wire.Health{Incarnation: s.Instance.Incarnation,
			Verdict: status.Unhealthy, Flags: 0x10, FailingSince: at, Reasons: []string{"lease expired"}, At: at}},
		{Key: wire.InstanceKey{Namespace: "prod", Service: "api", ID: "y"}, Health: wire.Health{Incarnation: yInc,
			Verdict: status.Degraded, Eligible: true, HealthEligible: true, Flags: 0x49, EligibleSince: at, At: at}},
	}})
	snap := snapshotBytes(t, l.f)
	golden.Check(t, "snapshot.golden", snap)
	f := newFSM()
	if err := f.Restore(nopCloser{bytes.NewReader(snap)}); err != nil {
		t.Fatal(err)
	}
	if again := snapshotBytes(t, f); !bytes.Equal(again, snap) {
		t.Errorf("the golden snapshot restores and writes back as\n%s", again)
	}
}

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }
