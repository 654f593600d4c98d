package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/wire"
)

// Every test here sends bad input and then checks that nothing changed:
// not the revision, not a definition, not an instance, not an event.

func TestRegisterRejectsInvalidLabels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	before := e.snapshot(t)
	path := svcPath("shop", "web") + "/instances"
	for _, id := range []string{"I-1", "i_1", "-i1", "i1-", "-", strings.Repeat("a", 64), "", "i.1", "i 1", "ü"} {
		t.Run("instance_id="+id, func(t *testing.T) {
			wantError(t, e.call(t, http.MethodPost, path, "", regJSON(id, "10.0.0.1")), http.StatusBadRequest, wire.CodeInvalid, "instance_id")
		})
	}
	for _, tc := range []struct{ field, value string }{
		{"zone", "Zone-A"}, {"zone", "zone_a"}, {"zone", "-a"}, {"zone", "a-"}, {"zone", strings.Repeat("z", 64)},
		{"region", "EU"}, {"region", "eu_west"}, {"region", "eu-"}, {"region", strings.Repeat("r", 64)},
	} {
		t.Run(tc.field+"="+tc.value, func(t *testing.T) {
			body := mustJSON(map[string]any{"instance_id": "i-1", "addresses": []string{"10.0.0.1"}, "ports": map[string]int{"http": 8080}, tc.field: tc.value})
			wantError(t, e.call(t, http.MethodPost, path, "", body), http.StatusBadRequest, wire.CodeInvalid, tc.field)
		})
	}
	e.wantUnchanged(t, before, "registrations with invalid labels")

	// 63 characters is a label.
	id := strings.Repeat("a", 62) + "1"
	if got := e.register(t, "", "shop", "web", id, "10.0.0.1"); !got.Created || got.ID != id {
		t.Errorf("a 63-character id: %+v", got)
	}
}

func TestApplyRejectsInvalidLabels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	before := e.snapshot(t)
	doc := func(ns, name, port string) string {
		return fmt.Sprintf("namespace: %q\nname: %q\nports: [{name: %q, number: 80}]\n", ns, name, port)
	}
	for _, tc := range []struct{ body, field string }{
		{doc("Shop", "web", "http"), "namespace"},
		{doc("sh_op", "web", "http"), "namespace"},
		{doc("-shop", "web", "http"), "namespace"},
		{doc("shop-", "web", "http"), "namespace"},
		{doc(strings.Repeat("s", 64), "web", "http"), "namespace"},
		{doc("", "web", "http"), "namespace"},
		{doc("shop", "Web", "http"), "name"},
		{doc("shop", "web_1", "http"), "name"},
		{doc("shop", "-web", "http"), "name"},
		{doc("shop", "web-", "http"), "name"},
		{doc("shop", strings.Repeat("w", 64), "http"), "name"},
		{doc("shop", "web", "HTTP"), "ports[0].name"},
		{doc("shop", "web", "ht_tp"), "ports[0].name"},
		{"namespace: shop\nname: web\nports: [{name: http, number: 80}]\ncapability: {dependencies: [{name: Db}]}\n", "capability.dependencies[0].name"},
	} {
		wantError(t, e.call(t, http.MethodPost, "/v1/apply", "", tc.body), http.StatusBadRequest, wire.CodeInvalid, tc.field)
	}
	e.wantUnchanged(t, before, "applies with invalid labels")
}

