package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/wire"
)

// Secrets of the scope tests, one per scope (SPEC §8).
const (
	adminSecret     = "admin-secret-0123456789abcdef"
	registrarSecret = "registrar-shop-0123456789abcd"
	instanceSecret  = "instance-i1-0123456789abcdefg"
	proberSecret    = "prober-secret-0123456789abcde"
	readerSecret    = "reader-shop-0123456789abcdefg"
	unknownSecret   = "unknown-secret-0123456789abcd"
)

var allSecrets = []string{adminSecret, registrarSecret, instanceSecret, proberSecret, readerSecret, unknownSecret}

func scopeTokens() []acl.Token {
	return []acl.Token{
		{Secret: adminSecret, Scope: acl.Admin},
		{Secret: registrarSecret, Scope: acl.Registrar, Namespaces: []string{"shop"}},
		{Secret: instanceSecret, Scope: acl.Instance, Namespace: "shop", Service: "web", Instance: "i-1"},
		{Secret: proberSecret, Scope: acl.Prober},
		{Secret: readerSecret, Scope: acl.Reader, Namespaces: []string{"shop"}},
	}
}

// identity is the name the audit trail and the logs give a token.
func identity(scope acl.Scope, secret string) string {
	return string(scope) + ":" + acl.AccessorOf(acl.DigestOf(secret))
}

// newACLEnv starts an API with ACLs on, shop/web, shop/cart and other/web
// defined, and shop/web i-1 and i-2 registered.
func newACLEnv(t *testing.T, o options) (*env, map[string]wire.Registered) {
	t.Helper()
	o.acl = acl.Config{Enabled: true, Tokens: scopeTokens()}
	if o.auditRefusals == 0 {
		o.auditRefusals = 1000
	}
	e := newEnv(t, o)
	e.apply(t, adminSecret, webYAML, cartYAML, otherYAML)
	regs := map[string]wire.Registered{
		"i-1": e.register(t, registrarSecret, "shop", "web", "i-1", "10.0.0.1"),
		"i-2": e.register(t, registrarSecret, "shop", "web", "i-2", "10.0.0.2"),
	}
	return e, regs
}

