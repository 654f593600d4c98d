package probe

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestKind(t *testing.T) {
	for _, k := range []Kind{TCP, HTTP, GRPC} {
		got, err := ParseKind(strings.ToUpper(k.String()))
		if err != nil || got != k {
			t.Errorf("ParseKind(%q) = %v, %v; want %v", strings.ToUpper(k.String()), got, err, k)
		}
		b, err := k.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back Kind
		if err := back.UnmarshalText(b); err != nil || back != k {
			t.Errorf("text round trip of %v gave %v, %v", k, back, err)
		}
	}
	if _, err := ParseKind("dns"); err == nil {
		t.Error(`ParseKind("dns") succeeded`)
	}
	if s := Kind(0).String(); s != "Kind(0)" {
		t.Errorf("Kind(0).String() = %q", s)
	}
	if _, err := Kind(0).MarshalText(); err == nil {
		t.Error("the zero Kind marshalled")
	}
}

func TestTargetValidate(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.0.1:8080")
	ok := Target{ID: "ns/svc/i#1", Kind: HTTP, Addr: addr, Path: "/healthz?full=1", Interval: 5 * time.Second, Timeout: time.Second}
	if err := ok.Validate(); err != nil {
		t.Fatalf("valid target: %v", err)
	}
	grpcOK := Target{ID: "g", Kind: GRPC, Addr: netip.MustParseAddrPort("[::1]:9000"), Service: "pkg.Svc", Interval: time.Second, Timeout: time.Second}
	if err := grpcOK.Validate(); err != nil {
		t.Fatalf("valid gRPC target: %v", err)
	}
	for _, tc := range []struct {
		name  string
		edit  func(*Target)
		field string
	}{
		{"no ID", func(t *Target) { t.ID = "" }, "ID"},
		{"no kind", func(t *Target) { t.Kind = 0 }, "Kind"},
		{"unknown kind", func(t *Target) { t.Kind = 9 }, "Kind"},
		{"no address", func(t *Target) { t.Addr = netip.AddrPort{} }, "Addr"},
		{"unspecified address", func(t *Target) { t.Addr = netip.MustParseAddrPort("0.0.0.0:80") }, "Addr"},
		{"port 0", func(t *Target) { t.Addr = netip.MustParseAddrPort("127.0.0.1:0") }, "Addr"},
		{"interval too short", func(t *Target) { t.Interval = time.Millisecond; t.Timeout = time.Millisecond }, "Interval"},
		{"no timeout", func(t *Target) { t.Timeout = 0 }, "Timeout"},
		{"timeout over interval", func(t *Target) { t.Timeout = 6 * time.Second }, "Timeout"},
		{"relative path", func(t *Target) { t.Path = "healthz" }, "Path"},
		{"userinfo in path", func(t *Target) { t.Path = "//u:p@host/x" }, "Path"},
		{"absolute URL", func(t *Target) { t.Path = "http://u:p@host/x" }, "Path"},
		{"fragment", func(t *Target) { t.Path = "/x#y" }, "Path"},
		{"space", func(t *Target) { t.Path = "/x y" }, "Path"},
		{"newline", func(t *Target) { t.Path = "/x\r\nAuthorization: y" }, "Path"},
		{"path on tcp", func(t *Target) { t.Kind = TCP }, "Path"},
		{"service on http", func(t *Target) { t.Service = "x" }, "Service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg := ok
			tc.edit(&tg)
			err := tg.Validate()
			var te *TargetError
			if !errors.As(err, &te) || te.Field != tc.field || !errors.Is(err, ErrInvalidTarget) {
				t.Fatalf("Validate() = %v; want a TargetError on %s", err, tc.field)
			}
			if !strings.Contains(err.Error(), tc.field) || !strings.HasPrefix(err.Error(), "probe: ") {
				t.Errorf("error %q does not name %s", err, tc.field)
			}
		})
	}
}
