package integration

import (
	"crypto/tls"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/pki"
)

// TLS is a cluster's private CA and the files made from it.
type TLS struct {
	Dir    string  // where the files are
	CA     pki.PEM // the CA, to sign more certificates with
	CAFile string  // the bundle every node trusts (--tls-ca)
	// ClientCert and ClientKey are a client certificate of the CA (the
	// harness's, and the CLI's in runCLI).
	ClientCert, ClientKey string
	// Client is the harness clients' TLS config: it follows the files
	// on Reload.
	Client *tls.Config
	files  *certs.Files
}

// Reload makes the harness's clients re-read the CA bundle and their
// certificate (after a test rewrote them).
func (t *TLS) Reload() error { return t.files.Reload() }

// WriteCert signs a certificate with the cluster's CA and writes it as
// name.pem and name-key.pem in Dir.
func (t *TLS) WriteCert(name string, req pki.Request) (cert, key string, err error) {
	return WriteCert(t.Dir, name, t.CA, req)
}

// WriteCert signs a certificate with ca and writes it as name.pem and
// name-key.pem in dir. A zero validity is an hour.
func WriteCert(dir, name string, ca pki.PEM, req pki.Request) (cert, key string, err error) {
	if req.Validity == 0 {
		req.Validity = time.Hour
	}
	if req.CommonName == "" {
		req.CommonName = name
	}
	p, err := pki.NewCert(ca, req, time.Now())
	if err != nil {
		return "", "", err
	}
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	// The key first, then the certificate: each file whole (a rename), so
	// that a server re-reading them sees the old pair, a mismatched one
	// it refuses, or the new pair.
	if err := writeAtomic(key, p.Key); err != nil {
		return "", "", err
	}
	return cert, key, writeAtomic(cert, p.Cert)
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// NewTLS makes a private CA in dir, with a client certificate.
func NewTLS(dir string) (*TLS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("cairn integration CA", 24*time.Hour, time.Now())
	if err != nil {
		return nil, err
	}
	t := &TLS{Dir: dir, CA: ca, CAFile: filepath.Join(dir, "ca.pem")}
	if err := writeAtomic(t.CAFile, ca.Cert); err != nil {
		return nil, err
	}
	if t.ClientCert, t.ClientKey, err = t.WriteCert("client", pki.Request{}); err != nil {
		return nil, err
	}
	f, err := certs.Load(certs.Config{CAFile: t.CAFile, CertFile: t.ClientCert, KeyFile: t.ClientKey, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	t.Client, t.files = f.ClientConfig(""), f
	return t, nil
}

// clientTLS is the harness clients' TLS config, nil without TLS.
func (c *Cluster) clientTLS() *tls.Config {
	if c.TLS == nil {
		return nil
	}
	return c.TLS.Client
}

// cliTLSArgs are the CLI's global flags for the cluster's TLS (none
// without).
func (c *Cluster) cliTLSArgs() []string {
	if c.TLS == nil {
		return nil
	}
	return []string{"--ca-file", c.TLS.CAFile, "--client-cert", c.TLS.ClientCert, "--client-key", c.TLS.ClientKey}
}
