package wire

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func ptr[T any](v T) *T { return &v }

// validService is a complete definition that passes Validate; each row of
// TestServiceValidateNamesField breaks one rule of it.
func validService() Service {
	return Service{
		Namespace: "prod", Name: "web",
		Ports:      []Port{{Name: "http", Number: 8080, Protocol: "tcp"}, {Name: "dns", Number: 53, Protocol: "udp"}},
		Capability: Capability{Readiness: "probe", Dependencies: []Dependency{{Name: "db"}, {Name: "cache", Shared: true}}},
		Check: &Check{Type: "http", Port: "http", Path: "/healthz",
			Interval: Duration(2 * time.Second), Timeout: Duration(time.Second)},
	}.WithDefaults()
}

func TestServiceValidateAcceptsValid(t *testing.T) {
	for name, s := range map[string]Service{
		"full":              validService(),
		"minimal":           Service{Namespace: "a", Name: "b", Ports: []Port{{Name: "p", Number: 1}}}.WithDefaults(),
		"grpc check":        Service{Namespace: "a", Name: "b", Ports: []Port{{Name: "p", Number: 65535}}, Check: &Check{Type: "grpc"}}.WithDefaults(),
		"63-char label":     Service{Namespace: strings.Repeat("a", 63), Name: "b-1", Ports: []Port{{Name: "p", Number: 1}}}.WithDefaults(),
		"zero fraction":     Service{Namespace: "a", Name: "b", Ports: []Port{{Name: "p", Number: 1}}, Policy: Policy{MinHealthyFraction: ptr(0.0), MaxEjectionPercent: ptr(0)}}.WithDefaults(),
		"self, no check":    Service{Namespace: "a", Name: "b", Ports: []Port{{Name: "p", Number: 1}}, Capability: Capability{Readiness: "self"}}.WithDefaults(),
		"full shrink cap":   Service{Namespace: "a", Name: "b", Ports: []Port{{Name: "p", Number: 1}}, Policy: Policy{ShrinkCap: 1}}.WithDefaults(),
		"longest lease":     Service{Namespace: "a", Name: "b", Ports: []Port{{Name: "p", Number: 1}}, Policy: Policy{LeaseTTL: Duration(MaxLeaseTTL)}}.WithDefaults(),
		"shortest lease":    Service{Namespace: "a", Name: "b", Ports: []Port{{Name: "p", Number: 1}}, Policy: Policy{LeaseTTL: Duration(MinLeaseTTL)}}.WithDefaults(),
		"check on 2nd port": Service{Namespace: "a", Name: "b", Ports: []Port{{Name: "p", Number: 1}, {Name: "q", Number: 2}}, Check: &Check{Type: "tcp", Port: "q"}}.WithDefaults(),
	} {
		if err := s.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestServiceValidateNamesField has one row per rule of Service.Validate:
// the error is a *FieldError naming the field, and wraps ErrInvalid.
func TestServiceValidateNamesField(t *testing.T) {
	tests := []struct {
		name  string
		edit  func(s *Service)
		field string
	}{
		{"namespace required", func(s *Service) { s.Namespace = "" }, "namespace"},
		{"namespace too long", func(s *Service) { s.Namespace = strings.Repeat("a", 64) }, "namespace"},
		{"namespace upper case", func(s *Service) { s.Namespace = "Prod" }, "namespace"},
		{"namespace underscore", func(s *Service) { s.Namespace = "my_ns" }, "namespace"},
		{"namespace leading dash", func(s *Service) { s.Namespace = "-prod" }, "namespace"},
		{"namespace trailing dash", func(s *Service) { s.Namespace = "prod-" }, "namespace"},
		{"name is a label", func(s *Service) { s.Name = "web.1" }, "name"},
		{"ports required", func(s *Service) { s.Ports = nil }, "ports"},
		{"port name is a label", func(s *Service) { s.Ports[1].Name = "DNS" }, "ports[1].name"},
		{"port name unique", func(s *Service) { s.Ports[1].Name = "http" }, "ports[1].name"},
		{"port number too small", func(s *Service) { s.Ports[0].Number = 0 }, "ports[0].number"},
		{"port number too large", func(s *Service) { s.Ports[0].Number = 65536 }, "ports[0].number"},
		{"port protocol", func(s *Service) { s.Ports[0].Protocol = "sctp" }, "ports[0].protocol"},
		{"readiness", func(s *Service) { s.Capability.Readiness = "maybe" }, "capability.readiness"},
		{"dependency name is a label", func(s *Service) { s.Capability.Dependencies[1].Name = "" }, "capability.dependencies[1].name"},
		{"dependency name unique", func(s *Service) { s.Capability.Dependencies[1].Name = "db" }, "capability.dependencies[1].name"},
		{"probe needs a check", func(s *Service) { s.Check = nil }, "check"},
		{"check type", func(s *Service) { s.Check.Type = "icmp" }, "check.type"},
		{"check port declared", func(s *Service) { s.Check.Port = "metrics" }, "check.port"},
		{"http path starts with /", func(s *Service) { s.Check.Path = "healthz" }, "check.path"},
		{"http path required", func(s *Service) { s.Check.Path = "" }, "check.path"},
		{"only http has a path", func(s *Service) { s.Check.Type = "tcp" }, "check.path"},
		{"check interval minimum", func(s *Service) { s.Check.Interval = Duration(99 * time.Millisecond) }, "check.interval"},
		{"check timeout positive", func(s *Service) { s.Check.Timeout = 0 }, "check.timeout"},
		{"check timeout below interval", func(s *Service) { s.Check.Timeout = s.Check.Interval }, "check.timeout"},
		{"dns ttl whole seconds", func(s *Service) { s.Policy.DNSTTL = Duration(1500 * time.Millisecond) }, "policy.dns_ttl"},
		{"dns ttl not negative", func(s *Service) { s.Policy.DNSTTL = Duration(-time.Second) }, "policy.dns_ttl"},
		{"dns ttl at most 24h", func(s *Service) { s.Policy.DNSTTL = Duration(25 * time.Hour) }, "policy.dns_ttl"},
		{"a record limit low", func(s *Service) { s.Policy.ARecordLimit = 0 }, "policy.a_record_limit"},
		{"a record limit high", func(s *Service) { s.Policy.ARecordLimit = 65 }, "policy.a_record_limit"},
		{"min healthy fraction high", func(s *Service) { s.Policy.MinHealthyFraction = ptr(1.5) }, "policy.min_healthy_fraction"},
		{"min healthy fraction negative", func(s *Service) { s.Policy.MinHealthyFraction = ptr(-0.1) }, "policy.min_healthy_fraction"},
		{"min healthy fraction NaN", func(s *Service) { s.Policy.MinHealthyFraction = ptr(math.NaN()) }, "policy.min_healthy_fraction"},
		{"withdraw after low", func(s *Service) { s.Policy.WithdrawAfter = -1 }, "policy.withdraw_after"},
		{"withdraw after high", func(s *Service) { s.Policy.WithdrawAfter = 101; s.Policy.AdmitAfter = 200 }, "policy.withdraw_after"},
		{"admit after exceeds withdraw after", func(s *Service) { s.Policy.AdmitAfter = s.Policy.WithdrawAfter }, "policy.admit_after"},
		{"admit after at most 1000", func(s *Service) { s.Policy.AdmitAfter = 1001 }, "policy.admit_after"},
		{"admit min not negative", func(s *Service) { s.Policy.AdmitMin = ptr(Duration(-time.Second)) }, "policy.admit_min"},
		{"slow start not negative", func(s *Service) { s.Policy.SlowStart = ptr(Duration(-time.Second)) }, "policy.slow_start"},
		{"drain window not negative", func(s *Service) { s.Policy.DrainWindow = Duration(-time.Second) }, "policy.drain_window"},
		{"lease ttl minimum", func(s *Service) { s.Policy.LeaseTTL = Duration(MinLeaseTTL - 1) }, "policy.lease_ttl"},
		{"lease ttl maximum", func(s *Service) { s.Policy.LeaseTTL = Duration(MaxLeaseTTL + 1) }, "policy.lease_ttl"},
		{"shrink cap positive", func(s *Service) { s.Policy.ShrinkCap = -0.5 }, "policy.shrink_cap"},
		{"shrink cap at most 1", func(s *Service) { s.Policy.ShrinkCap = 1.01 }, "policy.shrink_cap"},
		{"shrink cap NaN", func(s *Service) { s.Policy.ShrinkCap = math.NaN() }, "policy.shrink_cap"},
		{"max ejection percent negative", func(s *Service) { s.Policy.MaxEjectionPercent = ptr(-1) }, "policy.max_ejection_percent"},
		{"max ejection percent high", func(s *Service) { s.Policy.MaxEjectionPercent = ptr(101) }, "policy.max_ejection_percent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := validService()
			tt.edit(&s)
			checkFieldError(t, s.Validate(), tt.field)
		})
	}
}

func checkFieldError(t *testing.T, err error, field string) {
	t.Helper()
	var fe *FieldError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v, want a *FieldError on %q", err, field)
	}
	if fe.Field != field {
		t.Errorf("error names field %q (%v), want %q", fe.Field, err, field)
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("error %v does not wrap ErrInvalid", err)
	}
	if !strings.HasPrefix(err.Error(), field+": ") {
		t.Errorf("message %q does not start with the field", err)
	}
}