func TestApplyRejectsInvalidDefinitions(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	before := e.snapshot(t)
	base := "namespace: shop\nname: web\n"
	for _, tc := range []struct{ body, field string }{
		{base, "ports"},
		{base + "ports: [{name: http, number: 0}]\n", "ports[0].number"},
		{base + "ports: [{name: http, number: 65536}]\n", "ports[0].number"},
		{base + "ports: [{name: http, number: 80, protocol: sctp}]\n", "ports[0].protocol"},
		{base + "ports: [{name: http, number: 80}, {name: http, number: 81}]\n", "ports[1].name"},
		{base + "ports: [{name: http, number: 80}]\ncapability: {readiness: maybe}\n", "capability.readiness"},
		{base + "ports: [{name: http, number: 80}]\ncapability: {readiness: probe}\n", "check"},
		{base + "ports: [{name: http, number: 80}]\ncheck: {type: icmp}\n", "check.type"},
		{base + "ports: [{name: http, number: 80}]\ncheck: {type: tcp, port: grpc}\n", "check.port"},
		{base + "ports: [{name: http, number: 80}]\ncheck: {type: http, path: ready}\n", "check.path"},
		{base + "ports: [{name: http, number: 80}]\ncheck: {type: http, interval: 1s, timeout: 2s}\n", "check.timeout"},
		{base + "ports: [{name: http, number: 80}]\ncheck: {type: tcp, interval: 10ms}\n", "check.interval"},
		{base + "ports: [{name: http, number: 80}]\ncheck: {type: tcp, interval: soon}\n", "soon"},
		{base + "ports: [{name: http, number: 80}]\npolicy: {dns_ttl: 1500ms}\n", "policy.dns_ttl"},
		{base + "ports: [{name: http, number: 80}]\npolicy: {lease_ttl: 100ms}\n", "policy.lease_ttl"},
		{base + "ports: [{name: http, number: 80}]\npolicy: {min_healthy_fraction: 1.5}\n", "policy.min_healthy_fraction"},
		{base + "ports: [{name: http, number: 80}]\npolicy: {withdraw_after: 5, admit_after: 5}\n", "policy.admit_after"},
		{base + "ports: [{name: http, number: 80}]\npolicy: {shrink_cap: 2}\n", "policy.shrink_cap"},
		{base + "ports: [{name: http, number: 80}]\npolicy: {max_ejection_percent: 101}\n", "policy.max_ejection_percent"},
		{base + "ports: [{name: http, number: 80}]\npolicy: {a_record_limit: 65}\n", "policy.a_record_limit"},
		{base + "ports: [{name: http, number: eighty}]\n", "eighty"},
		{base + "ports: [\n", "yaml"},
	} {
		wantError(t, e.call(t, http.MethodPost, "/v1/apply", "", tc.body), http.StatusBadRequest, wire.CodeInvalid, tc.field)
	}
	e.wantUnchanged(t, before, "invalid definitions")
}

