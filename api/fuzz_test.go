package api_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/internal/addrpolicy"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// FuzzWriteBodies sends arbitrary bodies to the write routes of a real
// server: whatever arrives, the answer is a known status with a JSON body,
// never a 5xx, and a refused request changes nothing.
func FuzzWriteBodies(f *testing.F) {
	for _, s := range []string{
		`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}}`,
		`{"instance_id": "i-2", "addresses": ["::ffff:10.0.0.2", "2001:db8::1"], "ports": {"http": 1}, "weight": 65535, "lease_ttl": "1m", "lifecycle": "starting", "registration_id": "b"}`,
		`{"instance_id": "I", "addresses": ["169.254.169.254"], "ports": {"http": 0}}`,
		`{"incarnation": 1, "ready": true, "dependencies": {"db": "failed"}}`,
		`{"incarnation": 18446744073709551615}`,
		`[]`, `null`, `{"instance_id": "i-1"}}`, "namespace: shop\nname: web\nports: [{name: http, number: 80}]\n",
		`{"namespace": "shop", "name": "x", "ports": [{"name": "p", "number": 1}], "policy": {"min_healthy_fraction": 2}}`,
	} {
		for route := range 4 {
			f.Add(uint8(route), []byte(s))
		}
	}
	n := storetest.Single(f, store.Config{})
	authz, err := acl.New(acl.Config{})
	if err != nil {
		f.Fatal(err)
	}
	a, err := api.New(api.Config{Store: n.Store, ACL: authz, Addrs: addrpolicy.New(addrpolicy.Config{}), Logger: storetest.Logger(f)})
	if err != nil {
		f.Fatal(err)
	}
	srv := httptest.NewServer(a)
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	f.Cleanup(func() {
		hc.CloseIdleConnections()
		srv.Close()
	})
	apply := "namespace: shop\nname: web\nports: [{name: http, number: 80}]\ncapability: {dependencies: [{name: db, shared: true}]}\n"
	r, err := hc.Post(srv.URL+"/v1/apply", "application/yaml", strings.NewReader(apply))
	if err != nil {
		f.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != http.StatusOK {
		f.Fatalf("apply: %s", r.Status)
	}
	routes := []string{"/v1/apply", "/v1/services/shop/web/instances", "/v1/services/shop/web/instances/i-1/drain", "/v1/services/shop/web/instances/i-1/report"}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := routes[int(route)%len(routes)]
		before := n.Revision()
		resp, err := hc.Post(srv.URL+path, "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode >= 500:
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		case resp.StatusCode >= 400:
			var e wire.Error
			if json.Unmarshal(b, &e) != nil || e.Code == "" || e.Error == "" {
				t.Fatalf("%s: %d with a body that is not an error: %s", path, resp.StatusCode, b)
			}
			if n.Revision() != before {
				t.Fatalf("%s: refused with %d, yet the revision moved from %d to %d", path, resp.StatusCode, before, n.Revision())
			}
		case !json.Valid(b):
			t.Fatalf("%s: %d with a body that is not JSON: %s", path, resp.StatusCode, b)
		}
	})
}
