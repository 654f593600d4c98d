package api_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestHealthzAndReadyz(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	r := e.call(t, http.MethodGet, "/healthz", "", "")
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[map[string]string](t, r)["status"]; got != "ok" {
		t.Errorf("/healthz status %q, want ok", got)
	}
	r = e.call(t, http.MethodGet, "/readyz", "", "")
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[map[string]string](t, r)["status"]; got != "ready" {
		t.Errorf("/readyz status %q, want ready", got)
	}
	if !e.client(t, "").Ready(t.Context()) {
		t.Error("client.Ready is false on a ready server")
	}
}

func TestReadyzNotReady(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{ready: func() error { return errors.New("no status table yet") }})
	r := e.call(t, http.MethodGet, "/readyz", "", "")
	wantStatus(t, r, http.StatusServiceUnavailable)
	if got := decodeAs[map[string]string](t, r); got["status"] != "not ready" || got["reason"] != "no status table yet" {
		t.Errorf("/readyz says %v, want status \"not ready\" and the reason", got)
	}
	// A node that is not ready is still alive.
	wantStatus(t, e.call(t, http.MethodGet, "/healthz", "", ""), http.StatusOK)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	wantError(t, e.call(t, http.MethodPost, "/v1/services/shop/web/instances", "", regJSON("I-1", "10.0.0.1")),
		http.StatusBadRequest, wire.CodeInvalid, "instance_id")

	r := e.call(t, http.MethodGet, "/metrics", "", "")
	wantStatus(t, r, http.StatusOK)
	for _, want := range []string{
		`cairn_api_requests_total{code="201",route="register"} 1`,
		`cairn_api_requests_total{code="400",route="register"} 1`,
		`cairn_api_requests_total{code="200",route="apply"} 1`,
		`cairn_api_rejected_mutations_total{reason="invalid_argument"} 1`,
	} {
		if !strings.Contains(string(r.Body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestMetricsWithoutGathererIsNotFound(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{noMetrics: true})
	wantError(t, e.call(t, http.MethodGet, "/metrics", "", ""), http.StatusNotFound, wire.CodeNotFound, "/metrics")
}

func TestUnknownRoute(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	before := e.snapshot(t)
	for _, tc := range []struct{ method, path string }{
		{http.MethodGet, "/"},
		{http.MethodGet, "/v1/nope"},
		{http.MethodGet, "/v1/services/"},
		{http.MethodGet, "/v1/services/shop"},
		{http.MethodGet, "/v1/services/shop/web/bogus"},
		{http.MethodPost, "/v1/services"},
		{http.MethodDelete, "/v1/apply"},
		{http.MethodGet, "/v1/apply"},
		{http.MethodPut, "/v1/members"},
		{http.MethodGet, "/v1/services/shop/web/instances/i-1/renew"},
		{http.MethodPost, "/v1/services/shop/web/instances/i-1/explode"},
	} {
		r := e.call(t, tc.method, tc.path, "", `{"incarnation": 1}`)
		// A known path with another method is 405 with Allow; the rest 404.
		switch tc.path {
		case "/v1/services", "/v1/apply", "/v1/members", "/v1/services/shop/web/instances/i-1/renew":
			wantError(t, r, http.StatusMethodNotAllowed, wire.CodeMethod, tc.path)
			if r.Header.Get("Allow") == "" {
				t.Errorf("%s %s: 405 without an Allow header", tc.method, tc.path)
			}
		default:
			wantError(t, r, http.StatusNotFound, wire.CodeNotFound, tc.path)
		}
	}
	e.wantUnchanged(t, before, "requests to unknown routes")
}

func TestApplyYAMLMultiDocument(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	c := e.client(t, "")
	res, err := c.Apply(t.Context(), []byte(webYAML+"---\n"+cartYAML+"---\n"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Revision == 0 || !slices.Equal(res.Services, []string{"shop/web", "shop/cart"}) {
		t.Fatalf("apply answered %+v; want a revision and [shop/web shop/cart]", res)
	}
	web, ok := e.node.Service("shop", "web")
	if !ok || web.Revision != res.Revision {
		t.Fatalf("shop/web in the store: %+v (found %v); want revision %d", web, ok, res.Revision)
	}

	// Applying the same definitions again changes no definition and
	// writes no event.
	events := e.node.Events("shop", "web", 0)
	res2, err := c.Apply(t.Context(), []byte(webYAML+"---\n"+cartYAML))
	if err != nil {
		t.Fatal(err)
	}
	if web2, _ := e.node.Service("shop", "web"); web2.Revision != res.Revision {
		t.Errorf("an identical apply moved shop/web's revision from %d to %d", res.Revision, web2.Revision)
	}
	if got := e.node.Events("shop", "web", 0); len(got) != len(events) {
		t.Errorf("an identical apply wrote events: %+v", got[len(events):])
	}

	// A changed definition gets a new revision and an event.
	res3, err := c.Apply(t.Context(), []byte(strings.Replace(webYAML, "lease_ttl: 30s", "lease_ttl: 20s", 1)))
	if err != nil {
		t.Fatal(err)
	}
	web3, _ := e.node.Service("shop", "web")
	if web3.Revision != res3.Revision || res3.Revision <= res2.Revision || web3.Policy.LeaseTTL.D() != 20*time.Second {
		t.Errorf("after a change shop/web is %+v; want revision %d and lease_ttl 20s", web3, res3.Revision)
	}
	ev := e.node.Events("shop", "web", 0)
	if len(ev) != 2 || ev[0].Kind != wire.EventApplied || ev[1].Kind != wire.EventApplied || ev[1].Actor != "anonymous" {
		t.Errorf("events of shop/web: %+v; want two applied events by anonymous", ev)
	}
}

func TestApplyJSONArray(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	body := `[
	  {"namespace": "shop", "name": "a", "ports": [{"name": "http", "number": 80}]},
	  {"namespace": "shop", "name": "b", "ports": [{"name": "grpc", "number": 9000, "protocol": "tcp"}],
	   "check": {"type": "grpc", "interval": "5s"}}
	]`
	r := e.call(t, http.MethodPost, "/v1/apply", "", body)
	wantStatus(t, r, http.StatusOK)
	got := decodeAs[map[string]any](t, r)
	if got["revision"].(float64) == 0 || len(got["services"].([]any)) != 2 {
		t.Fatalf("apply answered %s", r.Body)
	}
	a, okA := e.node.Service("shop", "a")
	b, okB := e.node.Service("shop", "b")
	if !okA || !okB {
		t.Fatalf("shop/a (%v) or shop/b (%v) is missing", okA, okB)
	}
	if a.Ports[0].Protocol != "tcp" || a.Capability.Readiness != "none" {
		t.Errorf("shop/a defaults not applied: %+v", a)
	}
	if b.Check == nil || b.Check.Port != "grpc" || b.Check.Timeout.D() != wire.DefaultCheckTimeout || b.Capability.Readiness != "probe" {
		t.Errorf("shop/b check defaults not applied: %+v", b.Check)
	}
}

func TestApplyJSONObject(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	r := e.call(t, http.MethodPost, "/v1/apply", "", `{"namespace": "shop", "name": "c", "ports": [{"name": "dns", "number": 53, "protocol": "udp"}],
	  "policy": {"dns_ttl": "10s", "min_healthy_fraction": 0}}`)
	wantStatus(t, r, http.StatusOK)
	c, ok := e.node.Service("shop", "c")
	if !ok {
		t.Fatal("shop/c was not stored")
	}
	if c.Policy.DNSTTL.D() != 10*time.Second || *c.Policy.MinHealthyFraction != 0 || c.Ports[0].Protocol != "udp" {
		t.Errorf("shop/c stored as %+v", c)
	}
}

// TestServicesZones: GET /v1/services counts instances and eligible ones
// per zone, in the same pass and from the same source as the totals; an
// instance without a zone counts under "", a terminated one nowhere.
func TestServicesZones(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML, cartYAML)
	reg := func(id, addr, zone string) wire.Registered {
		t.Helper()
		r := e.call(t, http.MethodPost, "/v1/services/shop/web/instances", "",
			mustJSON(map[string]any{"instance_id": id, "addresses": []string{addr}, "ports": map[string]int{"http": 8080}, "zone": zone}))
		if r.Status != http.StatusCreated {
			t.Fatalf("register %s: %d %s", id, r.Status, r.Body)
		}
		return decodeAs[wire.Registered](t, r)
	}
	reg("a-1", "10.0.0.1", "a")
	reg("a-2", "10.0.0.2", "a")
	b1 := reg("b-1", "10.0.0.3", "b")
	reg("b-2", "10.0.0.4", "b")
	reg("n-1", "10.0.0.5", "")
	gone := reg("g-1", "10.0.0.6", "c")
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "web", "b-1", "drain"), "", incBody(b1.Incarnation)), http.StatusOK)
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "web", "g-1", "deregister"), "", incBody(gone.Incarnation)), http.StatusOK)

	list := decodeAs[[]wire.ServiceSummary](t, e.call(t, http.MethodGet, "/v1/services", "", ""))
	if len(list) != 2 {
		t.Fatalf("services: %+v", list)
	}
	if list[0].Name != "cart" || list[0].Zones == nil || len(list[0].Zones) != 0 {
		t.Errorf("cart, without instances: zones %#v, want []", list[0].Zones)
	}
	web := list[1]
	want := []wire.ZoneCount{{Zone: "", Instances: 1, Eligible: 1}, {Zone: "a", Instances: 2, Eligible: 2}, {Zone: "b", Instances: 2, Eligible: 1}}
	if web.Name != "web" || web.Instances != 5 || web.Eligible != 4 || !reflect.DeepEqual(web.Zones, want) {
		t.Fatalf("web: %+v; want 5 instances, 4 eligible, zones %+v", web, want)
	}
	// The raw JSON: an empty list, never null, and the zone's own name.
	r := e.call(t, http.MethodGet, "/v1/services", "", "")
	for _, key := range []string{`"zones":[]`, `{"zone":"b","instances":2,"eligible":1}`, `{"zone":"","instances":1,"eligible":1}`} {
		if !strings.Contains(strings.Join(strings.Fields(string(r.Body)), ""), key) {
			t.Errorf("GET /v1/services lacks %s: %s", key, r.Body)
		}
	}
}

func TestApplyNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	before := e.snapshot(t)
	for _, body := range []string{"", "   \n", "---\n---\n", "[]", "# just a comment\n"} {
		wantError(t, e.call(t, http.MethodPost, "/v1/apply", "", body), http.StatusBadRequest, wire.CodeInvalid, "body")
	}
	e.wantUnchanged(t, before, "empty applies")
}

func TestServicesAndServiceDetail(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML, cartYAML)
	e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	e.register(t, "", "shop", "web", "i-2", "10.0.0.2")
	c := e.client(t, "")

	list, err := c.Services(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := []wire.ServiceSummary{
		{Namespace: "shop", Name: "cart", Ports: 1, Revision: list[0].Revision, Zones: []wire.ZoneCount{}},
		{Namespace: "shop", Name: "web", Ports: 2, Instances: 2, Eligible: 2, Revision: list[1].Revision,
			Zones: []wire.ZoneCount{{Zone: "", Instances: 2, Eligible: 2}}},
	}
	if !reflect.DeepEqual(list, want) || list[0].Revision == 0 {
		t.Fatalf("services: %+v; want %+v", list, want)
	}

	d, err := c.Service(t.Context(), "shop", "web")
	if err != nil {
		t.Fatal(err)
	}
	p := d.Definition.Policy
	if p.DNSTTL.D() != wire.DefaultDNSTTL || p.ARecordLimit != wire.DefaultARecordLimit ||
		*p.MinHealthyFraction != wire.DefaultMinHealthyFraction || p.AdmitAfter != wire.DefaultAdmitAfter ||
		*p.MaxEjectionPercent != wire.DefaultMaxEjectionPercent || p.DrainWindow.D() != time.Hour {
		t.Errorf("definition without its defaults: %+v", p)
	}
	if d.View.Revision != e.node.Revision() || len(d.View.Endpoints) != 2 || d.View.HealthDisregarded || d.View.Stale {
		t.Errorf("view %+v; want revision %d and 2 endpoints", d.View, e.node.Revision())
	}

	// The raw JSON uses the names SPEC §6.1 gives.
	r := e.call(t, http.MethodGet, svcPath("shop", "web"), "", "")
	wantStatus(t, r, http.StatusOK)
	for _, key := range []string{`"definition"`, `"view"`, `"dns_ttl": "5s"`, `"lease_ttl": "30s"`, `"revision"`, `"health_disregarded"`} {
		if !strings.Contains(string(r.Body), key) {
			t.Errorf("service detail lacks %s: %s", key, r.Body)
		}
	}

	for _, path := range []string{svcPath("shop", "nope"), svcPath("nope", "web"), svcPath("shop", "nope") + "/endpoints", svcPath("shop", "nope") + "/events"} {
		wantError(t, e.call(t, http.MethodGet, path, "", ""), http.StatusNotFound, wire.CodeNotFound, "nope")
	}
}