func TestApplyAllOrNothing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	before := e.snapshot(t)
	// The first document is valid and would change shop/web; the second
	// is wrong in a different way each time.
	changedWeb := strings.Replace(webYAML, "lease_ttl: 30s", "lease_ttl: 10s", 1)
	for _, tc := range []struct{ name, body string }{
		{"invalid value", changedWeb + "---\n" + "namespace: shop\nname: cart\nports: [{name: http, number: 70000}]\n"},
		{"invalid label", changedWeb + "---\n" + "namespace: shop\nname: Cart\nports: [{name: http, number: 80}]\n"},
		{"unknown key", changedWeb + "---\n" + "namespace: shop\nname: cart\nports: [{name: http, number: 80}]\ncolour: red\n"},
		{"malformed yaml", changedWeb + "---\n" + "namespace: shop\nname: cart\nports: [{name: http\n"},
		{"defined twice", changedWeb + "---\n" + changedWeb},
		{"json array", `[{"namespace": "shop", "name": "cart", "ports": [{"name": "http", "number": 80}]},
		                 {"namespace": "shop", "name": "cart2", "ports": [{"name": "http", "number": -1}]}]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.call(t, http.MethodPost, "/v1/apply", "", tc.body), http.StatusBadRequest, wire.CodeInvalid, "document 2")
			e.wantUnchanged(t, before, "a multi-document apply with an invalid document")
		})
	}
	// Only the third of three documents is wrong.
	wantError(t, e.call(t, http.MethodPost, "/v1/apply", "", changedWeb+"---\n"+cartYAML+"---\n"+changedWeb),
		http.StatusBadRequest, wire.CodeInvalid, "document 3", "shop/web")
	e.wantUnchanged(t, before, "an apply whose third document repeats the first")
	if _, ok := e.node.Service("shop", "cart"); ok {
		t.Error("shop/cart was applied")
	}
}

func TestUnknownKeysAndFields(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	reg := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	before := e.snapshot(t)
	for _, tc := range []struct{ name, path, body, field string }{
		{"yaml top level", "/v1/apply", webYAML + "colour: red\n", "colour"},
		{"yaml nested", "/v1/apply", "namespace: shop\nname: web\nports: [{name: http, number: 80, tls: true}]\n", "tls"},
		{"yaml policy", "/v1/apply", "namespace: shop\nname: web\nports: [{name: http, number: 80}]\npolicy: {ttl: 5s}\n", "ttl"},
		{"json object", "/v1/apply", `{"namespace": "shop", "name": "web", "ports": [{"name": "http", "number": 80}], "colour": "red"}`, "colour"},
		{"json array", "/v1/apply", `[{"namespace": "shop", "name": "web", "ports": [{"name": "http", "number": 80}], "colour": "red"}]`, "colour"},
		{"register", svcPath("shop", "web") + "/instances", `{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "colour": "red"}`, "colour"},
		{"register namespace", svcPath("shop", "web") + "/instances", `{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "namespace": "other"}`, "namespace"},
		{"register incarnation", svcPath("shop", "web") + "/instances", `{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "incarnation": 99}`, "incarnation"},
		{"renew", instPath("shop", "web", "i-1", "renew"), fmt.Sprintf(`{"incarnation": %d, "force": true}`, reg.Incarnation), "force"},
		{"drain", instPath("shop", "web", "i-1", "drain"), fmt.Sprintf(`{"incarnation": %d, "now": true}`, reg.Incarnation), "now"},
		{"deregister", instPath("shop", "web", "i-1", "deregister"), fmt.Sprintf(`{"incarnation": %d, "reason": "x"}`, reg.Incarnation), "reason"},
		{"report", instPath("shop", "web", "i-1", "report"), fmt.Sprintf(`{"incarnation": %d, "ready": true, "healthy": true}`, reg.Incarnation), "healthy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.call(t, http.MethodPost, tc.path, "", tc.body), http.StatusBadRequest, wire.CodeInvalid, tc.field)
		})
	}
	e.wantUnchanged(t, before, "requests with unknown keys or fields")
}

func TestRegisterRejectsInvalidAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	before := e.snapshot(t)
	path := svcPath("shop", "web") + "/instances"
	for _, a := range []string{
		"fe80::1%eth0", "2001:db8::1%1", "10.0.0", "10.0.0.256", "010.0.0.1", "not-an-ip", "", " 10.0.0.1",
		"10.0.0.1:80", "10.0.0.1/32", "[2001:db8::1]", "2001:db8:::1", "example.com",
	} {
		t.Run(a, func(t *testing.T) {
			wantError(t, e.call(t, http.MethodPost, path, "", regJSON("i-1", a)), http.StatusBadRequest, wire.CodeInvalid, "addresses[0]")
		})
	}
	// The field named is the one at fault.
	wantError(t, e.call(t, http.MethodPost, path, "", regJSON("i-1", "10.0.0.1", "10.0.0.2", "bogus")),
		http.StatusBadRequest, wire.CodeInvalid, "addresses[2]", "bogus")
	// Listed twice, once in a non-canonical spelling.
	wantError(t, e.call(t, http.MethodPost, path, "", regJSON("i-1", "10.0.0.1", "::ffff:10.0.0.1")),
		http.StatusBadRequest, wire.CodeInvalid, "addresses[1]", "twice")
	wantError(t, e.call(t, http.MethodPost, path, "", regJSON("i-1")), http.StatusBadRequest, wire.CodeInvalid, "addresses")
	many := make([]string, 17)
	for i := range many {
		many[i] = fmt.Sprintf("10.0.1.%d", i+1)
	}
	wantError(t, e.call(t, http.MethodPost, path, "", regJSON("i-1", many...)), http.StatusBadRequest, wire.CodeInvalid, "addresses", "16")
	wantError(t, e.call(t, http.MethodPost, path, "", `{"instance_id": "i-1", "addresses": "10.0.0.1", "ports": {"http": 8080}}`),
		http.StatusBadRequest, wire.CodeInvalid, "addresses")
	e.wantUnchanged(t, before, "registrations with invalid addresses")
}

func TestRegisterRejectsForbiddenAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML, pciYAML)
	before := e.snapshot(t)
	for _, tc := range []struct{ ns, svc, addr, why string }{
		{"shop", "web", "127.0.0.1", "loopback"},
		{"shop", "web", "127.8.9.10", "loopback"},
		{"shop", "web", "::1", "loopback"},
		{"shop", "web", "::ffff:127.0.0.1", "loopback"},
		{"shop", "web", "169.254.169.254", "link-local"},
		{"shop", "web", "169.254.0.1", "link-local"},
		{"shop", "web", "fe80::1", "link-local"},
		{"shop", "web", "0.0.0.0", "unspecified"},
		{"shop", "web", "::", "unspecified"},
		{"shop", "web", "224.0.0.1", "multicast"},
		{"shop", "web", "239.1.2.3", "multicast"},
		{"shop", "web", "ff02::1", "multicast"},
		{"shop", "web", "255.255.255.255", "broadcast"},
		{"shop", "web", "fd00:ec2::254", "metadata"},
		{"shop", "web", "100.100.100.200", "metadata"},
		{"shop", "web", ownHost, "own addresses"},
		{"shop", "web", "::ffff:" + ownHost, "own addresses"},
		{pciNS, "vault", "10.0.0.1", pciNS},
		{pciNS, "vault", "10.51.0.1", pciNS},
		{pciNS, "vault", "2001:db8::1", pciNS},
	} {
		t.Run(tc.ns+"/"+tc.addr, func(t *testing.T) {
			r := e.call(t, http.MethodPost, svcPath(tc.ns, tc.svc)+"/instances", "", regJSON("i-1", tc.addr))
			wantError(t, r, http.StatusForbidden, wire.CodeForbiddenAddress, "addresses[0]", tc.why)
		})
	}
	// One forbidden address refuses the whole registration.
	wantError(t, e.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", "", regJSON("i-1", "10.0.0.1", "169.254.169.254")),
		http.StatusForbidden, wire.CodeForbiddenAddress, "addresses[1]")
	e.wantUnchanged(t, before, "registrations with forbidden addresses")

	// Inside the namespace's CIDR is fine.
	if got := e.register(t, "", pciNS, "vault", "i-1", "10.50.3.4"); !slices.Equal(got.Addresses, []string{"10.50.3.4"}) {
		t.Errorf("pci registration: %+v", got)
	}
}

func TestRegisterAllowsLoopbackInDev(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{dev: true})
	e.apply(t, "", webYAML)
	got := e.register(t, "", "shop", "web", "i-1", "127.0.0.1", "::1")
	if !slices.Equal(got.Addresses, []string{"127.0.0.1", "::1"}) {
		t.Errorf("dev registration: %+v", got)
	}
	// Everything else stays forbidden.
	before := e.snapshot(t)
	for _, a := range []string{"169.254.169.254", "fe80::1", "0.0.0.0", "224.0.0.1", ownHost} {
		wantError(t, e.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", "", regJSON("i-2", a)),
			http.StatusForbidden, wire.CodeForbiddenAddress, "addresses[0]")
	}
	e.wantUnchanged(t, before, "forbidden registrations in dev")
}

func TestRegisterCanonicalisesAddresses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	for _, tc := range []struct{ in, want string }{
		{"::ffff:10.0.0.1", "10.0.0.1"},
		{"2001:DB8::1", "2001:db8::1"},
		{"2001:0db8:0000:0000:0000:0000:0000:0002", "2001:db8::2"},
		{"2001:db8:0:0:1:0:0:3", "2001:db8::1:0:0:3"},
		{"::FFFF:192.0.2.7", "192.0.2.7"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			id := "i-" + strings.NewReplacer(":", "", ".", "").Replace(strings.ToLower(tc.want))
			got := e.register(t, "", "shop", "web", id, tc.in)
			if !slices.Equal(got.Addresses, []string{tc.want}) {
				t.Errorf("registered %s as %v, want %s", tc.in, got.Addresses, tc.want)
			}
			if st := e.instance(t, "shop", "web", id); !slices.Equal(st.Addresses, []string{tc.want}) {
				t.Errorf("stored %s as %v, want %s", tc.in, st.Addresses, tc.want)
			}
		})
	}
	// The canonical spelling of a registered address is a retry, not a
	// new incarnation.
	first := e.register(t, "", "shop", "web", "i-x", "2001:DB8::9")
	again := e.register(t, "", "shop", "web", "i-x", "2001:db8::9")
	if again.Created || again.Incarnation != first.Incarnation {
		t.Errorf("re-registering in canonical spelling: %+v, first %+v", again, first)
	}
}

// withReplaces adds "replaces": inc to a registration body.
func withReplaces(body string, inc uint64) string {
	return strings.TrimSuffix(strings.TrimSpace(body), "}") + fmt.Sprintf(`, "replaces": %d}`, inc)
}

// TestRegisterWeight: an absent weight takes the default 100; a weight
// given explicitly, 0 included, must be in 1-65535, or the registration is
// refused naming the field and the rule, and changes nothing (issue 8,
// item 9: 0 used to be taken silently for the default).
func TestRegisterWeight(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	path := svcPath("shop", "web") + "/instances"
	body := func(id string, weight any) string {
		return mustJSON(map[string]any{"instance_id": id, "addresses": []string{"10.0.0.1"}, "ports": map[string]int{"http": 8080}, "weight": weight})
	}
	for _, tc := range []struct {
		weight any
		want   int
	}{{1, 1}, {100, 100}, {65535, 65535}} {
		id := fmt.Sprintf("w-%v", tc.weight)
		r := e.call(t, http.MethodPost, path, "", body(id, tc.weight))
		wantStatus(t, r, http.StatusCreated)
		if got := decodeAs[wire.Registered](t, r); got.Weight != tc.want {
			t.Errorf("weight %v stored as %d, want %d", tc.weight, got.Weight, tc.want)
		}
	}
	if got := e.register(t, "", "shop", "web", "w-none", "10.0.0.1"); got.Weight != 100 {
		t.Errorf("no weight stored as %d, want 100", got.Weight)
	}

	before := e.snapshot(t)
	for _, tc := range []struct {
		weight any
		rule   string
	}{
		{0, "weight: 0 is out of range 1-65535"},
		{-1, "weight: -1 is out of range 1-65535"},
		{65536, "weight: 65536 is out of range 1-65535"},
		{1 << 40, "weight: 1099511627776 is out of range 1-65535"},
		{1.5, "weight"}, {"heavy", "weight"}, {true, "weight"},
	} {
		t.Run(fmt.Sprint(tc.weight), func(t *testing.T) {
			// An instance of that id is absent, so nothing but the
			// weight can be wrong.
			wantError(t, e.call(t, http.MethodPost, path, "", body("w-bad", tc.weight)), http.StatusBadRequest, wire.CodeInvalid, tc.rule)
		})
	}
	// A lease TTL given as 0 is refused too, not taken for the service's.
	wantError(t, e.call(t, http.MethodPost, path, "", mustJSON(map[string]any{"instance_id": "w-bad", "addresses": []string{"10.0.0.1"},
		"ports": map[string]int{"http": 8080}, "lease_ttl": "0s"})), http.StatusBadRequest, wire.CodeInvalid, "lease_ttl: 0s is out of range")
	e.wantUnchanged(t, before, "registrations with out-of-range weights")
}

func TestRegisterRejectsBadPortsAndLease(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	before := e.snapshot(t)
	path := svcPath("shop", "web") + "/instances"
	for _, tc := range []struct{ body, field string }{
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"]}`, "ports"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"grpc": 9000}}`, "grpc"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 0}}`, "ports"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 65536}}`, "ports"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": "80"}}`, "ports"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "lease_ttl": "1ms"}`, "lease_ttl"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "lease_ttl": "48h"}`, "lease_ttl"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "lease_ttl": 30}`, "lease_ttl: want a duration string"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "lease_ttl": "soon"}`, "lease_ttl: want a duration string"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "lifecycle": "draining"}`, "lifecycle"},
		{`{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "lifecycle": "terminated"}`, "lifecycle"},
	} {
		wantError(t, e.call(t, http.MethodPost, path, "", tc.body), http.StatusBadRequest, wire.CodeInvalid, tc.field)
	}
	e.wantUnchanged(t, before, "registrations with bad ports or leases")
}

func TestIncarnationFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	old := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	r := e.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", "", withReplaces(regJSON("i-1", "10.0.0.2"), old.Incarnation))
	wantStatus(t, r, http.StatusCreated)
	cur := decodeAs[wire.Registered](t, r)
	if cur.Incarnation <= old.Incarnation {
		t.Fatalf("re-registration got incarnation %d after %d", cur.Incarnation, old.Incarnation)
	}
	before := e.snapshot(t)
	newer := e.instance(t, "shop", "web", "i-1")
	// Incarnation 0 or missing is not a guess: it is refused.
	for _, verb := range []string{"renew", "drain", "deregister", "report"} {
		for _, body := range []string{`{}`, `{"incarnation": 0}`, `{"incarnation": null}`, `{"ready": true}`,
			`{"incarnation": -1}`, `{"incarnation": "3"}`, `{"incarnation": 1.5}`} {
			wantError(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", verb), "", body),
				http.StatusBadRequest, wire.CodeInvalid, "incarnation")
		}
	}
	e.wantUnchanged(t, before, "mutations without an incarnation")

	for _, verb := range []string{"renew", "drain", "deregister", "report"} {
		for _, inc := range []uint64{old.Incarnation, cur.Incarnation + 1, 1 << 60} {
			t.Run(fmt.Sprintf("%s/%d", verb, inc), func(t *testing.T) {
				body := mustJSON(map[string]any{"incarnation": inc})
				if verb == "report" {
					body = mustJSON(map[string]any{"incarnation": inc, "ready": false})
				}
				wantError(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", verb), "", body),
					http.StatusConflict, wire.CodeFenced, fmt.Sprint(inc), fmt.Sprint(cur.Incarnation))
				if got := e.instance(t, "shop", "web", "i-1"); !equalJSON(got, newer) {
					t.Fatalf("a fenced %s changed the record:\nnow    %+v\nbefore %+v", verb, got, newer)
				}
			})
		}
	}
	e.wantUnchanged(t, before, "mutations with a wrong incarnation")

	// A late retry of the first registration, naming what it replaced or
	// not, cannot put the old address back.
	for _, late := range []string{regJSON("i-1", "10.0.0.1"), withReplaces(regJSON("i-1", "10.0.0.1"), old.Incarnation)} {
		wantError(t, e.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", "", late),
			http.StatusConflict, wire.CodeFenced, fmt.Sprintf("replaces %d", cur.Incarnation))
	}
	e.wantUnchanged(t, before, "late registrations")
}

func TestOversizedBodies(t *testing.T) {
	t.Parallel()
	const limit = 8 << 10
	e := newEnv(t, options{maxBody: limit})
	e.apply(t, "", webYAML)
	reg := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	before := e.snapshot(t)
	pad := strings.Repeat(" ", 2*limit)
	comment := "# " + strings.Repeat("x", 2*limit) + "\n"
	for _, tc := range []struct{ name, path, body string }{
		{"apply yaml", "/v1/apply", comment + webYAML},
		{"apply yaml trailing", "/v1/apply", webYAML + comment},
		{"apply json", "/v1/apply", "[" + pad + "]"},
		{"register", svcPath("shop", "web") + "/instances", pad + regJSON("i-2", "10.0.0.2")},
		{"register long id", svcPath("shop", "web") + "/instances", regJSON(strings.Repeat("a", 2*limit), "10.0.0.2")},
		{"register trailing", svcPath("shop", "web") + "/instances", regJSON("i-2", "10.0.0.2") + pad},
		{"renew", instPath("shop", "web", "i-1", "renew"), pad + incBody(reg.Incarnation)},
		{"drain trailing", instPath("shop", "web", "i-1", "drain"), incBody(reg.Incarnation) + pad},
		{"join", "/v1/members", pad + `{}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.call(t, http.MethodPost, tc.path, "", tc.body), http.StatusRequestEntityTooLarge, wire.CodeTooLarge, "body")
		})
	}
	e.wantUnchanged(t, before, "oversized bodies")

	// Just under the limit is fine.
	r := e.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", "", strings.Repeat(" ", limit-200)+regJSON("i-2", "10.0.0.2"))
	wantStatus(t, r, http.StatusCreated)
}

func TestMalformedJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	reg := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	before := e.snapshot(t)
	good := regJSON("i-2", "10.0.0.2")
	inc := incBody(reg.Incarnation)
	for _, tc := range []struct{ name, path, body, field string }{
		{"empty", "/instances", "", "body"},
		{"blank", "/instances", "  \n ", "body"},
		{"truncated", "/instances", `{"instance_id": "i-2"`, "body"},
		{"syntax", "/instances", `{"instance_id": }`, "body"},
		{"not json", "/instances", `instance_id=i-2`, "body"},
		{"single quotes", "/instances", `{'instance_id': 'i-2'}`, "body"},
		{"array", "/instances", `[` + good + `]`, "body"},
		{"string", "/instances", `"i-2"`, "body"},
		{"number", "/instances", `42`, "body"},
		{"wrong type", "/instances", `{"instance_id": 5}`, "instance_id"},
		{"trailing object", "/instances", good + good, "body"},
		{"trailing object spaced", "/instances", good + "\n" + good, "body"},
		{"trailing brace", "/instances", good + "}", "body"},
		{"trailing bracket", "/instances", good + "]", "body"},
		{"trailing word", "/instances", good + " garbage", "body"},
		{"trailing comma", "/instances", good + ",", "body"},
		{"mutate trailing", "/instances/i-1/drain", inc + inc, "body"},
		{"mutate trailing brace", "/instances/i-1/drain", inc + "}", "body"},
		{"mutate truncated", "/instances/i-1/drain", `{"incarnation": `, "body"},
		{"mutate empty", "/instances/i-1/drain", ``, "body"},
		{"mutate array", "/instances/i-1/drain", `[1]`, "body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, e.call(t, http.MethodPost, svcPath("shop", "web")+tc.path, "", tc.body), http.StatusBadRequest, wire.CodeInvalid, tc.field)
		})
	}
	for _, tc := range []struct{ name, body string }{
		{"array truncated", `[{"namespace": "shop"`},
		{"array trailing", `[{"namespace": "shop", "name": "x", "ports": [{"name": "http", "number": 80}]}] []`},
		{"array of numbers", `[1, 2]`},
		{"tab indented yaml", "namespace: shop\n\tname: x\n"},
	} {
		t.Run("apply "+tc.name, func(t *testing.T) {
			wantError(t, e.call(t, http.MethodPost, "/v1/apply", "", tc.body), http.StatusBadRequest, wire.CodeInvalid)
		})
	}
	e.wantUnchanged(t, before, "malformed JSON")
}

