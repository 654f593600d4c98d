// Package pki makes a private CA and the certificates it signs, for
// `cairn tls ca create` and `cairn tls cert create`: ECDSA P-256 keys,
// PEM files.
//
// Imports: only certs, for the servers' name. Pure functions of their
// inputs and crypto/rand, safe anywhere.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"

	"github.com/cairn-sd/cairn/internal/certs"
)

// PEM is a certificate and its private key.
type PEM struct {
	Cert, Key []byte
}

// backdate covers clocks a little behind the signer's.
const backdate = 5 * time.Minute

// NewCA makes a self-signed CA certificate valid for validity from now.
func NewCA(name string, validity time.Duration, now time.Time) (PEM, error) {
	if validity <= 0 {
		return PEM{}, errors.New("validity: must be positive")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, err
	}
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: name, Organization: []string{"cairn"}},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	return sign(tmpl, tmpl, key, key)
}

// Request describes a certificate to sign.
type Request struct {
	// Server: a server's certificate, for both server and client
	// authentication, naming certs.ServerName, localhost and loopback
	// besides DNSNames and IPs. Otherwise a client's, for client
	// authentication only.
	Server     bool
	CommonName string
	DNSNames   []string
	IPs        []net.IP
	Validity   time.Duration
}

// NewCert signs a certificate with the CA.
func NewCert(ca PEM, req Request, now time.Time) (PEM, error) {
	if req.Validity <= 0 {
		return PEM{}, errors.New("validity: must be positive")
	}
	pair, err := tls.X509KeyPair(ca.Cert, ca.Key)
	if err != nil {
		return PEM{}, fmt.Errorf("CA certificate and key: %w", err)
	}
	caCert := pair.Leaf
	if !caCert.IsCA {
		return PEM{}, fmt.Errorf("CA certificate %q is not a CA", caCert.Subject.CommonName)
	}
	if now.Add(req.Validity).After(caCert.NotAfter) {
		return PEM{}, fmt.Errorf("validity: the CA expires at %s, before the certificate would", caCert.NotAfter.UTC().Format(time.RFC3339))
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: req.CommonName, Organization: []string{"cairn"}},
		NotBefore:   now.Add(-backdate),
		NotAfter:    now.Add(req.Validity),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		DNSNames:    req.DNSNames,
		IPAddresses: req.IPs,
	}
	if req.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.DNSNames = appendNew(tmpl.DNSNames, certs.ServerName, "localhost")
		for _, ip := range []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback} {
			if !slices.ContainsFunc(tmpl.IPAddresses, ip.Equal) {
				tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			}
		}
	} else if slices.Contains(req.DNSNames, certs.ServerName) {
		return PEM{}, fmt.Errorf("dns: %s is the servers' name; a client certificate may not carry it", certs.ServerName)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, err
	}
	caKey, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return PEM{}, errors.New("CA key: not an ECDSA key")
	}
	return sign(tmpl, caCert, key, caKey)
}

func appendNew(s []string, vs ...string) []string {
	for _, v := range vs {
		if !slices.Contains(s, v) {
			s = append(s, v)
		}
	}
	return s
}

// sign makes tmpl's certificate for key, signed by parent's key.
func sign(tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) (PEM, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return PEM{}, err
	}
	tmpl.SerialNumber = serial
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return PEM{}, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return PEM{}, err
	}
	return PEM{Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key: pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})}, nil
}