func TestEndpoints(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	// Not a test of budgets: i-3 goes while i-2 is starting.
	e.apply(t, "", strings.Replace(webYAML, "drain_window: 1h}", "drain_window: 1h, max_unavailable: 2}", 1))
	e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	r := e.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", "",
		`{"instance_id": "i-2", "addresses": ["10.0.0.2", "2001:db8::2"], "ports": {"http": 8080, "admin": 9090},
		  "region": "eu-west", "zone": "eu-west-1a", "weight": 7, "lifecycle": "starting"}`)
	wantStatus(t, r, http.StatusCreated)
	i3 := e.register(t, "", "shop", "web", "i-3", "10.0.0.3")
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-3", "deregister"), "", incBody(i3.Incarnation)), http.StatusOK)

	r = e.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints", "", "")
	wantStatus(t, r, http.StatusOK)
	// SPEC §6.1: at least these keys.
	var raw []map[string]any
	if err := json.Unmarshal(r.Body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"instance_id", "incarnation", "addresses", "zone", "lifecycle", "verdict", "eligible", "weight"} {
		if _, ok := raw[0][k]; !ok {
			t.Errorf("an endpoint lacks %q: %v", k, raw[0])
		}
	}
	eps := decodeAs[[]wire.Endpoint](t, r)
	if len(eps) != 2 || eps[0].InstanceID != "i-1" || eps[1].InstanceID != "i-2" {
		t.Fatalf("endpoints %+v; want i-1 and i-2 (i-3 is terminated)", eps)
	}
	if e1 := eps[0]; !e1.Eligible || e1.Weight != 100 || e1.Lifecycle != status.Ready || e1.Verdict != status.Unknown || e1.LeaseExpired {
		t.Errorf("i-1: %+v; want ready, eligible, weight 100, verdict unknown", e1)
	}
	if e2 := eps[1]; e2.Eligible || e2.Weight != 0 || e2.BaseWeight != 7 || e2.Zone != "eu-west-1a" || e2.Region != "eu-west" ||
		!slices.Equal(e2.Addresses, []string{"10.0.0.2", "2001:db8::2"}) || e2.Ports["admin"] != 9090 || !slices.Contains(e2.Reasons, "starting") {
		t.Errorf("i-2: %+v; want starting, not eligible, base weight 7", e2)
	}

	// ?all=true shows the terminated instance too.
	r = e.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints?all=true", "", "")
	wantStatus(t, r, http.StatusOK)
	all := decodeAs[[]wire.Endpoint](t, r)
	if len(all) != 3 || all[2].InstanceID != "i-3" || all[2].Lifecycle != status.Terminated || all[2].Eligible ||
		!slices.Contains(all[2].Reasons, "deregistered") {
		t.Errorf("endpoints?all=true: %+v; want i-3 terminated", all)
	}
	// Anything but "true" is the default.
	r = e.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints?all=1", "", "")
	if got := decodeAs[[]wire.Endpoint](t, r); len(got) != 2 {
		t.Errorf("endpoints?all=1 listed %d endpoints, want 2", len(got))
	}
}