func TestScopes(t *testing.T) {
	t.Parallel()
	e, regs := newACLEnv(t, options{})
	i1, i2 := regs["i-1"].Incarnation, regs["i-2"].Incarnation
	report := func(inc uint64) string { return fmt.Sprintf(`{"incarnation": %d, "ready": true}`, inc) }
	shopApply := "namespace: shop\nname: new\nports: [{name: http, number: 80}]\n"
	otherApply := "namespace: other\nname: new\nports: [{name: http, number: 80}]\n"
	join := `{"node_id": "n2", "raft_addr": "10.0.0.9:8482", "http_addr": "10.0.0.9:8480"}`
	type row struct {
		name         string
		secret       string
		method, path string
		body         string
		status       int
		mention      string // for refusals: a word the message must contain
	}
	denied := http.StatusForbidden
	rows := []row{
		// Reads.
		{"admin reads other", adminSecret, "GET", svcPath("other", "web"), "", 200, ""},
		{"registrar reads shop", registrarSecret, "GET", svcPath("shop", "web") + "/endpoints", "", 200, ""},
		{"registrar reads other", registrarSecret, "GET", svcPath("other", "web"), "", denied, "other/web"},
		{"reader reads shop", readerSecret, "GET", svcPath("shop", "cart"), "", 200, ""},
		{"reader reads shop events", readerSecret, "GET", svcPath("shop", "web") + "/events", "", 200, ""},
		{"reader reads other", readerSecret, "GET", svcPath("other", "web") + "/endpoints", "", denied, "other/web"},
		{"reader reads other events", readerSecret, "GET", svcPath("other", "web") + "/events", "", denied, "other/web"},
		{"prober reads other", proberSecret, "GET", svcPath("other", "web") + "/events", "", 200, ""},
		{"instance reads its service", instanceSecret, "GET", svcPath("shop", "web") + "/endpoints", "", 200, ""},
		{"instance reads a sibling service", instanceSecret, "GET", svcPath("shop", "cart"), "", denied, "shop/cart"},
		{"registrar lists members", registrarSecret, "GET", "/v1/members", "", 200, ""},
		{"reader lists members", readerSecret, "GET", "/v1/members", "", 200, ""},
		{"prober lists members", proberSecret, "GET", "/v1/members", "", 200, ""},
		{"instance lists members", instanceSecret, "GET", "/v1/members", "", denied, "members"},

		// Reader and prober write nothing.
		{"reader applies", readerSecret, "POST", "/v1/apply", shopApply, denied, "shop"},
		{"reader registers", readerSecret, "POST", svcPath("shop", "web") + "/instances", regJSON("i-9", "10.0.0.9"), denied, "register"},
		{"reader renews", readerSecret, "POST", instPath("shop", "web", "i-1", "renew"), incBody(i1), denied, "renew"},
		{"reader drains", readerSecret, "POST", instPath("shop", "web", "i-1", "drain"), incBody(i1), denied, "drain"},
		{"reader deregisters", readerSecret, "POST", instPath("shop", "web", "i-1", "deregister"), incBody(i1), denied, "deregister"},
		{"reader reports", readerSecret, "POST", instPath("shop", "web", "i-1", "report"), report(i1), denied, "report"},
		{"reader joins", readerSecret, "POST", "/v1/members", join, denied, "membership"},
		{"reader removes", readerSecret, "DELETE", "/v1/members/n1", "", denied, "membership"},
		{"prober applies", proberSecret, "POST", "/v1/apply", shopApply, denied, "shop"},
		{"prober registers", proberSecret, "POST", svcPath("shop", "web") + "/instances", regJSON("i-9", "10.0.0.9"), denied, "register"},
		{"prober renews", proberSecret, "POST", instPath("shop", "web", "i-1", "renew"), incBody(i1), denied, "renew"},
		{"prober drains", proberSecret, "POST", instPath("shop", "web", "i-1", "drain"), incBody(i1), denied, "drain"},
		{"prober reports", proberSecret, "POST", instPath("shop", "web", "i-1", "report"), report(i1), denied, "report"},

		// A registrar writes, and reports on its instances' behalf, in its
		// namespaces only.
		{"registrar applies other", registrarSecret, "POST", "/v1/apply", otherApply, denied, "other"},
		{"registrar applies shop and other", registrarSecret, "POST", "/v1/apply", shopApply + "---\n" + otherApply, denied, "other"},
		{"registrar registers in other", registrarSecret, "POST", svcPath("other", "web") + "/instances", regJSON("i-9", "10.0.0.9"), denied, "other/web/i-9"},
		{"registrar reports in other", registrarSecret, "POST", instPath("other", "web", "i-1", "report"), report(i1), denied, "other/web/i-1"},
		{"registrar joins", registrarSecret, "POST", "/v1/members", join, denied, "membership"},
		{"registrar removes", registrarSecret, "DELETE", "/v1/members/n1", "", denied, "membership"},

		// An instance token acts on itself only.
		{"instance applies", instanceSecret, "POST", "/v1/apply", webYAML, denied, "shop"},
		{"instance registers i-2", instanceSecret, "POST", svcPath("shop", "web") + "/instances", regJSON("i-2", "10.0.0.2"), denied, "shop/web/i-2"},
		{"instance registers in cart", instanceSecret, "POST", svcPath("shop", "cart") + "/instances", regJSON("i-1", "10.0.0.1"), denied, "shop/cart/i-1"},
		{"instance renews i-2", instanceSecret, "POST", instPath("shop", "web", "i-2", "renew"), incBody(i2), denied, "shop/web/i-2"},
		{"instance drains i-2", instanceSecret, "POST", instPath("shop", "web", "i-2", "drain"), incBody(i2), denied, "shop/web/i-2"},
		{"instance reports i-2", instanceSecret, "POST", instPath("shop", "web", "i-2", "report"), report(i2), denied, "shop/web/i-2"},
		{"instance deregisters itself", instanceSecret, "POST", instPath("shop", "web", "i-1", "deregister"), incBody(i1), denied, "deregister"},
		{"instance joins", instanceSecret, "POST", "/v1/members", join, denied, "membership"},
	}
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			before := e.snapshot(t)
			r := e.call(t, tc.method, tc.path, tc.secret, tc.body)
			if tc.status != http.StatusForbidden {
				wantStatus(t, r, tc.status)
				return
			}
			wantError(t, r, http.StatusForbidden, wire.CodeDenied, tc.mention)
			e.wantDataUnchanged(t, before, tc.name)
		})
	}

	// Reads are filtered by scope.
	for _, tc := range []struct {
		secret string
		want   []string
	}{
		{adminSecret, []string{"other/web", "shop/cart", "shop/web"}},
		{proberSecret, []string{"other/web", "shop/cart", "shop/web"}},
		{registrarSecret, []string{"shop/cart", "shop/web"}},
		{readerSecret, []string{"shop/cart", "shop/web"}},
		{instanceSecret, []string{"shop/web"}},
	} {
		list, err := e.client(t, tc.secret).Services(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, s := range list {
			got = append(got, s.Namespace+"/"+s.Name)
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("services for %s: %v, want %v", tc.secret[:6], got, tc.want)
		}
	}

	// What each scope may write, it can.
	wantStatus(t, e.call(t, "POST", "/v1/apply", registrarSecret, shopApply), http.StatusOK)
	wantStatus(t, e.call(t, "POST", svcPath("shop", "web")+"/instances", registrarSecret, regJSON("i-3", "10.0.0.3")), http.StatusCreated)
	wantStatus(t, e.call(t, "POST", instPath("shop", "web", "i-2", "drain"), registrarSecret, incBody(i2)), http.StatusOK)
	wantStatus(t, e.call(t, "POST", instPath("shop", "web", "i-1", "renew"), instanceSecret, incBody(i1)), http.StatusOK)
	r := e.call(t, "POST", instPath("shop", "web", "i-1", "report"), instanceSecret, report(i1))
	wantStatus(t, r, http.StatusOK)
	if in := decodeAs[wire.Instance](t, r); in.Report == nil || in.Report.Reporter != identity(acl.Instance, instanceSecret) {
		t.Errorf("report by the instance token: %+v", in.Report)
	}
	// SPEC §8: an instance token renews, drains and reports about itself,
	// and registers nothing, not even itself.
	wantError(t, e.call(t, "POST", svcPath("shop", "web")+"/instances", instanceSecret, regJSON("i-1", "10.0.0.11")),
		http.StatusForbidden, wire.CodeDenied, "register")
	wantStatus(t, e.call(t, "POST", "/v1/apply", adminSecret, otherApply), http.StatusOK)
}

