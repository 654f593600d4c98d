package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/wire"
)

// TestTokensAPI: an admin creates a token over the API; the store keeps
// its digest, never its secret; the token works at once and stops working
// when deleted.
func TestTokensAPI(t *testing.T) {
	t.Parallel()
	e, regs := newACLEnv(t, options{})
	before := e.node.TokenRevision()

	// Only an admin manages tokens.
	for _, s := range []string{registrarSecret, readerSecret, instanceSecret, proberSecret} {
		wantError(t, e.call(t, http.MethodPost, "/v1/acl/tokens", s, `{"scope": "reader", "namespaces": ["shop"]}`),
			http.StatusForbidden, wire.CodeDenied, "token")
		wantError(t, e.call(t, http.MethodGet, "/v1/acl/tokens", s, ""), http.StatusForbidden, wire.CodeDenied, "token")
	}
	// Bad requests name the field and change nothing.
	for _, tc := range []struct{ body, field string }{
		{`{"scope": "reader"}`, "namespaces"},
		{`{"scope": "root"}`, "scope"},
		{`{"scope": "instance", "namespace": "shop"}`, "instance"},
		{`{"scope": "admin", "secret": "short"}`, "secret"},
		{`{"scope": "admin", "colour": "red"}`, "colour"},
	} {
		wantError(t, e.call(t, http.MethodPost, "/v1/acl/tokens", adminSecret, tc.body), http.StatusBadRequest, wire.CodeInvalid, tc.field)
	}
	if e.node.TokenRevision() != before {
		t.Fatal("a refused token request changed the stored tokens")
	}

	r := e.call(t, http.MethodPost, "/v1/acl/tokens", adminSecret, `{"scope": "registrar", "namespaces": ["shop"], "description": "ci"}`)
	wantStatus(t, r, http.StatusCreated)
	created := decodeAs[api.Token](t, r)
	if len(created.Secret) < 16 || created.Accessor == "" || created.Digest != "" || created.Scope != "registrar" {
		t.Fatalf("created token: %+v", created)
	}
	recs, _ := e.node.Tokens()
	if len(recs) != 1 || recs[0].Digest == "" || strings.Contains(mustJSON(recs), created.Secret) {
		t.Fatalf("stored tokens %+v: want one, by digest, without the secret", recs)
	}
	// The new token works at once: it may drain in its namespace.
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", "drain"), created.Secret, incBody(regs["i-1"].Incarnation)), http.StatusOK)
	// Listing shows it without digest or secret.
	r = e.call(t, http.MethodGet, "/v1/acl/tokens", adminSecret, "")
	wantStatus(t, r, http.StatusOK)
	if body := string(r.Body); !strings.Contains(body, created.Accessor) || strings.Contains(body, created.Secret) || strings.Contains(body, recs[0].Digest) {
		t.Fatalf("token list: %s", body)
	}
	// A secret of the servers' ACL files is a conflict too.
	wantError(t, e.call(t, http.MethodPost, "/v1/acl/tokens", adminSecret, `{"scope": "admin", "secret": "`+readerSecret+`"}`),
		http.StatusConflict, wire.CodeConflict, "ACL files")
	// The same secret twice is a conflict.
	wantError(t, e.call(t, http.MethodPost, "/v1/acl/tokens", adminSecret, `{"scope": "admin", "secret": "`+created.Secret+`"}`),
		http.StatusConflict, wire.CodeConflict, "secret")
	// Deleted, it is unknown.
	wantStatus(t, e.call(t, http.MethodDelete, "/v1/acl/tokens/"+created.Accessor, adminSecret, ""), http.StatusOK)
	wantError(t, e.call(t, http.MethodGet, "/v1/services", created.Secret, ""), http.StatusUnauthorized, wire.CodeUnauthenticated, "token")
	wantError(t, e.call(t, http.MethodDelete, "/v1/acl/tokens/"+created.Accessor, adminSecret, ""), http.StatusNotFound, wire.CodeNotFound, created.Accessor)
	// Creation and deletion are audited, without the secret.
	var kinds []wire.EventKind
	for _, ev := range e.node.Events("", "", 0) {
		if strings.Contains(mustJSON(ev), created.Secret) {
			t.Errorf("audit event %+v holds the secret", ev)
		}
		kinds = append(kinds, ev.Kind)
	}
	if !strings.Contains(mustJSON(kinds), string(wire.EventTokenCreated)) || !strings.Contains(mustJSON(kinds), string(wire.EventTokenDeleted)) {
		t.Errorf("audit kinds %v lack token_created and token_deleted", kinds)
	}
}

// TestTokensAPIProberNode: a prober token created over the API names its
// server like one of an ACL file, and every node honours the binding.
func TestTokensAPIProberNode(t *testing.T) {
	t.Parallel()
	e, regs, target := probeEnv(t)
	before := e.node.TokenRevision()
	for _, tc := range []struct{ body, mention string }{
		{`{"scope": "reader", "namespaces": ["shop"], "node": "n1"}`, "only a prober token names a node"},
		{`{"scope": "admin", "node": "n1"}`, "only a prober token names a node"},
		{`{"scope": "prober", "node": "N1"}`, "node"},
		{`{"scope": "prober", "node": "-n1"}`, "node"},
	} {
		wantError(t, e.call(t, http.MethodPost, "/v1/acl/tokens", adminSecret, tc.body), http.StatusBadRequest, wire.CodeInvalid, tc.mention)
	}
	if e.node.TokenRevision() != before {
		t.Fatal("a refused token request changed the stored tokens")
	}

	r := e.call(t, http.MethodPost, "/v1/acl/tokens", adminSecret, `{"scope": "prober", "node": "n1"}`)
	wantStatus(t, r, http.StatusCreated)
	bound := decodeAs[api.Token](t, r)
	if bound.Node != "n1" {
		t.Fatalf("created %+v, want node n1", bound)
	}
	if recs, _ := e.node.Tokens(); len(recs) != 1 || recs[0].Node != "n1" {
		t.Fatalf("stored tokens %+v, want the prober token of n1", recs)
	}
	r = e.call(t, http.MethodGet, "/v1/acl/tokens", adminSecret, "")
	if got := decodeAs[[]api.Token](t, r); len(got) != 1 || got[0].Node != "n1" {
		t.Fatalf("token list %s, want node n1 shown", r)
	}
	r = e.call(t, http.MethodPost, "/v1/acl/tokens", adminSecret, `{"scope": "prober"}`)
	wantStatus(t, r, http.StatusCreated)
	unbound := decodeAs[api.Token](t, r)

	wantError(t, e.call(t, http.MethodPost, "/v1/internal/probe-results", bound.Secret, probeReport("n2", target)),
		http.StatusForbidden, wire.CodeDenied, "prober token of node n1", "as n2")
	wantError(t, e.call(t, http.MethodPost, "/v1/internal/probe-results", unbound.Secret, probeReport("n1", target)),
		http.StatusForbidden, wire.CodeDenied, "names no node")
	if ev, _ := e.health.Evidence("shop/pay/p-1", regs["p-1"].Incarnation); len(ev) != 0 {
		t.Fatalf("refused reports left evidence: %+v", ev)
	}
	r = e.call(t, http.MethodPost, "/v1/internal/probe-results", bound.Secret, probeReport("", target))
	wantStatus(t, r, http.StatusOK)
	if ev, _ := e.health.Evidence("shop/pay/p-1", regs["p-1"].Incarnation); len(ev) != 1 || ev[0].Observer != "n1" {
		t.Fatalf("evidence %+v, want one probe result observed by n1", ev)
	}
}