func TestEvents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	in := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", "report"), "",
		mustJSON(map[string]any{"incarnation": in.Incarnation, "ready": false, "dependencies": map[string]string{"db": "failed"}})), http.StatusOK)
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", "drain"), "", incBody(in.Incarnation)), http.StatusOK)

	ev, err := e.client(t, "").Events(t.Context(), "shop", "web", 100)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []wire.EventKind
	for i, x := range ev {
		kinds = append(kinds, x.Kind)
		if i > 0 && x.Seq <= ev[i-1].Seq {
			t.Errorf("events out of order: %+v", ev)
		}
		if x.Actor != "anonymous" || x.At.IsZero() {
			t.Errorf("event %+v lacks its actor or time", x)
		}
	}
	if want := []wire.EventKind{wire.EventApplied, wire.EventRegistered, wire.EventReported, wire.EventDrained}; !slices.Equal(kinds, want) {
		t.Fatalf("event kinds %v, want %v", kinds, want)
	}
	if ev[2].Reason != "ready=false db=failed" || ev[3].From != "ready" || ev[3].To != "draining" || ev[3].Incarnation != in.Incarnation {
		t.Errorf("report/drain events: %+v %+v", ev[2], ev[3])
	}

	// limit returns the newest, oldest first; no limit means 100.
	r := e.call(t, http.MethodGet, svcPath("shop", "web")+"/events?limit=2", "", "")
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[[]wire.Event](t, r); len(got) != 2 || got[0].Kind != wire.EventReported || got[1].Kind != wire.EventDrained {
		t.Errorf("events?limit=2: %+v", got)
	}
	for _, l := range []string{"", "?limit=10000"} {
		r = e.call(t, http.MethodGet, svcPath("shop", "web")+"/events"+l, "", "")
		wantStatus(t, r, http.StatusOK)
		if got := decodeAs[[]wire.Event](t, r); len(got) != 4 {
			t.Errorf("events%s: %d events, want 4", l, len(got))
		}
	}
	// Events are per service.
	e.apply(t, "", cartYAML)
	r = e.call(t, http.MethodGet, svcPath("shop", "cart")+"/events?limit=1", "", "")
	if got := decodeAs[[]wire.Event](t, r); len(got) != 1 {
		t.Errorf("shop/cart events: %s", r.Body)
	}

	for _, bad := range []string{"0", "-1", "abc", "1.5", "10001", "99999999999999999999", "%20"} {
		wantError(t, e.call(t, http.MethodGet, svcPath("shop", "web")+"/events?limit="+bad, "", ""),
			http.StatusBadRequest, wire.CodeInvalid, "limit")
	}
}