// registeredService is the definition the registration and report tests
// register against: two ports, and two dependencies, one shared.
func registeredService() Service {
	return Service{
		Namespace: "prod", Name: "web",
		Ports: []Port{{Name: "http", Number: 8080}, {Name: "admin", Number: 9090}},
		Capability: Capability{Readiness: "self", Dependencies: []Dependency{
			{Name: "db"}, {Name: "cache", Shared: true},
		}},
	}.WithDefaults()
}

// TestRegistrationNormalizeNamesField has one row per rule of
// Registration.Normalize.
func TestRegistrationNormalizeNamesField(t *testing.T) {
	svc := registeredService()
	valid := func() Registration {
		return Registration{Namespace: "prod", Service: "web", ID: "web-1",
			Addresses: []string{"10.0.0.1", "2001:db8::1"}, Ports: map[string]int{"http": 8080, "admin": 9090},
			Region: "eu", Zone: "eu-1"}
	}
	r := valid()
	if err := r.Normalize(svc); err != nil {
		t.Fatalf("valid registration: %v", err)
	}
	if r.Weight != DefaultWeight || r.LeaseTTL != svc.Policy.LeaseTTL || r.Lifecycle != "ready" {
		t.Errorf("defaults: weight %d lease %s lifecycle %q, want %d %s ready", r.Weight, r.LeaseTTL, r.Lifecycle, DefaultWeight, svc.Policy.LeaseTTL)
	}
	tests := []struct {
		name  string
		edit  func(r *Registration)
		field string
	}{
		{"instance id is a label", func(r *Registration) { r.ID = "Web_1" }, "instance_id"},
		{"addresses required", func(r *Registration) { r.Addresses = nil }, "addresses"},
		{"at most 16 addresses", func(r *Registration) {
			r.Addresses = nil
			for i := range 17 {
				r.Addresses = append(r.Addresses, fmt.Sprintf("10.0.0.%d", i+1))
			}
		}, "addresses"},
		{"address is an IP", func(r *Registration) { r.Addresses[1] = "db.internal" }, "addresses[1]"},
		{"address without zone", func(r *Registration) { r.Addresses[1] = "fe80::1%eth0" }, "addresses[1]"},
		{"address canonical", func(r *Registration) { r.Addresses[1] = "2001:DB8::1" }, "addresses[1]"},
		{"address not v4-mapped", func(r *Registration) { r.Addresses[0] = "::ffff:10.0.0.1" }, "addresses[0]"},
		{"address listed once", func(r *Registration) { r.Addresses[1] = "10.0.0.1" }, "addresses[1]"},
		{"ports required", func(r *Registration) { r.Ports = nil }, "ports"},
		{"port of the service", func(r *Registration) { r.Ports["grpc"] = 1 }, "ports"},
		{"port number range", func(r *Registration) { r.Ports["http"] = 70000 }, "ports"},
		{"region is a label", func(r *Registration) { r.Region = "EU" }, "region"},
		{"zone is a label", func(r *Registration) { r.Zone = "eu 1" }, "zone"},
		{"weight range", func(r *Registration) { r.Weight = 65536 }, "weight"},
		{"weight positive", func(r *Registration) { r.Weight = -1 }, "weight"},
		{"lease ttl range", func(r *Registration) { r.LeaseTTL = Duration(time.Millisecond) }, "lease_ttl"},
		{"lifecycle starting or ready", func(r *Registration) { r.Lifecycle = "draining" }, "lifecycle"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := valid()
			tt.edit(&r)
			checkFieldError(t, r.Normalize(svc), tt.field)
		})
	}
}

func TestReportValidateNamesField(t *testing.T) {
	svc := registeredService()
	tests := []struct {
		name string
		deps map[string]DependencyState
	}{
		{"undeclared dependency", map[string]DependencyState{"queue": DepOK}},
		{"unknown state", map[string]DependencyState{"db": "down"}},
	}
	for _, tt := range tests {
		checkFieldError(t, Report{Dependencies: tt.deps}.Validate(svc), "dependencies")
	}
	if err := (Report{Dependencies: map[string]DependencyState{"db": DepOK, "cache": DepDegraded}}).Validate(svc); err != nil {
		t.Errorf("declared dependencies refused: %v", err)
	}
}

func TestCheckLabel(t *testing.T) {
	for s, ok := range map[string]bool{
		"a": true, "a-b": true, "0": true, "9lives": true, strings.Repeat("z", 63): true,
		"": false, "-a": false, "a-": false, "A": false, "a.b": false, "ä": false, strings.Repeat("z", 64): false,
	} {
		if err := CheckLabel("f", s); (err == nil) != ok {
			t.Errorf("CheckLabel(%q) = %v, want ok=%t", s, err, ok)
		}
	}
}
