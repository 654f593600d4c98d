// Package certs holds the certificates a process presents and trusts:
// its certificate and key, loaded as a validated pair, and the CA bundle
// it verifies peers with. It re-reads them when told (SIGHUP) and when
// their files change, keeps the last valid set when a reload fails, and
// hands out tls.Configs that read the current set at every handshake, so
// that a rotation reaches new connections without a restart and without
// touching connections already open.
//
// Roles: a server certificate names ServerName among its DNS names and
// may be used for both server and client authentication; it is what
// servers present to each other (raft, join, forwarded writes, probe
// reports). Any other certificate from the CA is a client's.
//
// A leaf: every listener and client reads its certificates from it, so
// it knows none of them. Files is safe for concurrent use: the current
// set is swapped whole (an atomic pointer), and each handshake reads the
// set of its moment; Run is its one goroutine, watching the files.
package certs

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ServerName is the DNS name every server certificate carries and that
// servers verify when they call each other, whatever address they dial
// (as Consul's server.<dc>.<domain>): a certificate without it, even from
// the cluster's CA, is a client's and cannot join, replicate or forward.
const ServerName = "server.cairn"

// DefaultPoll is how often the files are checked for changes.
const DefaultPoll = 5 * time.Second

// Config names the files. CertFile and KeyFile go together; CAFile alone
// is a client that verifies servers but presents nothing.
type Config struct {
	CertFile, KeyFile string
	// CAFile is a PEM bundle of every CA trusted: during a CA rotation it
	// holds the old and the new root.
	CAFile string
	// Flags name the files' flags in errors ("--tls-cert"); default to
	// the file's role.
	CertFlag, KeyFlag, CAFlag string
	// Poll is how often Run checks the files for changes. Defaults to
	// DefaultPoll.
	Poll       time.Duration
	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// set is one loaded, validated generation of the files.
type set struct {
	cert     *tls.Certificate // nil without CertFile
	leaf     *x509.Certificate
	pool     *x509.CertPool
	roots    []*x509.Certificate
	hash     [sha256.Size]byte // of the three files' bytes, as read
	loadedAt time.Time
}

// Files is the current set of certificates. It is safe for concurrent use.
type Files struct {
	cfg Config
	log *slog.Logger
	cur atomic.Pointer[set]
	mu  sync.Mutex // serialises reloads

	notAfter      *prometheus.GaugeVec
	reloads       *prometheus.CounterVec
	reloadFailed  prometheus.Gauge
	reloadFailing atomic.Bool // what reloadFailed says, for State
}

// Load reads and validates the files. The error names the flag and file
// at fault and the rule broken.
func Load(cfg Config) (*Files, error) {
	if (cfg.CertFile == "") != (cfg.KeyFile == "") {
		return nil, fmt.Errorf("%s and %s: give both or neither", or(cfg.CertFlag, "certificate"), or(cfg.KeyFlag, "key"))
	}
	if cfg.CAFile == "" {
		return nil, fmt.Errorf("%s: required: the CA that signs the peers' certificates", or(cfg.CAFlag, "CA file"))
	}
	if cfg.Poll <= 0 {
		cfg.Poll = DefaultPoll
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	f := &Files{cfg: cfg, log: cfg.Logger.With("component", "tls")}
	s, err := f.read()
	if err != nil {
		return nil, err
	}
	f.cur.Store(s)
	f.metrics(cfg.Registerer)
	f.warnExpiry(s)
	return f, nil
}

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// read loads and checks the files: a certificate and key that are a
// pair, valid now, chaining to the CA bundle; a bundle of at least one
// CA certificate.
func (f *Files) read() (*set, error) {
	cf, kf, af := or(f.cfg.CertFlag, "certificate"), or(f.cfg.KeyFlag, "key"), or(f.cfg.CAFlag, "CA file")
	h := sha256.New()
	caPEM, err := os.ReadFile(f.cfg.CAFile)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", af, err)
	}
	h.Write(caPEM)
	roots, err := parseCerts(caPEM)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", af, f.cfg.CAFile, err)
	}
	s := &set{pool: x509.NewCertPool(), roots: roots, loadedAt: f.cfg.Now()}
	for _, c := range roots {
		if !c.IsCA {
			return nil, fmt.Errorf("%s %s: certificate %q is not a CA", af, f.cfg.CAFile, c.Subject.CommonName)
		}
		s.pool.AddCert(c)
	}
	if f.cfg.CertFile != "" {
		certPEM, err := os.ReadFile(f.cfg.CertFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cf, err)
		}
		keyPEM, err := os.ReadFile(f.cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", kf, err)
		}
		h.Write(certPEM)
		h.Write(keyPEM)
		pair, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s %s and %s %s: not a certificate and its key: %w", cf, f.cfg.CertFile, kf, f.cfg.KeyFile, err)
		}
		leaf := pair.Leaf
		now := f.cfg.Now()
		switch {
		case now.After(leaf.NotAfter):
			return nil, fmt.Errorf("%s %s: expired at %s", cf, f.cfg.CertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
		case now.Before(leaf.NotBefore):
			return nil, fmt.Errorf("%s %s: not valid before %s", cf, f.cfg.CertFile, leaf.NotBefore.UTC().Format(time.RFC3339))
		}
		inter := x509.NewCertPool()
		for _, der := range pair.Certificate[1:] {
			if c, err := x509.ParseCertificate(der); err == nil {
				inter.AddCert(c)
			}
		}
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: s.pool, Intermediates: inter, CurrentTime: now,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			return nil, fmt.Errorf("%s %s: not signed by a CA in %s %s: %w", cf, f.cfg.CertFile, af, f.cfg.CAFile, err)
		}
		s.cert, s.leaf = &pair, leaf
	}
	copy(s.hash[:], h.Sum(nil))
	return s, nil
}