func TestRegisterIdempotentAndNewIncarnation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	body := regJSON("i-1", "10.0.0.1", "10.0.0.2")
	path := svcPath("shop", "web") + "/instances"

	r := e.call(t, http.MethodPost, path, "", body)
	wantStatus(t, r, http.StatusCreated)
	first := decodeAs[wire.Registered](t, r)
	if !first.Created || first.Incarnation == 0 || first.Weight != wire.DefaultWeight || first.Lifecycle != status.Ready ||
		first.LeaseTTL.D() != 30*time.Second || first.Registrar != "anonymous" || first.SourceRevision == 0 ||
		!first.LeaseDeadline.After(first.RegisteredAt) {
		t.Fatalf("first registration: %+v", first)
	}

	// An identical retry returns the committed record: same incarnation.
	r = e.call(t, http.MethodPost, path, "", body)
	wantStatus(t, r, http.StatusOK)
	retry := decodeAs[wire.Registered](t, r)
	if retry.Created || retry.Incarnation != first.Incarnation || retry.SourceRevision != first.SourceRevision {
		t.Fatalf("retry: %+v; want incarnation %d, created false", retry, first.Incarnation)
	}
	// Spelling the defaults out is the same registration.
	r = e.call(t, http.MethodPost, path, "", `{"instance_id": "i-1", "addresses": ["10.0.0.1", "10.0.0.2"], "ports": {"http": 8080}, "weight": 100, "lease_ttl": "30s"}`)
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[wire.Registered](t, r); got.Incarnation != first.Incarnation {
		t.Fatalf("retry with the defaults spelt out: incarnation %d, want %d", got.Incarnation, first.Incarnation)
	}
	if n := len(e.node.Events("shop", "web", 0)); n != 2 {
		t.Errorf("retries wrote events: %d events, want applied and registered", n)
	}

	// Changed content that names the incarnation it replaces is a new,
	// larger incarnation; without it, it is refused and changes nothing.
	inc := first.Incarnation
	for _, changed := range []string{
		regJSON("i-1", "10.0.0.1"),
		regJSON("i-1", "10.0.0.2", "10.0.0.1"),
		`{"instance_id": "i-1", "addresses": ["10.0.0.2", "10.0.0.1"], "ports": {"http": 8081}}`,
		`{"instance_id": "i-1", "addresses": ["10.0.0.2", "10.0.0.1"], "ports": {"http": 8081}, "weight": 5}`,
		`{"instance_id": "i-1", "addresses": ["10.0.0.2", "10.0.0.1"], "ports": {"http": 8081}, "weight": 5, "zone": "z1"}`,
		`{"instance_id": "i-1", "addresses": ["10.0.0.2", "10.0.0.1"], "ports": {"http": 8081}, "weight": 5, "zone": "z1", "lease_ttl": "10s"}`,
	} {
		before := e.snapshot(t)
		wantError(t, e.call(t, http.MethodPost, path, "", changed), http.StatusConflict, wire.CodeFenced,
			fmt.Sprintf("replaces %d", inc))
		e.wantUnchanged(t, before, "a changed registration naming nothing")
		r = e.call(t, http.MethodPost, path, "", withReplaces(changed, inc))
		wantStatus(t, r, http.StatusCreated)
		got := decodeAs[wire.Registered](t, r)
		if !got.Created || got.Incarnation <= inc {
			t.Fatalf("registering %s: %+v; want a new incarnation above %d", changed, got, inc)
		}
		inc = got.Incarnation
	}
	if got := e.instance(t, "shop", "web", "i-1"); got.Incarnation != inc || got.Weight != 5 || got.Zone != "z1" {
		t.Errorf("stored %+v; want incarnation %d", got, inc)
	}

	// Re-registering after a drain is a new incarnation too, once it names
	// the draining one.
	last := `{"instance_id": "i-1", "addresses": ["10.0.0.2", "10.0.0.1"], "ports": {"http": 8081}, "weight": 5, "zone": "z1", "lease_ttl": "10s"}`
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", "drain"), "", incBody(inc)), http.StatusOK)
	wantError(t, e.call(t, http.MethodPost, path, "", last), http.StatusConflict, wire.CodeFenced, "draining", fmt.Sprintf("replaces %d", inc))
	r = e.call(t, http.MethodPost, path, "", withReplaces(last, inc))
	wantStatus(t, r, http.StatusCreated)
	if got := decodeAs[wire.Registered](t, r); got.Incarnation <= inc || got.Lifecycle != status.Ready {
		t.Errorf("registration after a drain: %+v", got)
	}
}