func equalJSON(a, b any) bool { return mustJSON(a) == mustJSON(b) }

// TestRefusedMutationKeepsRevision: a drain, deregistration or report that
// is refused (wrong incarnation, deregistered instance, undeclared
// dependency) should leave the store's revision alone, as a refused
// apply, registration or renewal does.
func TestRefusedMutationKeepsRevision(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	reg := e.register(t, "", "shop", "web", "i-1", "10.0.0.1")
	before := e.snapshot(t)
	for _, verb := range []string{"drain", "deregister"} {
		wantError(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", verb), "", incBody(reg.Incarnation+1)),
			http.StatusConflict, wire.CodeFenced, "incarnation")
	}
	wantError(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", "report"), "",
		mustJSON(map[string]any{"incarnation": reg.Incarnation, "ready": true, "dependencies": map[string]string{"cache": "ok"}})),
		http.StatusBadRequest, wire.CodeInvalid, "dependencies")
	e.wantUnchanged(t, before, "refused mutations")
}

// TestRetiredRegistrationIDKeepsRevision: a late retry of a replaced
// registration id is refused with 409 before anything is written (found
// by FuzzWriteBodies).
func TestRetiredRegistrationIDKeepsRevision(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", webYAML)
	path := svcPath("shop", "web") + "/instances"
	body := func(id string) string {
		return `{"instance_id": "i-1", "addresses": ["10.0.0.1"], "ports": {"http": 8080}, "registration_id": "` + id + `"}`
	}
	wantStatus(t, e.call(t, http.MethodPost, path, "", body("boot-a")), http.StatusCreated)
	wantStatus(t, e.call(t, http.MethodPost, path, "", body("boot-b")), http.StatusCreated)
	before := e.snapshot(t)
	wantError(t, e.call(t, http.MethodPost, path, "", body("boot-a")), http.StatusConflict, wire.CodeFenced, "boot-a")
	e.wantUnchanged(t, before, "a late retry of a replaced registration id")
}