// parseCerts reads every CERTIFICATE block of a PEM bundle.
func parseCerts(b []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, errors.New("no PEM certificate in it")
	}
	return out, nil
}

// Reload re-reads the files. On error the current set stays in use and
// the error names the file; unchanged files are not reloaded.
func (f *Files) Reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.read()
	if err != nil {
		f.count("error")
		f.reloadFailed.Set(1)
		f.reloadFailing.Store(true)
		return err
	}
	f.reloadFailed.Set(0)
	f.reloadFailing.Store(false)
	if s.hash == f.cur.Load().hash {
		return nil
	}
	f.cur.Store(s)
	f.count("ok")
	f.setExpiry(s)
	f.log.Info("certificates reloaded", "not_after", notAfter(s).UTC().Format(time.RFC3339))
	f.warnExpiry(s)
	return nil
}

// Run checks the files every Poll and reloads them when they change,
// until ctx is done. A failed reload is logged; the last valid set stays.
func (f *Files) Run(ctx context.Context) error {
	t := time.NewTicker(f.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := f.Reload(); err != nil {
				f.log.Error("reloading certificates: still using the previous ones", "err", err)
			}
		}
	}
}

// NotAfter is when the certificate in use expires (the earliest CA's
// without one).
func (f *Files) NotAfter() time.Time { return notAfter(f.cur.Load()) }

func notAfter(s *set) time.Time {
	if s.leaf != nil {
		return s.leaf.NotAfter
	}
	return earliestCA(s)
}

// earliestCA is when the first CA of the bundle expires.
func earliestCA(s *set) time.Time {
	t := s.roots[0].NotAfter
	for _, c := range s.roots {
		if c.NotAfter.Before(t) {
			t = c.NotAfter
		}
	}
	return t
}

// State is what the set in use says of its own health, for a status
// page (field notes T1, T2: a rotation that fails shows only in logs).
type State struct {
	// CertNotBefore and CertNotAfter bound the certificate in use; zero
	// without one.
	CertNotBefore, CertNotAfter time.Time
	// CANotAfter is when the earliest CA of the bundle expires.
	CANotAfter time.Time
	// RotateSoon: the certificate has lived two thirds of its lifetime.
	RotateSoon bool
	// ReloadFailing: the files on disk cannot be loaded (the last reload
	// failed), so the previous ones are still in use.
	ReloadFailing bool
}

// State returns the state of the set in use.
func (f *Files) State() State {
	s := f.cur.Load()
	st := State{CANotAfter: earliestCA(s), ReloadFailing: f.reloadFailing.Load()}
	if s.leaf != nil {
		st.CertNotBefore, st.CertNotAfter = s.leaf.NotBefore, s.leaf.NotAfter
		st.RotateSoon = f.pastTwoThirds(s.leaf)
	}
	return st
}

// pastTwoThirds reports whether c has lived two thirds of its lifetime.
func (f *Files) pastTwoThirds(c *x509.Certificate) bool {
	life := c.NotAfter.Sub(c.NotBefore)
	return f.cfg.Now().After(c.NotBefore.Add(life * 2 / 3))
}

// warnExpiry logs once per load when the certificate has lived two
// thirds of its lifetime (field notes T1).
func (f *Files) warnExpiry(s *set) {
	if s.leaf == nil {
		return
	}
	if f.pastTwoThirds(s.leaf) {
		f.log.Warn("certificate is past two thirds of its lifetime: rotate it", "file", f.cfg.CertFile,
			"not_after", s.leaf.NotAfter.UTC().Format(time.RFC3339))
	}
}