// TestInstanceTokenConfinedToItself is SPEC §8's S1: an instance token
// renewing, draining or reporting about another instance is refused, the
// other instance is untouched, and the refusal is in the audit trail under
// the caller's identity.
func TestInstanceTokenConfinedToItself(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now()}
	e, regs := newACLEnv(t, options{now: clk.Now})
	i2 := regs["i-2"]
	target := e.instance(t, "shop", "web", "i-2")
	who := identity(acl.Instance, instanceSecret)
	for _, tc := range []struct{ verb, word, body string }{
		{"renew", "renew", incBody(i2.Incarnation)},
		{"drain", "drain", incBody(i2.Incarnation)},
		{"report", "report", fmt.Sprintf(`{"incarnation": %d, "ready": false, "dependencies": {"db": "failed"}}`, i2.Incarnation)},
	} {
		t.Run(tc.verb, func(t *testing.T) {
			clk.Advance(time.Second) // one audited refusal per identity a second
			r := e.call(t, http.MethodPost, instPath("shop", "web", "i-2", tc.verb), instanceSecret, tc.body)
			wantError(t, r, http.StatusForbidden, wire.CodeDenied, "instance token", tc.word, "shop/web/i-2")
			if got := e.instance(t, "shop", "web", "i-2"); !equalJSON(got, target) {
				t.Fatalf("i-2 changed:\nnow    %+v\nbefore %+v", got, target)
			}
			// The refusal is audited, with the actor's identity and no
			// secret, and readable over the API.
			r = e.call(t, http.MethodGet, svcPath("shop", "web")+"/events?limit=1", adminSecret, "")
			wantStatus(t, r, http.StatusOK)
			ev := decodeAs[[]wire.Event](t, r)
			if len(ev) != 1 {
				t.Fatalf("events: %s", r.Body)
			}
			got := ev[0]
			if got.Kind != wire.EventRefused || got.Actor != who || got.Namespace != "shop" || got.Service != "web" ||
				got.Instance != "i-2" || !strings.Contains(got.Reason, tc.word) {
				t.Errorf("last event %+v; want refused by %s about i-2", got, who)
			}
			if strings.Contains(string(r.Body), instanceSecret) {
				t.Errorf("the audit trail holds the secret: %s", r.Body)
			}
		})
	}
	// The instance's own token still works on itself.
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", "renew"), instanceSecret, incBody(regs["i-1"].Incarnation)), http.StatusOK)
}

