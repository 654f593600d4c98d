package acl_test

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/internal/acl"
)

const (
	adminSecret     = "admin-secret-0123456789"
	registrarSecret = "registrar-secret-012345"
	instanceSecret  = "instance-secret-0123456"
	proberSecret    = "prober-secret-012345678"
	readerSecret    = "reader-secret-012345678"
)

func tokens() []acl.Token {
	return []acl.Token{
		{Secret: adminSecret, Scope: acl.Admin},
		{Secret: registrarSecret, Scope: acl.Registrar, Namespaces: []string{"shop", "pay"}},
		{Secret: instanceSecret, Scope: acl.Instance, Namespace: "shop", Service: "web", Instance: "i-1"},
		{Secret: proberSecret, Scope: acl.Prober},
		{Secret: readerSecret, Scope: acl.Reader, Namespaces: []string{"shop"}},
	}
}

func newAuthorizer(t *testing.T) *acl.Authorizer {
	t.Helper()
	a, err := acl.New(acl.Config{Enabled: true, Tokens: tokens()})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func name(scope acl.Scope, secret string) string {
	return string(scope) + ":" + acl.AccessorOf(acl.DigestOf(secret))
}

func TestAuthenticate(t *testing.T) {
	a := newAuthorizer(t)
	if !a.Enabled() {
		t.Fatal("Enabled() is false")
	}
	for _, tok := range tokens() {
		id, err := a.Authenticate(tok.Secret)
		if err != nil {
			t.Fatalf("%s token: %v", tok.Scope, err)
		}
		if id.Scope != tok.Scope || id.Name != name(tok.Scope, tok.Secret) || id.Namespace != tok.Namespace ||
			id.Service != tok.Service || id.Instance != tok.Instance || strings.Join(id.Namespaces, ",") != strings.Join(tok.Namespaces, ",") {
			t.Errorf("%s token authenticated as %+v", tok.Scope, id)
		}
		// The name is fit for logs: it holds no part of the secret.
		d := sha256.Sum256([]byte(tok.Secret))
		if strings.Contains(id.Name, tok.Secret[len(tok.Secret)-8:]) || strings.Contains(id.Name, hex.EncodeToString(d[:4])) || len(id.Name) != len(tok.Scope)+1+13 {
			t.Errorf("identity name %q", id.Name)
		}
	}
	// The identity does not alias the configuration.
	toks := tokens()
	a2, err := acl.New(acl.Config{Enabled: true, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	toks[1].Namespaces[0] = "other"
	if id, _ := a2.Authenticate(registrarSecret); id.Namespaces[0] != "shop" {
		t.Errorf("changing the config changed the identity: %v", id.Namespaces)
	}
}

func TestAuthenticateRefuses(t *testing.T) {
	a := newAuthorizer(t)
	for _, tc := range []struct {
		name, secret string
		want         error
	}{
		{"empty", "", acl.ErrNoToken},
		{"unknown", "some-other-secret-0123456", acl.ErrUnknownToken},
		{"prefix", adminSecret[:len(adminSecret)-1], acl.ErrUnknownToken},
		{"suffix", adminSecret + "0", acl.ErrUnknownToken},
		{"last byte", adminSecret[:len(adminSecret)-1] + "X", acl.ErrUnknownToken},
		{"first byte", "X" + adminSecret[1:], acl.ErrUnknownToken},
		{"case", strings.ToUpper(adminSecret), acl.ErrUnknownToken},
		{"padded", " " + adminSecret, acl.ErrUnknownToken},
		{"digest", hex.EncodeToString(func() []byte { d := sha256.Sum256([]byte(adminSecret)); return d[:] }()), acl.ErrUnknownToken},
		{"scope name", "admin", acl.ErrUnknownToken},
		{"identity name", name(acl.Admin, adminSecret), acl.ErrUnknownToken},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, err := a.Authenticate(tc.secret)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Authenticate(%q) = %+v, %v; want %v", tc.secret, id, err, tc.want)
			}
			if id.Scope != "" || id.Name != "" {
				t.Errorf("a refused token got an identity: %+v", id)
			}
			if strings.Contains(err.Error(), tc.secret) && tc.secret != "" {
				t.Errorf("the error %q repeats the secret", err)
			}
		})
	}
}