// HasCert reports whether a certificate is configured.
func (f *Files) HasCert() bool { return f.cur.Load().cert != nil }

// getCertificate serves the current certificate to clients.
func (f *Files) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	if c := f.cur.Load().cert; c != nil {
		return c, nil
	}
	return nil, errors.New("no certificate configured")
}

// getClientCertificate presents the current certificate to servers that
// ask; without one, none.
func (f *Files) getClientCertificate(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if c := f.cur.Load().cert; c != nil {
		return c, nil
	}
	return &tls.Certificate{}, nil
}

// verify checks a peer's chain, as it presented it, against the current
// bundle at the current time for usage, and, when name is set, that the
// leaf is for that name.
func (f *Files) verify(chain []*x509.Certificate, usage x509.ExtKeyUsage, name string) error {
	inter := x509.NewCertPool()
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: f.cur.Load().pool, Intermediates: inter, DNSName: name,
		CurrentTime: f.cfg.Now(), KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

// resumed names a resumed session in a refusal: its certificate was
// presented on an earlier connection and carried over in a ticket.
func resumed(cs tls.ConnectionState) string {
	if cs.DidResume {
		return " (resumed session)"
	}
	return ""
}

// ClientAuth says what a server listener asks of its clients.
type ClientAuth int

const (
	// VerifyIfGiven: clients may present a certificate; one that does
	// not verify fails the handshake (the API, gRPC).
	VerifyIfGiven ClientAuth = iota
	// RequireServer: the client must present a server certificate of the
	// CA (raft).
	RequireServer
)

// ServerConfig returns a listener's TLS config: the current certificate
// at every handshake, client certificates checked against the current
// bundle at the current time on every connection, resumed ones included.
func (f *Files) ServerConfig(auth ClientAuth) *tls.Config {
	c := &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: f.getCertificate, ClientAuth: tls.RequestClientCert,
		Time: f.cfg.Now}
	name := ""
	if auth == RequireServer {
		c.ClientAuth, name = tls.RequireAnyClientCert, ServerName
	}
	// The bundle changes on reload, so the chain is verified here rather
	// than by crypto/tls against a fixed ClientCAs. VerifyConnection, not
	// VerifyPeerCertificate: crypto/tls calls it on every handshake, and
	// a resumed session skips VerifyPeerCertificate and carries the
	// certificates of its first handshake in the ticket, so a peer whose
	// CA has since left the bundle, or whose certificate has expired,
	// would resume (docs/decisions.md).
	c.VerifyConnection = func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			if auth == RequireServer {
				return errors.New("client certificate refused: none presented")
			}
			return nil
		}
		if err := f.verify(cs.PeerCertificates, x509.ExtKeyUsageClientAuth, name); err != nil {
			return fmt.Errorf("client certificate refused%s: %w", resumed(cs), err)
		}
		return nil
	}
	return c
}

// ClientConfig returns a TLS config that presents the current
// certificate (if any) and verifies the server's against the current
// bundle, for serverName: the host dialled, or ServerName between
// servers. It keeps no session cache; a caller that adds one still has
// the server's certificate checked on every resumed session.
func (f *Files) ClientConfig(serverName string) *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, ServerName: serverName, Time: f.cfg.Now,
		GetClientCertificate: f.getClientCertificate,
		// Verified below against the bundle of the moment instead of a
		// fixed RootCAs (crypto/tls's documented pattern for custom
		// verification): the name and the chain are both checked, on
		// resumed sessions too.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the server presented no certificate")
			}
			name := serverName
			if name == "" {
				name = cs.ServerName
			}
			if err := f.verify(cs.PeerCertificates, x509.ExtKeyUsageServerAuth, name); err != nil {
				return fmt.Errorf("server certificate refused%s: %w", resumed(cs), err)
			}
			return nil
		}}
}

// PeerIsServer returns nil when the peer of a verified connection
// presented a server certificate: one for ServerName. Its chain was
// verified at the handshake by a config of this package.
func PeerIsServer(cs *tls.ConnectionState) error {
	if cs == nil {
		return errors.New("the connection is not TLS")
	}
	if len(cs.PeerCertificates) == 0 {
		return errors.New("no client certificate was presented")
	}
	leaf := cs.PeerCertificates[0]
	if !slices.Contains(leaf.DNSNames, ServerName) {
		return fmt.Errorf("the client certificate (%q) is not a server's: it does not name %s", leaf.Subject.CommonName, ServerName)
	}
	if !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
		return errors.New("the client certificate may not be used for client authentication")
	}
	return nil
}