func TestRegistrarConfinedToItsNamespaces(t *testing.T) {
	t.Parallel()
	e, _ := newACLEnv(t, options{})
	r := e.call(t, http.MethodPost, svcPath("other", "web")+"/instances", registrarSecret, regJSON("i-1", "10.0.0.1"))
	wantError(t, r, http.StatusForbidden, wire.CodeDenied, "registrar token", "other/web/i-1")
	if got := e.node.Instances("other", "web"); len(got) != 0 {
		t.Fatalf("other/web has instances: %+v", got)
	}
	ev := e.node.Events("other", "web", 1)
	if len(ev) != 1 || ev[0].Kind != wire.EventRefused || ev[0].Actor != identity(acl.Registrar, registrarSecret) {
		t.Errorf("other/web events: %+v; want a refusal by the registrar", ev)
	}
	// The same registration in shop is fine.
	wantStatus(t, e.call(t, http.MethodPost, svcPath("shop", "cart")+"/instances", registrarSecret, regJSON("i-1", "10.0.0.1")), http.StatusCreated)
}

func TestUnauthenticated(t *testing.T) {
	t.Parallel()
	e, regs := newACLEnv(t, options{})
	before := e.snapshot(t)
	routes := []struct{ method, path, body string }{
		{"GET", "/v1/services", ""},
		{"GET", svcPath("shop", "web"), ""},
		{"GET", svcPath("shop", "web") + "/endpoints", ""},
		{"GET", svcPath("shop", "web") + "/events", ""},
		{"POST", "/v1/apply", webYAML},
		{"POST", svcPath("shop", "web") + "/instances", regJSON("i-9", "10.0.0.9")},
		{"POST", instPath("shop", "web", "i-1", "renew"), incBody(regs["i-1"].Incarnation)},
		{"POST", instPath("shop", "web", "i-1", "drain"), incBody(regs["i-1"].Incarnation)},
		{"POST", instPath("shop", "web", "i-1", "deregister"), incBody(regs["i-1"].Incarnation)},
		{"POST", instPath("shop", "web", "i-1", "report"), `{"incarnation": 1, "ready": true}`},
		{"GET", "/v1/members", ""},
		{"POST", "/v1/members", `{"node_id": "n2", "raft_addr": "10.0.0.9:8482", "http_addr": "10.0.0.9:8480"}`},
		{"DELETE", "/v1/members/n1", ""},
	}
	auths := []struct {
		name, header, mention string
	}{
		{"no header", "", "token"},
		{"empty header", " ", "token"},
		{"unknown token", "Bearer " + unknownSecret, "token"},
		{"a prefix of a token", "Bearer " + adminSecret[:len(adminSecret)-1], "token"},
		{"a token with a suffix", "Bearer " + adminSecret + "x", "token"},
		{"basic", "Basic " + adminSecret, "authorization header"},
		{"no scheme", adminSecret, "authorization header"},
		{"scheme only", "Bearer", "authorization header"},
		{"scheme and space", "Bearer ", "authorization header"},
		{"token scheme", "Token " + adminSecret, "authorization header"},
	}
	for _, rt := range routes {
		for _, a := range auths {
			t.Run(rt.method+" "+rt.path+"/"+a.name, func(t *testing.T) {
				hdr := map[string]string{}
				if a.header != "" {
					hdr["Authorization"] = a.header
				}
				r := e.request(t, rt.method, rt.path, hdr, rt.body)
				wantError(t, r, http.StatusUnauthorized, wire.CodeUnauthenticated, a.mention)
				if got := r.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
					t.Errorf("WWW-Authenticate %q, want a Bearer challenge", got)
				}
				for _, s := range allSecrets {
					if strings.Contains(string(r.Body), s) {
						t.Errorf("the answer echoes a secret: %s", r.Body)
					}
				}
			})
		}
	}
	e.wantUnchanged(t, before, "unauthenticated requests")

	// The auth scheme is case-insensitive (RFC 9110 §11.1).
	wantStatus(t, e.request(t, "GET", "/v1/services", map[string]string{"Authorization": "bearer " + readerSecret}, ""), http.StatusOK)
	// Health, readiness and metrics need no token.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		wantStatus(t, e.call(t, "GET", p, "", ""), http.StatusOK)
	}
	// An unknown route is 404 whatever the token.
	wantError(t, e.call(t, "GET", "/v1/nope", "", ""), http.StatusNotFound, wire.CodeNotFound, "/v1/nope")
}