// TestAuthenticateComparesEveryEntry: whichever entry matches, and however
// many entries there are, the right identity is found. Authenticate
// compares SHA-256 digests with subtle.ConstantTimeCompare and does not
// stop at the first match, so its time does not depend on where (or
// whether) the secret matches; timing is not measured here, because a
// timing test on a shared machine would be flaky.
func TestAuthenticateComparesEveryEntry(t *testing.T) {
	var toks []acl.Token
	for i := range 200 {
		toks = append(toks, acl.Token{Secret: fmt.Sprintf("reader-%04d-0123456789", i), Scope: acl.Reader, Namespaces: []string{fmt.Sprintf("ns%d", i)}})
	}
	a, err := acl.New(acl.Config{Enabled: true, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 1, 99, 198, 199} {
		id, err := a.Authenticate(toks[i].Secret)
		if err != nil || id.Namespaces[0] != fmt.Sprintf("ns%d", i) {
			t.Errorf("token %d: %+v, %v", i, id, err)
		}
	}
	// Secrets that share a long prefix with an entry are no closer to it.
	if _, err := a.Authenticate("reader-0199-012345678"); !errors.Is(err, acl.ErrUnknownToken) {
		t.Errorf("a near miss: %v", err)
	}
}

func TestAuthenticateDisabled(t *testing.T) {
	a, err := acl.New(acl.Config{Tokens: tokens()})
	if err != nil {
		t.Fatal(err)
	}
	if a.Enabled() {
		t.Fatal("Enabled() is true")
	}
	// ACLs off: everyone, with or without a token, is an anonymous admin.
	for _, s := range []string{"", "anything", readerSecret} {
		id, err := a.Authenticate(s)
		if err != nil || id.Scope != acl.Admin || id.Name != "anonymous" {
			t.Errorf("Authenticate(%q) with ACLs off = %+v, %v; want the anonymous admin", s, id, err)
		}
	}
}

func TestNewRejectsInvalidTokens(t *testing.T) {
	const s = "a-secret-of-sixteen+"
	for _, tc := range []struct {
		name   string
		tokens []acl.Token
		want   []string // fragments of the error: the token's index and the field
	}{
		{"short secret", []acl.Token{{Secret: "short", Scope: acl.Admin}}, []string{"tokens[0]", "secret", "16"}},
		{"15 characters", []acl.Token{{Secret: strings.Repeat("x", 15), Scope: acl.Admin}}, []string{"tokens[0]", "secret"}},
		{"empty secret", []acl.Token{{Scope: acl.Admin}}, []string{"tokens[0]", "secret"}},
		{"duplicate", []acl.Token{{Secret: s, Scope: acl.Admin}, {Secret: s, Scope: acl.Reader, Namespaces: []string{"a"}}}, []string{"tokens[1]", "secret", "twice"}},
		{"unknown scope", []acl.Token{{Secret: s, Scope: "root"}}, []string{"tokens[0]", "scope", "root"}},
		{"empty scope", []acl.Token{{Secret: s}}, []string{"tokens[0]", "scope"}},
		{"admin with namespaces", []acl.Token{{Secret: s, Scope: acl.Admin, Namespaces: []string{"shop"}}}, []string{"tokens[0]", "scope"}},
		{"admin with an instance", []acl.Token{{Secret: s, Scope: acl.Admin, Instance: "i-1"}}, []string{"tokens[0]", "scope"}},
		{"prober with namespaces", []acl.Token{{Secret: s, Scope: acl.Prober, Namespaces: []string{"shop"}}}, []string{"tokens[0]", "scope"}},
		{"registrar without namespaces", []acl.Token{{Secret: s, Scope: acl.Registrar}}, []string{"tokens[0]", "namespaces"}},
		{"reader without namespaces", []acl.Token{{Secret: s, Scope: acl.Reader}}, []string{"tokens[0]", "namespaces"}},
		{"reader with an instance", []acl.Token{{Secret: s, Scope: acl.Reader, Namespaces: []string{"shop"}, Service: "web"}}, []string{"tokens[0]", "namespaces"}},
		{"instance without instance", []acl.Token{{Secret: s, Scope: acl.Instance, Namespace: "shop", Service: "web"}}, []string{"tokens[0]", "instance"}},
		{"instance without service", []acl.Token{{Secret: s, Scope: acl.Instance, Namespace: "shop", Instance: "i-1"}}, []string{"tokens[0]", "instance"}},
		{"instance without namespace", []acl.Token{{Secret: s, Scope: acl.Instance, Service: "web", Instance: "i-1"}}, []string{"tokens[0]", "instance"}},
		{"instance with namespaces", []acl.Token{{Secret: s, Scope: acl.Instance, Namespace: "shop", Service: "web", Instance: "i-1", Namespaces: []string{"shop"}}}, []string{"tokens[0]", "namespaces"}},
		{"second token", []acl.Token{{Secret: s, Scope: acl.Admin}, {Secret: s + "2", Scope: acl.Registrar}}, []string{"tokens[1]", "namespaces"}},
		// Only a prober token names a node, and the node is a node id.
		{"admin with a node", []acl.Token{{Secret: s, Scope: acl.Admin, Node: "n1"}}, []string{"tokens[0]", "node", "prober", "admin"}},
		{"registrar with a node", []acl.Token{{Secret: s, Scope: acl.Registrar, Namespaces: []string{"shop"}, Node: "n1"}}, []string{"tokens[0]", "node", "registrar"}},
		{"reader with a node", []acl.Token{{Secret: s, Scope: acl.Reader, Namespaces: []string{"shop"}, Node: "n1"}}, []string{"tokens[0]", "node", "reader"}},
		{"instance with a node", []acl.Token{{Secret: s, Scope: acl.Instance, Namespace: "shop", Service: "web", Instance: "i-1", Node: "n1"}}, []string{"tokens[0]", "node", "instance"}},
		{"stored reader with a node", []acl.Token{{Digest: strings.Repeat("ab", 32), Scope: acl.Reader, Namespaces: []string{"shop"}, Node: "n1"}}, []string{"tokens[0]", "node"}},
		{"node upper-case", []acl.Token{{Secret: s, Scope: acl.Prober, Node: "N1"}}, []string{"tokens[0]", "node", `"N1"`}},
		{"node with a dot", []acl.Token{{Secret: s, Scope: acl.Prober, Node: "n1.zone"}}, []string{"tokens[0]", "node"}},
		{"node with a leading dash", []acl.Token{{Secret: s, Scope: acl.Prober, Node: "-n1"}}, []string{"tokens[0]", "node", "start or end"}},
		{"node too long", []acl.Token{{Secret: s, Scope: acl.Prober, Node: strings.Repeat("n", 64)}}, []string{"tokens[0]", "node", "63"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := acl.New(acl.Config{Enabled: true, Tokens: tc.tokens})
			if err == nil {
				t.Fatalf("New accepted %+v", tc.tokens)
			}
			if a != nil {
				t.Errorf("New returned an Authorizer with the error %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
			for _, tok := range tc.tokens {
				if len(tok.Secret) >= 4 && strings.Contains(err.Error(), tok.Secret) {
					t.Errorf("error %q repeats a secret", err)
				}
			}
		})
	}
}

// Targets of the Allows matrix.
type target struct{ ns, svc, inst string }

var (
	self      = target{"shop", "web", "i-1"} // the instance token's own instance
	sibling   = target{"shop", "web", "i-2"} // another instance of its service
	otherSvc  = target{"shop", "cart", "i-1"}
	otherNS   = target{"other", "web", "i-1"}
	secondNS  = target{"pay", "api", "i-1"} // the registrar's second namespace
	cluster   = target{"", "", ""}
	targets   = []target{self, sibling, otherSvc, otherNS, secondNS, cluster}
	targetNam = []string{"self", "sibling", "other service", "other namespace", "second namespace", "cluster"}
)

func TestAllowsMatrix(t *testing.T) {
	a := newAuthorizer(t)
	ids := map[acl.Scope]acl.Identity{}
	for _, tok := range tokens() {
		id, err := a.Authenticate(tok.Secret)
		if err != nil {
			t.Fatal(err)
		}
		ids[tok.Scope] = id
	}
	const (
		y = true
		n = false
	)
	actions := []struct {
		name string
		act  acl.Action
	}{
		{"read", acl.Read}, {"apply", acl.Apply}, {"register", acl.Register}, {"renew", acl.Renew},
		{"drain", acl.Drain}, {"deregister", acl.Deregister}, {"report", acl.Report},
		{"read cluster", acl.ReadCluster}, {"manage cluster", acl.ManageCluster},
	}
	// want[scope][action] lists, for each of targets (self, sibling, other
	// service, other namespace, second namespace, cluster), whether the
	// scope may act. "cluster" targets no namespace.
	want := map[acl.Scope][][6]bool{
		acl.Admin: {
			{y, y, y, y, y, y}, {y, y, y, y, y, y}, {y, y, y, y, y, y}, {y, y, y, y, y, y}, {y, y, y, y, y, y},
			{y, y, y, y, y, y}, {y, y, y, y, y, y}, {y, y, y, y, y, y}, {y, y, y, y, y, y},
		},
		acl.Registrar: { // shop and pay
			/* read */ {y, y, y, n, y, n},
			/* apply */ {y, y, y, n, y, n},
			/* register */ {y, y, y, n, y, n},
			/* renew */ {y, y, y, n, y, n},
			/* drain */ {y, y, y, n, y, n},
			/* deregister */ {y, y, y, n, y, n},
			/* report: on its instances' behalf (kube-sync) */ {y, y, y, n, y, n},
			/* read cluster */ {y, y, y, y, y, y},
			/* manage cluster */ {n, n, n, n, n, n},
		},
		acl.Instance: { // shop/web/i-1
			/* read: its own service */ {y, y, n, n, n, n},
			/* apply */ {n, n, n, n, n, n},
			/* register: SPEC §8, renew, drain and report only */ {n, n, n, n, n, n},
			/* renew */ {y, n, n, n, n, n},
			/* drain */ {y, n, n, n, n, n},
			/* deregister */ {n, n, n, n, n, n},
			/* report */ {y, n, n, n, n, n},
			/* read cluster */ {n, n, n, n, n, n},
			/* manage cluster */ {n, n, n, n, n, n},
		},
		acl.Prober: {
			/* read */ {y, y, y, y, y, y},
			/* apply */ {n, n, n, n, n, n},
			/* register */ {n, n, n, n, n, n},
			/* renew */ {n, n, n, n, n, n},
			/* drain */ {n, n, n, n, n, n},
			/* deregister */ {n, n, n, n, n, n},
			/* report */ {n, n, n, n, n, n},
			/* read cluster */ {y, y, y, y, y, y},
			/* manage cluster */ {n, n, n, n, n, n},
		},
		acl.Reader: { // shop
			/* read */ {y, y, y, n, n, n},
			/* apply */ {n, n, n, n, n, n},
			/* register */ {n, n, n, n, n, n},
			/* renew */ {n, n, n, n, n, n},
			/* drain */ {n, n, n, n, n, n},
			/* deregister */ {n, n, n, n, n, n},
			/* report */ {n, n, n, n, n, n},
			/* read cluster */ {y, y, y, y, y, y},
			/* manage cluster */ {n, n, n, n, n, n},
		},
	}
	for scope, rows := range want {
		if len(rows) != len(actions) {
			t.Fatalf("%s: %d rows for %d actions", scope, len(rows), len(actions))
		}
		for i, a := range actions {
			for j, tg := range targets {
				got := ids[scope].Allows(a.act, tg.ns, tg.svc, tg.inst)
				if got != rows[i][j] {
					t.Errorf("%s may %s on %s (%s/%s/%s): got %v, want %v", scope, a.name, targetNam[j], tg.ns, tg.svc, tg.inst, got, rows[i][j])
				}
			}
		}
	}
	// An identity that is not one (the zero value) may do nothing.
	for _, a := range actions {
		for _, tg := range targets {
			if (acl.Identity{}).Allows(a.act, tg.ns, tg.svc, tg.inst) {
				t.Errorf("the zero identity may %s on %+v", a.name, tg)
			}
		}
	}
	// An unknown action is refused to everyone but an admin.
	for scope, id := range ids {
		if got := id.Allows(acl.Action(99), "shop", "web", "i-1"); got != (scope == acl.Admin) {
			t.Errorf("%s may do action 99: %v", scope, got)
		}
	}
}

// TestProbeRights: outcomes are a caller's (never a prober's); probe
// results, and the outcomes a server's xDS subscribers reported, are a
// server's, and a prober token sends them only when it names its node.
func TestProbeRights(t *testing.T) {
	a, err := acl.New(acl.Config{Enabled: true, Tokens: append(tokens(),
		acl.Token{Secret: "prober-n1-secret-0123456", Scope: acl.Prober, Node: "n1"})})
	if err != nil {
		t.Fatal(err)
	}
	id := func(secret string) acl.Identity {
		t.Helper()
		i, err := a.Authenticate(secret)
		if err != nil {
			t.Fatal(err)
		}
		return i
	}
	bound, unbound := id("prober-n1-secret-0123456"), id(proberSecret)
	if bound.Node != "n1" || bound.Scope != acl.Prober || unbound.Node != "" {
		t.Fatalf("prober identities %+v and %+v, want node n1 and none", bound, unbound)
	}
	for _, c := range []struct {
		name            string
		id              acl.Identity
		outcome, probes bool
	}{
		{"admin", id(adminSecret), true, true},
		{"registrar", id(registrarSecret), true, false},
		{"reader", id(readerSecret), true, false},
		{"instance", id(instanceSecret), false, false},
		{"prober of n1", bound, false, true},
		{"prober without node", unbound, false, false},
		{"zero identity", acl.Identity{}, false, false},
	} {
		if got := c.id.Allows(acl.Outcome, "shop", "web", "i-1"); got != c.outcome {
			t.Errorf("%s may report outcomes: %v, want %v", c.name, got, c.outcome)
		}
		if got := c.id.Allows(acl.ProbeResults, "", "", ""); got != c.probes {
			t.Errorf("%s may send probe results: %v, want %v", c.name, got, c.probes)
		}
		// Forwarding subscribers' load reports is a server's, like probe
		// results.
		if got := c.id.Allows(acl.ForwardOutcomes, "", "", ""); got != c.probes {
			t.Errorf("%s may forward xDS outcomes: %v, want %v", c.name, got, c.probes)
		}
	}
}

func TestProbeObserver(t *testing.T) {
	admin := acl.Identity{Name: "admin:x", Scope: acl.Admin}
	bound := acl.Identity{Name: "prober:x", Scope: acl.Prober, Node: "n1"}
	unbound := acl.Identity{Name: "prober:y", Scope: acl.Prober}
	reader := acl.Identity{Name: "reader:z", Scope: acl.Reader, Namespaces: []string{"shop"}}
	for _, c := range []struct {
		name     string
		id       acl.Identity
		observer string
		want     string
		refusal  []string // fragments of the refusal; nil: allowed
	}{
		{"prober as its node", bound, "n1", "n1", nil},
		{"prober naming none", bound, "", "n1", nil},
		{"prober as another node", bound, "n2", "", []string{"prober token of node n1", "may not report as n2"}},
		{"prober without node", unbound, "n1", "", []string{"names no node", "node:"}},
		{"prober without node naming none", unbound, "", "", []string{"names no node"}},
		{"admin as any", admin, "n2", "n2", nil},
		{"admin naming none", admin, "", "", nil},
		{"reader", reader, "n1", "", []string{"reader token may not send probe results"}},
		{"zero identity", acl.Identity{}, "n1", "", []string{"may not send probe results"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := c.id.ProbeObserver(c.observer)
			if c.refusal == nil {
				if err != nil || got != c.want {
					t.Fatalf("ProbeObserver(%q) = %q, %v; want %q", c.observer, got, err, c.want)
				}
				return
			}
			if !errors.Is(err, acl.ErrDenied) || got != "" {
				t.Fatalf("ProbeObserver(%q) = %q, %v; want a refusal wrapping ErrDenied", c.observer, got, err)
			}
			for _, f := range c.refusal {
				if !strings.Contains(err.Error(), f) {
					t.Errorf("refusal %q does not mention %q", err, f)
				}
			}
		})
	}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFile(t *testing.T) {
	p := writeFile(t, `tokens:
  - {secret: `+adminSecret+`, scope: admin}
  - secret: `+registrarSecret+`
    scope: registrar
    namespaces: [shop, pay]
  - {secret: `+instanceSecret+`, scope: instance, namespace: shop, service: web, instance: i-1}
  - {secret: `+readerSecret+`, scope: reader, namespaces: [shop]}
  - {secret: `+proberSecret+`, scope: prober, node: cairn-2}
`)
	toks, err := acl.LoadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(toks) != 5 || toks[4].Node != "cairn-2" || toks[1].Scope != acl.Registrar || strings.Join(toks[1].Namespaces, ",") != "shop,pay" ||
		toks[2].Instance != "i-1" || toks[2].Service != "web" || toks[2].Namespace != "shop" {
		t.Fatalf("loaded %+v", toks)
	}
	a, err := acl.New(acl.Config{Enabled: true, Tokens: toks})
	if err != nil {
		t.Fatal(err)
	}
	if id, err := a.Authenticate(instanceSecret); err != nil || !id.Allows(acl.Renew, "shop", "web", "i-1") {
		t.Errorf("instance token from the file: %+v, %v", id, err)
	}
	if id, err := a.Authenticate(proberSecret); err != nil || id.Node != "cairn-2" {
		t.Errorf("prober token from the file: %+v, %v; want node cairn-2", id, err)
	}
}

func TestLoadFileRejects(t *testing.T) {
	for _, tc := range []struct{ name, text, want string }{
		{"unknown top-level key", "tokens: []\nadmins: [x]\n", "admins"},
		{"unknown token key", "tokens:\n  - {secret: " + adminSecret + ", scope: admin, role: root}\n", "role"},
		{"misspelt key", "tokens:\n  - {secrte: " + adminSecret + ", scope: admin}\n", "secrte"},
		{"namespaces as a string", "tokens:\n  - {secret: " + adminSecret + ", scope: reader, namespaces: shop}\n", "namespaces"},
		{"not a list", "tokens: {secret: x}\n", "line 1"},
		{"malformed", "tokens: [\n", "yaml"},
		{"empty", "", "EOF"},
		// Tokens are checked as they are read.
		{"node on a reader", "tokens:\n  - {secret: " + adminSecret + ", scope: reader, namespaces: [shop], node: n1}\n", "tokens[0]: node: only a prober token names a node"},
		{"node on an admin", "tokens:\n  - {secret: " + adminSecret + ", scope: admin}\n  - {secret: " + readerSecret + ", scope: admin, node: n1}\n", "tokens[1]: node"},
		{"node not a node id", "tokens:\n  - {secret: " + adminSecret + ", scope: prober, node: Node_1}\n", "tokens[0]: node"},
		{"node as a list", "tokens:\n  - {secret: " + adminSecret + ", scope: prober, node: [n1, n2]}\n", "line 2"},
		{"short secret", "tokens:\n  - {secret: short, scope: admin}\n", "tokens[0]: secret"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := writeFile(t, tc.text)
			toks, err := acl.LoadFile(p)
			if err == nil {
				t.Fatalf("LoadFile accepted %q: %+v", tc.text, toks)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not mention %q and the file", err, tc.want)
			}
			if strings.Contains(err.Error(), adminSecret) {
				t.Errorf("error %q repeats a secret", err)
			}
		})
	}
	if _, err := acl.LoadFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("a missing file: %v", err)
	}
}