func TestRegisterUnknownService(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	before := e.snapshot(t)
	wantError(t, e.call(t, http.MethodPost, svcPath("shop", "nope")+"/instances", "", regJSON("i-1", "10.0.0.1")),
		http.StatusNotFound, wire.CodeNotFound, "shop/nope")
	e.wantUnchanged(t, before, "registering into an undefined service")
}

func TestRenew(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	reg := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	rev := e.node.Revision()

	in, err := e.client(t, "").Renew(t.Context(), wire.InstanceKey{Namespace: "shop", Service: "web", ID: "i-1"}, reg.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if in.Incarnation != reg.Incarnation || in.Lifecycle != status.Ready || in.LeaseDeadline.Before(reg.LeaseDeadline) {
		t.Fatalf("renewed: %+v; registered: %+v", in, reg.Instance)
	}
	// The renewal reaches the log in the next checkpoint.
	storetest.WaitFor(t, 10*time.Second, func() error {
		if e.node.Revision() == rev {
			return fmt.Errorf("revision still %d: renewal not checkpointed", rev)
		}
		return nil
	})
	if got := e.instance(t, "shop", "web", "i-1"); !got.LeaseDeadline.Equal(in.LeaseDeadline) {
		t.Errorf("lease deadline %v after the checkpoint, want %v", got.LeaseDeadline, in.LeaseDeadline)
	}

	before := e.snapshot(t)
	wantError(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", "renew"), "",
		mustJSON(map[string]any{"incarnation": reg.Incarnation, "ready": true})), http.StatusBadRequest, wire.CodeInvalid, "ready")
	wantError(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-9", "renew"), "", incBody(reg.Incarnation)),
		http.StatusNotFound, wire.CodeNotFound, "shop/web/i-9")
	e.wantUnchanged(t, before, "refused renewals")
}

