package api_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/docs"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
)

// undocumented are routes docs/openapi.yaml leaves out, with the reason.
var undocumented = map[string]string{
	"GET /ui":  "the dashboard's redirect to its pages: HTML for browsers, not the JSON API",
	"GET /ui/": "the dashboard's static files: HTML for browsers, not the JSON API",
}

// TestOpenAPIMatchesRoutes holds docs/openapi.yaml to the routes the API
// registers, both ways: a route the document does not describe, or an
// operation no route serves, fails naming it. A server with every
// optional route on (dashboard, metrics) is the one compared.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	node := storetest.Single(t, store.Config{Logger: testLogger(t, nil)})
	authz, err := acl.New(acl.Config{})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	srv, err := api.New(api.Config{Store: node.Store, ACL: authz, Addrs: policyFor(node.Store, false),
		UI: http.NotFoundHandler(), Gatherer: reg, Registerer: reg, Logger: testLogger(t, nil)})
	if err != nil {
		t.Fatal(err)
	}
	routes := map[string]bool{}
	for _, p := range srv.Patterns() {
		if _, ok := undocumented[p]; ok {
			continue
		}
		routes[p] = true
	}
	for p := range undocumented {
		if !slices.Contains(srv.Patterns(), p) {
			t.Errorf("undocumented lists %q, which the API no longer registers: drop it", p)
		}
	}
	documented := map[string]bool{}
	for p := range openAPIOperations(t) {
		documented[p] = true
	}
	for _, p := range sortedKeys(routes) {
		if !documented[p] {
			t.Errorf("the API registers %q, and docs/openapi.yaml does not describe it", p)
		}
	}
	for _, p := range sortedKeys(documented) {
		if !routes[p] {
			t.Errorf("docs/openapi.yaml describes %q, and the API registers no such route", p)
		}
	}
}

// openAPIOperations returns the document's operations as route patterns
// ("POST /v1/apply"), with their operation ids.
func openAPIOperations(t *testing.T) map[string]string {
	t.Helper()
	b, err := docs.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	methods := []string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}
	out := map[string]string{}
	for path, item := range doc.Paths {
		for key, raw := range item {
			if !slices.Contains(methods, key) {
				continue // parameters, summary, …
			}
			var op struct {
				OperationID string `json:"operationId"`
			}
			if err := json.Unmarshal(raw, &op); err != nil {
				t.Fatalf("%s %s: %v", key, path, err)
			}
			if op.OperationID == "" {
				t.Errorf("%s %s has no operationId", strings.ToUpper(key), path)
			}
			out[strings.ToUpper(key)+" "+path] = op.OperationID
		}
	}
	return out
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestOpenAPIServed checks that GET /v1/openapi.json answers the
// document as JSON, without a token even with ACLs on.
func TestOpenAPIServed(t *testing.T) {
	e := newEnv(t, options{acl: acl.Config{Enabled: true, Tokens: scopeTokens()}})
	r := e.request(t, http.MethodGet, "/v1/openapi.json", nil, "")
	wantStatus(t, r, http.StatusOK)
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	want, err := docs.OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(r.Body, want) {
		t.Errorf("GET /v1/openapi.json is not docs/openapi.yaml as JSON:\n%.200s", r.Body)
	}
	// Every other route still needs a token: the exception is this one.
	wantError(t, e.request(t, http.MethodGet, "/v1/services", nil, ""), http.StatusUnauthorized, "unauthenticated")
}
