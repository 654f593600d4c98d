package scenarios

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/internal/acl"
)

// The region's ACL file, read as a server reads it (internal/acl): the
// admin token; a prober token per server, bound to its node id, that
// may send that server's probe results and no other's; a reader of the
// region's namespace per agent and one, distinct, per caller. A
// negative Config.Callers is refused, naming the field.
func TestRegionACL(t *testing.T) {
	dir := t.TempDir()
	flags, err := writeACL(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	if len(flags) != 2 || flags[0] != "--acl-file" || flags[1] != filepath.Join(dir, "acl.yaml") {
		t.Fatalf("writeACL flags %q; want --acl-file and the file", flags)
	}
	toks, err := acl.LoadFile(flags[1])
	if err != nil {
		t.Fatal(err)
	}
	authz, err := acl.New(acl.Config{Enabled: true, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	id := func(secret string) acl.Identity {
		t.Helper()
		got, err := authz.Authenticate(secret)
		if err != nil {
			t.Fatalf("token %s: %v", secret, err)
		}
		return got
	}
	if got := id(AdminToken); got.Scope != acl.Admin {
		t.Errorf("admin token: scope %s", got.Scope)
	}
	for i := range Zones() {
		node := nodeID(i + 1)
		p := id(ProberToken(node))
		if p.Scope != acl.Prober || p.Node != node {
			t.Errorf("prober token of %s: scope %s node %q", node, p.Scope, p.Node)
		}
		if obs, err := p.ProbeObserver(""); err != nil || obs != node {
			t.Errorf("prober token of %s reports as %q (%v); want %s", node, obs, err, node)
		}
		other := nodeID((i+1)%len(Zones()) + 1)
		if _, err := p.ProbeObserver(other); !errors.Is(err, acl.ErrDenied) {
			t.Errorf("prober token of %s may report as %s: %v", node, other, err)
		}
		if !p.Allows(acl.ForwardOutcomes, "", "", "") || p.Allows(acl.Outcome, Namespace, "", "") {
			t.Errorf("prober token of %s: forwards LRS outcomes %v (want true), reports outcomes as a caller %v (want false)",
				node, p.Allows(acl.ForwardOutcomes, "", "", ""), p.Allows(acl.Outcome, Namespace, "", ""))
		}
		if args := strings.Join(serverArgs(i+1), " "); !strings.Contains(args, "--probe-token "+ProberToken(node)) || !strings.Contains(args, "--zone "+Zones()[i]) {
			t.Errorf("server %d's flags %q lack its zone or its prober token", i+1, args)
		}
	}
	readers := map[string]bool{}
	r := &Region{Config: Config{Callers: 3}}
	var secrets []string
	for _, z := range Zones() {
		secrets = append(secrets, AgentToken(z))
	}
	for i := range 3 {
		secrets = append(secrets, r.CallerToken(i))
	}
	for _, s := range secrets {
		got := id(s)
		if got.Scope != acl.Reader || len(got.Namespaces) != 1 || got.Namespaces[0] != Namespace {
			t.Errorf("token %s: scope %s namespaces %q; want a reader of %s", s, got.Scope, got.Namespaces, Namespace)
		}
		if readers[got.Name] {
			t.Errorf("token %s shares its identity %s with another", s, got.Name)
		}
		readers[got.Name] = true
	}
	if len(toks) != 1+2*len(Zones())+3 {
		t.Errorf("%d tokens in the file; want the admin, %d probers, %d agents and 3 callers", len(toks), len(Zones()), len(Zones()))
	}
	cfg := ShortConfig()
	cfg.Callers = -1
	if _, err := NewRegion(cfg); err == nil || !strings.Contains(err.Error(), "Config.Callers") {
		t.Errorf("NewRegion with Callers -1: %v, want an error naming Config.Callers", err)
	}
}