func TestDrain(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	reg := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	key := wire.InstanceKey{Namespace: "shop", Service: "web", ID: "i-1"}
	c := e.client(t, "")

	in, err := c.Drain(t.Context(), key, reg.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if in.Lifecycle != status.Draining || in.DrainingSince.IsZero() || in.Incarnation != reg.Incarnation {
		t.Fatalf("drained: %+v", in)
	}
	eps, err := c.Endpoints(t.Context(), "shop", "web")
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 1 || eps[0].Eligible || !slices.Contains(eps[0].Reasons, "draining") {
		t.Errorf("endpoints while draining: %+v", eps)
	}
	// A retried drain is answered with the record and changes nothing.
	before := e.snapshot(t)
	again, err := c.Drain(t.Context(), key, reg.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if !again.DrainingSince.Equal(in.DrainingSince) {
		t.Errorf("a retried drain moved draining_since from %v to %v", in.DrainingSince, again.DrainingSince)
	}
	if got := e.node.Events("shop", "web", 0); len(got) != len(before.Events) {
		t.Errorf("a retried drain wrote an event: %+v", got[len(got)-1])
	}
}

func TestDeregister(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	reg := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	key := wire.InstanceKey{Namespace: "shop", Service: "web", ID: "i-1"}
	c := e.client(t, "")

	in, err := c.Deregister(t.Context(), key, reg.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if in.Lifecycle != status.Terminated || in.TerminatedAt.IsZero() {
		t.Fatalf("deregistered: %+v", in)
	}
	if _, err := c.Deregister(t.Context(), key, reg.Incarnation); err != nil {
		t.Errorf("a retried deregistration: %v", err)
	}
	// A deregistered incarnation is fenced for every other mutation.
	before := e.snapshot(t)
	for _, verb := range []string{"renew", "drain"} {
		wantError(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", verb), "", incBody(reg.Incarnation)),
			http.StatusConflict, wire.CodeFenced, "deregistered")
	}
	wantError(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", "report"), "",
		mustJSON(map[string]any{"incarnation": reg.Incarnation, "ready": true})), http.StatusConflict, wire.CodeFenced, "deregistered")
	// Refused by the FSM: only the revision moves (TestRefusedMutationKeepsRevision).
	e.wantUnchanged(t, before, "mutations of a deregistered instance")
}

func TestReport(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	reg := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	key := wire.InstanceKey{Namespace: "shop", Service: "web", ID: "i-1"}

	in, err := e.client(t, "").Report(t.Context(), key, reg.Incarnation, false, map[string]wire.DependencyState{"db": wire.DepDegraded})
	if err != nil {
		t.Fatal(err)
	}
	if in.Report == nil || in.Report.Ready || in.Report.Dependencies["db"] != wire.DepDegraded || in.Report.Reporter != "anonymous" || in.Report.At.IsZero() {
		t.Fatalf("report stored as %+v", in.Report)
	}
	r := e.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints", "", "")
	if eps := decodeAs[[]wire.Endpoint](t, r); len(eps) != 1 || eps[0].Report == nil || eps[0].Report.Ready {
		t.Errorf("endpoints do not show the report: %s", r.Body)
	}

	before := e.snapshot(t)
	path := instPath("shop", "web", "i-1", "report")
	for _, tc := range []struct{ body, field string }{
		{incBody(reg.Incarnation), "ready"},
		{mustJSON(map[string]any{"incarnation": reg.Incarnation, "ready": true, "dependencies": map[string]string{"cache": "ok"}}), "dependencies"},
		{mustJSON(map[string]any{"incarnation": reg.Incarnation, "ready": true, "dependencies": map[string]string{"db": "sad"}}), "dependencies"},
		{`{"incarnation": 1, "ready": "yes"}`, "ready"},
	} {
		wantError(t, e.call(t, http.MethodPost, path, "", tc.body), http.StatusBadRequest, wire.CodeInvalid, tc.field)
	}
	// Undeclared dependencies are refused by the FSM: only the revision
	// moves (TestRefusedMutationKeepsRevision).
	e.wantUnchanged(t, before, "invalid reports")
}

func TestMembers(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	ms, err := e.client(t, "").Members(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	want := wire.Member{NodeID: "n1", RaftAddr: "n1", HTTPAddr: ownHost + ":8480", Leader: true, Voter: true}
	if len(ms) != 1 || ms[0] != want {
		t.Fatalf("members %+v; want [%+v]", ms, want)
	}
	r := e.call(t, http.MethodGet, "/v1/members", "", "")
	for _, k := range []string{`"node_id"`, `"raft_addr"`, `"http_addr"`, `"leader": true`} {
		if !strings.Contains(string(r.Body), k) {
			t.Errorf("members JSON lacks %s: %s", k, r.Body)
		}
	}
}

// TestJoinAndLeaveRefused covers the membership routes' input checks on a
// single node; a successful join and leave is in TestJoinAndLeaveOverAPI.
func TestJoinAndLeaveRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	before := e.snapshot(t)
	for _, tc := range []struct{ body, field string }{
		{`{"node_id": "N_2", "raft_addr": "10.0.0.2:8482", "http_addr": "10.0.0.2:8480"}`, "node_id"},
		{`{"node_id": "", "raft_addr": "10.0.0.2:8482", "http_addr": "10.0.0.2:8480"}`, "node_id"},
		{`{"node_id": "n2", "raft_addr": "10.0.0.2", "http_addr": "10.0.0.2:8480"}`, "raft_addr"},
		{`{"node_id": "n2", "raft_addr": "10.0.0.2:8482", "http_addr": "nowhere"}`, "http_addr"},
		{`{"node_id": "n2", "raft_addr": "10.0.0.2:8482", "http_addr": "10.0.0.2:8480", "voter": "yes"}`, "voter"},
		{`{"node_id": "n2", "raft_addr": "10.0.0.2:8482", "http_addr": "10.0.0.2:8480", "role": "x"}`, "role"},
		{`{"node_id": "n2"`, "body"},
	} {
		wantError(t, e.call(t, http.MethodPost, "/v1/members", "", tc.body), http.StatusBadRequest, wire.CodeInvalid, tc.field)
	}
	// Leaving is idempotent: an unknown member has left already.
	wantStatus(t, e.call(t, http.MethodDelete, "/v1/members/n9", "", ""), http.StatusOK)
	e.wantUnchanged(t, before, "refused joins and leaves")
}

// TestDefinitionReadBackApplies: a definition as GET returns it (revision
// included) can be applied back unchanged.
func TestDefinitionReadBackApplies(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	r := e.call(t, http.MethodGet, svcPath("shop", "web"), "", "")
	wantStatus(t, r, http.StatusOK)
	detail := decodeAs[wire.ServiceDetail](t, r)
	wantStatus(t, e.call(t, http.MethodPost, "/v1/apply", "", mustJSON(detail.Definition)), http.StatusOK)
}

// TestUIMount: with Config.UI set, the API hands GET /ui and /ui/... to
// it without a token (even with ACLs on), and other methods get the API's
// JSON 405.
func TestUIMount(t *testing.T) {
	ui := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "ui:"+r.URL.Path) })
	e := newEnv(t, options{ui: ui, acl: acl.Config{Enabled: true, Tokens: scopeTokens()}})
	for _, p := range []string{"/ui", "/ui/", "/ui/service.html"} {
		r := e.call(t, http.MethodGet, p, "", "")
		if r.Status != http.StatusOK || string(r.Body) != "ui:"+p {
			t.Errorf("GET %s: %s, want the UI's answer", p, r)
		}
	}
	wantError(t, e.call(t, http.MethodPost, "/ui/", "", ""), http.StatusMethodNotAllowed, wire.CodeMethod, "/ui/")
	wantError(t, e.call(t, http.MethodGet, "/v1/services", "", ""), http.StatusUnauthorized, wire.CodeUnauthenticated)
	// Without it, /ui/ is an unknown route.
	wantError(t, newEnv(t, options{}).call(t, http.MethodGet, "/ui/", "", ""), http.StatusNotFound, wire.CodeNotFound, "/ui/")
}
