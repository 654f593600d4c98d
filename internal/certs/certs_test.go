package certs_test

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/pki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// pair writes a certificate signed by ca into dir as name.pem and
// name-key.pem and returns their paths.
func pair(t *testing.T, dir, name string, ca pki.PEM, req pki.Request, now time.Time) (cert, key string) {
	t.Helper()
	if req.Validity == 0 {
		req.Validity = time.Hour
	}
	p, err := pki.NewCert(ca, req, now)
	if err != nil {
		t.Fatal(err)
	}
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	write(t, cert, p.Cert)
	write(t, key, p.Key)
	return cert, key
}

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

func newCA(t *testing.T, dir, name string) (pki.PEM, string) {
	t.Helper()
	ca, err := pki.NewCA(name, 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name+".pem")
	write(t, path, ca.Cert)
	return ca, path
}

func TestLoadRefusesWhatCannotServe(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, caFile := newCA(t, dir, "ca")
	other, _ := newCA(t, dir, "other")
	cert, key := pair(t, dir, "srv", ca, pki.Request{Server: true, CommonName: "n1"}, now)
	_, key2 := pair(t, dir, "srv2", ca, pki.Request{Server: true, CommonName: "n2"}, now)
	foreign, foreignKey := pair(t, dir, "foreign", other, pki.Request{Server: true}, now)
	old, oldKey := pair(t, dir, "old", ca, pki.Request{Server: true, Validity: time.Minute}, now.Add(-time.Hour))
	notCA := filepath.Join(dir, "notca.pem")
	b, _ := os.ReadFile(cert)
	write(t, notCA, b)
	flags := certs.Config{CertFlag: "--tls-cert", KeyFlag: "--tls-key", CAFlag: "--tls-ca"}
	for _, tc := range []struct {
		name          string
		cert, key, ca string
		want          []string
	}{
		{"mismatched pair", cert, key2, caFile, []string{"--tls-cert " + cert, "--tls-key " + key2, "not a certificate and its key"}},
		{"expired", old, oldKey, caFile, []string{"--tls-cert " + old, "expired at"}},
		{"foreign CA", foreign, foreignKey, caFile, []string{"--tls-cert " + foreign, "not signed by a CA in --tls-ca"}},
		{"CA bundle holds a leaf", cert, key, notCA, []string{"--tls-ca " + notCA, "is not a CA"}},
		{"missing key", cert, "", caFile, []string{"--tls-cert and --tls-key: give both or neither"}},
		{"no CA", cert, key, "", []string{"--tls-ca: required"}},
		{"unreadable", filepath.Join(dir, "nope.pem"), key, caFile, []string{"--tls-cert: open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := flags
			cfg.CertFile, cfg.KeyFile, cfg.CAFile = tc.cert, tc.key, tc.ca
			_, err := certs.Load(cfg)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
	cfg := flags
	cfg.CertFile, cfg.KeyFile, cfg.CAFile = cert, key, caFile
	if _, err := certs.Load(cfg); err != nil {
		t.Fatal(err)
	}
}

// handshake dials ln with cc and completes the handshake, returning the
// connection (closed with the test) or the handshake's error.
func handshake(t *testing.T, addr string, cc *tls.Config) (*tls.Conn, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := (&tls.Dialer{Config: cc}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	tc := c.(*tls.Conn)
	// TLS 1.3 reports a client certificate refused only on the first
	// read: read the server's one byte.
	tc.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := tc.Read(make([]byte, 1)); err != nil {
		tc.Close()
		return nil, err
	}
	t.Cleanup(func() { tc.Close() })
	return tc, nil
}

// serve accepts on a loopback TLS listener until the test ends, writing
// one byte on each connection once its handshake passes and check.
func serve(t *testing.T, sc *tls.Config, check func(*tls.ConnectionState) error) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", sc)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() { ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := c.(*tls.Conn)
			tc.SetDeadline(time.Now().Add(5 * time.Second))
			if tc.Handshake() == nil {
				cs := tc.ConnectionState()
				if check == nil || check(&cs) == nil {
					tc.Write([]byte{1})
				}
			}
			// Held open until the test ends, as long-lived streams are.
			t.Cleanup(func() { tc.Close() })
		}
	}()
	return ln.Addr().String()
}

func TestHandshakeRoles(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	ca, caFile := newCA(t, dir, "ca")
	other, _ := newCA(t, dir, "other")
	load := func(cert, key string) *certs.Files {
		f, err := certs.Load(certs.Config{CertFile: cert, KeyFile: key, CAFile: caFile})
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	srv := load(pair(t, dir, "srv", ca, pki.Request{Server: true, CommonName: "n1"}, now))
	peer := load(pair(t, dir, "peer", ca, pki.Request{Server: true, CommonName: "n2"}, now))
	cli := load(pair(t, dir, "cli", ca, pki.Request{CommonName: "ops"}, now))
	anon := load("", "")
	// A foreign node trusts our CA (it learnt it) but holds a certificate
	// of its own CA.
	fc, fk := pair(t, dir, "foreign", other, pki.Request{Server: true}, now)
	foreignPair, err := tls.LoadX509KeyPair(fc, fk)
	if err != nil {
		t.Fatal(err)
	}
	foreign := anon.ClientConfig(certs.ServerName)
	foreign.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &foreignPair, nil }

	raft := serve(t, srv.ServerConfig(certs.RequireServer), certs.PeerIsServer)
	api := serve(t, srv.ServerConfig(certs.VerifyIfGiven), nil)
	for _, tc := range []struct {
		name string
		addr string
		cc   *tls.Config
		ok   bool
	}{
		{"server to raft", raft, peer.ClientConfig(certs.ServerName), true},
		{"client cert to raft", raft, cli.ClientConfig(certs.ServerName), false},
		{"no cert to raft", raft, anon.ClientConfig(certs.ServerName), false},
		{"foreign CA to raft", raft, foreign, false},
		{"no cert to API", api, anon.ClientConfig("127.0.0.1"), true},
		{"client cert to API", api, cli.ClientConfig("localhost"), true},
		{"foreign CA to API", api, foreign, false},
		{"wrong name", api, anon.ClientConfig("db.example"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := handshake(t, tc.addr, tc.cc)
			if (err == nil) != tc.ok {
				t.Fatalf("handshake: %v, want ok=%v", err, tc.ok)
			}
		})
	}
	// A client that does not trust the CA refuses the server.
	_, otherFile := newCA(t, t.TempDir(), "other")
	stranger, err := certs.Load(certs.Config{CAFile: otherFile})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := handshake(t, api, stranger.ClientConfig("localhost")); err == nil || !strings.Contains(err.Error(), "server certificate refused") {
		t.Fatalf("a client of another CA: %v", err)
	}
	if err := certs.PeerIsServer(nil); err == nil {
		t.Fatal("plaintext counted as a server")
	}
}

// TestReload: new files reach new connections; an open connection keeps
// going; a bad file keeps the last valid set in use and names the file;
// a CA bundle of old and new roots accepts leaves of both (field notes
// T3, T5).
func TestReload(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	caA, caFile := newCA(t, dir, "ca")
	caB, _ := newCA(t, dir, "caB")
	cert, key := pair(t, dir, "srv", caA, pki.Request{Server: true, CommonName: "first"}, now)
	reg := prometheus.NewPedanticRegistry()
	f, err := certs.Load(certs.Config{CertFile: cert, KeyFile: key, CAFile: caFile, Registerer: reg, Poll: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	client, err := certs.Load(certs.Config{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	addr := serve(t, f.ServerConfig(certs.VerifyIfGiven), nil)
	served := func() string {
		t.Helper()
		c, err := handshake(t, addr, client.ClientConfig("localhost"))
		if err != nil {
			t.Fatal(err)
		}
		return c.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	open, err := handshake(t, addr, client.ClientConfig("localhost"))
	if err != nil {
		t.Fatal(err)
	}
	if got := served(); got != "first" {
		t.Fatalf("served %q", got)
	}

	// A half-written rotation: the new certificate beside the old key.
	next, err := pki.NewCert(caA, pki.Request{Server: true, CommonName: "second", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	write(t, cert, next.Cert)
	if err := f.Reload(); err == nil || !strings.Contains(err.Error(), cert) {
		t.Fatalf("mismatched reload: %v", err)
	}
	if got := served(); got != "first" {
		t.Fatalf("after a failed reload served %q", got)
	}
	if v := metric(t, reg, "cairn_tls_reload_failing", ""); v != 1 {
		t.Fatalf("reload_failing = %v", v)
	}
	write(t, key, next.Key)
	// Run notices the change by itself.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- f.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for served() != "second" {
		if time.Now().After(deadline) {
			t.Fatal("the changed files were not picked up")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	// The connection opened before the rotation still works.
	open.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
	if _, err := open.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the open connection: %v", err)
	}

	// CA rotation: trust A and B, then a leaf of B is served and verified.
	write(t, caFile, append(append([]byte{}, caA.Cert...), caB.Cert...))
	if err := client.Reload(); err != nil {
		t.Fatal(err)
	}
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	nb, err := pki.NewCert(caB, pki.Request{Server: true, CommonName: "third", Validity: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	write(t, cert, nb.Cert)
	write(t, key, nb.Key)
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != "third" {
		t.Fatalf("served %q", got)
	}
	leaf, err := tls.X509KeyPair(nb.Cert, nb.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !f.NotAfter().Equal(leaf.Leaf.NotAfter) || metric(t, reg, "cairn_tls_not_after_timestamp_seconds", "cert") != float64(leaf.Leaf.NotAfter.Unix()) {
		t.Fatalf("NotAfter %s, want %s", f.NotAfter(), leaf.Leaf.NotAfter)
	}
	if v := metric(t, reg, "cairn_tls_reload_failing", ""); v != 0 {
		t.Fatalf("reload_failing = %v", v)
	}
}

// metric reads a gauge's series whose labels include label (or the only
// series, for "").
func metric(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if label == "" || l.GetValue() == label {
						return m.GetGauge().GetValue()
					}
				}
				if label == "" {
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestState: what a status page shows of the set in use. The bounds of
// the certificate and the earliest CA; rotate_soon past two thirds of
// the certificate's lifetime (by the Config clock); reload_failing from a
// failed reload until one succeeds.
func TestState(t *testing.T) {
	dir := t.TempDir()
	start := time.Now().Truncate(time.Second)
	ca, caFile := newCA(t, dir, "ca")
	cert, key := pair(t, dir, "srv", ca, pki.Request{Server: true, CommonName: "s", Validity: 3 * time.Hour}, start)
	now := start
	f, err := certs.Load(certs.Config{CertFile: cert, KeyFile: key, CAFile: caFile, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	st := f.State()
	if !st.CertNotAfter.Equal(f.NotAfter()) || !st.CertNotBefore.Before(st.CertNotAfter) || st.CertNotAfter.Sub(st.CertNotBefore) < 3*time.Hour {
		t.Errorf("certificate bounds %v – %v; want a 3 h lifetime ending at %v", st.CertNotBefore, st.CertNotAfter, f.NotAfter())
	}
	if st.CANotAfter.IsZero() || st.RotateSoon || st.ReloadFailing {
		t.Errorf("a fresh set: %+v; want the CA's expiry, not rotate_soon, not reload_failing", st)
	}
	now = st.CertNotBefore.Add(st.CertNotAfter.Sub(st.CertNotBefore)*2/3 + time.Second)
	if !f.State().RotateSoon {
		t.Errorf("past two thirds of the lifetime: %+v; want rotate_soon", f.State())
	}
	write(t, cert, []byte("not a certificate"))
	if err := f.Reload(); err == nil {
		t.Fatal("a reload of a broken file succeeded")
	}
	if st := f.State(); !st.ReloadFailing || !st.CertNotAfter.Equal(f.NotAfter()) {
		t.Errorf("after a failed reload: %+v; want reload_failing, the previous certificate still in use", st)
	}
	_, _ = pair(t, dir, "srv", ca, pki.Request{Server: true, CommonName: "s2", Validity: 3 * time.Hour}, start)
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if f.State().ReloadFailing {
		t.Error("reload_failing after a reload that succeeded")
	}

	client, err := certs.Load(certs.Config{CAFile: caFile})
	if err != nil {
		t.Fatal(err)
	}
	if st := client.State(); !st.CertNotAfter.IsZero() || st.CANotAfter.IsZero() || st.RotateSoon {
		t.Errorf("a CA-only set: %+v; want no certificate bounds, the CA's expiry", st)
	}
}