// TestNoSecretInLogs runs refusals and failed authentications and checks
// that no secret reaches the log (SPEC §8: tokens are never logged).
func TestNoSecretInLogs(t *testing.T) {
	t.Parallel()
	e, regs := newACLEnv(t, options{})
	i1, i2 := regs["i-1"].Incarnation, regs["i-2"].Incarnation
	for _, s := range allSecrets {
		for _, p := range []string{"/v1/services", "/v1/apply", instPath("shop", "web", "i-2", "renew")} {
			method := "POST"
			if p == "/v1/services" {
				method = "GET"
			}
			e.call(t, method, p, s, incBody(i2))
			e.request(t, method, p, map[string]string{"Authorization": "Basic " + s}, incBody(i2))
			e.request(t, method, p, map[string]string{"Authorization": s}, incBody(i2))
		}
	}
	wantStatus(t, e.call(t, "POST", instPath("shop", "web", "i-2", "drain"), instanceSecret, incBody(i2)), http.StatusForbidden)
	wantStatus(t, e.call(t, "POST", instPath("shop", "web", "i-2", "report"), instanceSecret, `{"incarnation": 2, "ready": true}`), http.StatusForbidden)
	wantStatus(t, e.call(t, "POST", svcPath("other", "web")+"/instances", registrarSecret, regJSON("x", "10.0.0.1")), http.StatusForbidden)
	wantStatus(t, e.call(t, "POST", "/v1/members", readerSecret, `{}`), http.StatusForbidden)
	wantStatus(t, e.call(t, "POST", instPath("shop", "web", "i-1", "renew"), instanceSecret, incBody(i1)), http.StatusOK)

	logs := e.logs.String()
	if !strings.Contains(logs, "refused") || !strings.Contains(logs, identity(acl.Instance, instanceSecret)) {
		t.Fatalf("the log does not show the refusals (is the logger wired?):\n%s", logs)
	}
	for _, s := range allSecrets {
		if strings.Contains(logs, s) {
			t.Errorf("the log contains the secret %q", s)
		}
		// Not even half of one.
		if strings.Contains(logs, s[:len(s)/2]) {
			t.Errorf("the log contains half of the secret %q", s)
		}
	}
	// Nor does the audit trail.
	for _, ev := range e.node.Events("", "", 0) {
		for _, s := range allSecrets {
			if strings.Contains(mustJSON(ev), s[:len(s)/2]) {
				t.Errorf("audit event %+v holds a secret", ev)
			}
		}
	}
}

// TestRefusalAuditIsRateLimited: past one refusal a second per identity,
// and Config.AuditRefusals a second in all, refusals are counted and
// logged but not written to the audit trail.
func TestRefusalAuditIsRateLimited(t *testing.T) {
	t.Parallel()
	clk := &clock{t: time.Now()}
	e, regs := newACLEnv(t, options{auditRefusals: 2, now: clk.Now})
	path := instPath("shop", "web", "i-2", "renew")
	body := incBody(regs["i-2"].Incarnation)
	// Another identity's refusal takes one of the two slots of the second.
	wantError(t, e.call(t, http.MethodPost, path, readerSecret, body), http.StatusForbidden, wire.CodeDenied, "i-2")
	refusals := func() int {
		n := 0
		for _, ev := range e.node.Events("shop", "web", 0) {
			if ev.Kind == wire.EventRefused {
				n++
			}
		}
		return n
	}
	for range 5 {
		wantError(t, e.call(t, http.MethodPost, path, instanceSecret, body), http.StatusForbidden, wire.CodeDenied, "i-2")
	}
	if n := refusals(); n != 2 {
		t.Errorf("%d refusals audited, want 2", n)
	}
	if got := e.metric(t, "cairn_api_unaudited_refusals_total", nil); got != 4 {
		t.Errorf("unaudited refusals %v, want 4", got)
	}
	if got := e.metric(t, "cairn_api_rejected_mutations_total", map[string]string{"reason": wire.CodeDenied}); got != 6 {
		t.Errorf("rejected mutations (permission_denied) %v, want 6", got)
	}
	clk.Advance(time.Second)
	wantError(t, e.call(t, http.MethodPost, path, instanceSecret, body), http.StatusForbidden, wire.CodeDenied, "i-2")
	if n := refusals(); n != 3 {
		t.Errorf("%d refusals audited after a second, want 3", n)
	}
}
