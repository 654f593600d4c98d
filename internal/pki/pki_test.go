package pki

import (
	"crypto/tls"
	"crypto/x509"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/certs"
)

func TestCertificates(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("cairn test CA", 24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := NewCert(ca, Request{Server: true, CommonName: "n1", DNSNames: []string{"n1.example"}, Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	leaf := leafOf(t, srv)
	for _, n := range []string{certs.ServerName, "localhost", "n1.example"} {
		if !slices.Contains(leaf.DNSNames, n) {
			t.Errorf("server certificate lacks %s: %v", n, leaf.DNSNames)
		}
	}
	if len(leaf.IPAddresses) != 2 || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		t.Errorf("server certificate: IPs %v, usages %v", leaf.IPAddresses, leaf.ExtKeyUsage)
	}
	cli, err := NewCert(ca, Request{CommonName: "ops", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	if l := leafOf(t, cli); !slices.Equal(l.ExtKeyUsage, []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}) || len(l.DNSNames) != 0 {
		t.Errorf("client certificate: usages %v, names %v", l.ExtKeyUsage, l.DNSNames)
	}
	for _, tc := range []struct {
		req  Request
		want string
	}{
		{Request{DNSNames: []string{certs.ServerName}, Validity: time.Hour}, "may not carry it"},
		{Request{Server: true, Validity: 48 * time.Hour}, "the CA expires"},
		{Request{Server: true}, "validity: must be positive"},
	} {
		if _, err := NewCert(ca, tc.req, now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.req, err, tc.want)
		}
	}
	if _, err := NewCert(srv, Request{Validity: time.Minute}, now); err == nil || !strings.Contains(err.Error(), "is not a CA") {
		t.Errorf("signing with a leaf: %v", err)
	}
}

func leafOf(t *testing.T, p PEM) *x509.Certificate {
	t.Helper()
	pair, err := tls.X509KeyPair(p.Cert, p.Key)
	if err != nil {
		t.Fatal(err)
	}
	return pair.Leaf
}
