package wire

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseServices(t *testing.T) {
	svcs, err := ParseServices(strings.NewReader(readFile(t, "testdata/service.yaml") + "---\n" +
		`{"namespace": "prod", "name": "api", "ports": [{"name": "grpc", "number": 9000}]}` + "\n---\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(svcs) != 2 {
		t.Fatalf("%d services, want 2 (the trailing empty document is skipped)", len(svcs))
	}
	web := svcs[0]
	want := Service{
		Namespace: "prod", Name: "web",
		Ports:      []Port{{Name: "http", Number: 8080, Protocol: "tcp"}, {Name: "dns", Number: 53, Protocol: "udp"}},
		Capability: Capability{Readiness: "probe", Dependencies: []Dependency{{Name: "db"}, {Name: "cache", Shared: true}}},
		Check: &Check{Type: "http", Port: "http", Path: "/healthz",
			Interval: Duration(2 * time.Second), Timeout: Duration(500 * time.Millisecond)},
		Policy: Policy{DNSTTL: Duration(10 * time.Second), ARecordLimit: 4, MinHealthyFraction: ptr(0.25),
			WithdrawAfter: 2, AdmitAfter: 6, AdmitMin: ptr(Duration(15 * time.Second)), SlowStart: ptr(Duration(time.Minute)),
			DrainWindow: Duration(45 * time.Second), LeaseTTL: Duration(20 * time.Second), ShrinkCap: 0.5,
			MaxEjectionPercent: ptr(20)},
	}
	if !reflect.DeepEqual(web, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", web, want)
	}
	if err := web.WithDefaults().Validate(); err != nil {
		t.Errorf("the example is invalid: %v", err)
	}
	if api := svcs[1]; api.Name != "api" || api.Policy.LeaseTTL != 0 {
		t.Errorf("JSON document parsed as %+v, want api without defaults applied", api)
	}
}

func TestParseServicesRefuses(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"unknown key with its line", "namespace: prod\nname: web\nsurprise: 1\n", "line 3"},
		{"bare number duration", "namespace: prod\npolicy: {lease_ttl: 30}\n", "duration"},
		{"bad duration", "namespace: prod\npolicy: {lease_ttl: soon}\n", "duration"},
		{"nothing", "", "no service definition"},
		{"only separators", "---\n---\n", "no service definition"},
		{"second document broken", "namespace: a\n---\nname: [\n", "document 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			svcs, err := ParseServices(strings.NewReader(tt.in))
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, %v; want an ErrInvalid mentioning %q", svcs, err, tt.want)
			}
		})
	}
}

// TestNaNPolicyIsInvalid is the regression test for Validate accepting
// NaN (YAML's .nan) as a fraction: every comparison with NaN is false,
// so it passed the range checks, and the definition then failed to encode
// as a log entry instead of being refused with the field named.
func TestNaNPolicyIsInvalid(t *testing.T) {
	for field, doc := range map[string]string{
		"policy.min_healthy_fraction": "policy: {min_healthy_fraction: .nan}",
		"policy.shrink_cap":           "policy: {shrink_cap: .nan}",
	} {
		svcs, err := ParseServices(strings.NewReader("namespace: prod\nname: web\nports: [{name: http, number: 80}]\n" + doc + "\n"))
		if err != nil {
			t.Fatal(err)
		}
		checkFieldError(t, svcs[0].WithDefaults().Validate(), field)
	}
}

func TestDurationJSON(t *testing.T) {
	var d Duration
	if err := d.UnmarshalJSON([]byte(`"1m30s"`)); err != nil || d.D() != 90*time.Second {
		t.Errorf("1m30s: %v %v", d, err)
	}
	if err := d.UnmarshalJSON([]byte(`30`)); err == nil {
		t.Errorf("a bare number was accepted as %v", d)
	}
	if b, _ := Duration(1500 * time.Millisecond).MarshalJSON(); string(b) != `"1.5s"` {
		t.Errorf("marshalled as %s", b)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
