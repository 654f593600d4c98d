package eval

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestImportsNoServerPackages keeps the core pure: besides the standard
// library it may import only the status table's types and wire, the
// API's types (where the policy defaults live once), and so link only
// what a client of the API links.
func TestImportsNoServerPackages(t *testing.T) {
	allowed := map[string]bool{"github.com/cairn-sd/cairn/eval": true}
	for _, p := range goList(t, "github.com/cairn-sd/cairn/wire", "github.com/cairn-sd/cairn/status") {
		allowed[p.ImportPath] = true
	}
	for _, p := range goList(t, ".") {
		if !p.Standard && !allowed[p.ImportPath] {
			t.Errorf("eval depends on %s; it may import only the standard library, status and wire (and what wire links)", p.ImportPath)
		}
	}
}

type listed struct {
	ImportPath string
	Standard   bool
}

// goList returns the packages pkgs depend on, themselves included.
func goList(t *testing.T, pkgs ...string) []listed {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list", "-deps", "-json"}, pkgs...)...).Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var ps []listed
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p listed
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if len(ps) < 3 {
		t.Fatalf("go list listed %d packages", len(ps))
	}
	return ps
}

// t0 is every test's time origin.
var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

const (
	s  = time.Second
	ms = time.Millisecond
)

// sim runs successive evaluations of one service.
type sim struct {
	t   testing.TB
	p   Policy
	ins []Instance
	st  State
	res Result
}

func newSim(t testing.TB, p Policy, ins ...Instance) *sim {
	t.Helper()
	if err := p.WithDefaults().Validate(); err != nil {
		t.Fatalf("policy: %v", err)
	}
	return &sim{t: t, p: p, ins: ins}
}

// fleet returns n ready instances i0…i(n-1) in zone z1, incarnation 1.
func fleet(n int) []Instance {
	ins := make([]Instance, n)
	for i := range ins {
		ins[i] = Instance{ID: "i" + string(rune('0'+i)), Incarnation: 1, Zone: "z1", Lifecycle: Ready}
	}
	return ins
}

// step evaluates at t0+d with the given samples.
func (m *sim) step(d time.Duration, ev ...ev) Result {
	m.t.Helper()
	evidence := map[string][]Sample{}
	for _, e := range ev {
		evidence[e.id] = append(evidence[e.id], e.s)
	}
	m.res, m.st = Evaluate(m.p, m.ins, evidence, m.st, at(d))
	return m.res
}

func (m *sim) inst(id string) InstanceResult {
	m.t.Helper()
	for _, r := range m.res.Instances {
		if r.ID == id {
			return r
		}
	}
	m.t.Fatalf("no result for %s", id)
	return InstanceResult{}
}

func (m *sim) set(id string, f func(*Instance)) {
	for i := range m.ins {
		if m.ins[i].ID == id {
			f(&m.ins[i])
		}
	}
}

type ev struct {
	id string
	s  Sample
}

func probe(id string, d time.Duration, ok bool) ev {
	return ev{id, Sample{Class: ClassProbe, Observer: "n1", At: at(d), OK: ok}}
}

func hard(id string, d time.Duration) ev {
	return ev{id, Sample{Class: ClassProbe, Observer: "n1", At: at(d), Hard: true}}
}

func outcome(id string, d time.Duration, ok, failed int) ev {
	return ev{id, Sample{Class: ClassOutcome, Observer: "c1", At: at(d), Successes: ok, Failures: failed}}
}

// Ready etc. are the lifecycles, re-exported for brevity.
const (
	Starting   = status.Starting
	Ready      = status.Ready
	Draining   = status.Draining
	Terminated = status.Terminated
)
