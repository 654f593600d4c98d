package certs_test

import (
	"crypto/tls"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/pki"
)

// TestResumedSessionIsChecked: a peer that resumes a TLS session is held
// to the bundle and the clock of the moment, as a fresh handshake is. A
// client of CA a gets a session ticket from a listener that trusts a;
// resuming it works (DidResume: the control, proving resumption happens
// at all); then a leaves the bundle (the reload SIGHUP runs), or the
// client's certificate expires (the Config clock), and the resumed
// session is refused with the fresh one — on the raft listener and the
// API's, over TLS 1.2 and 1.3.
func TestResumedSessionIsChecked(t *testing.T) {
	for _, v := range []struct {
		name string
		max  uint16
	}{{"TLS 1.2", tls.VersionTLS12}, {"TLS 1.3", tls.VersionTLS13}} {
		for _, port := range []struct {
			name string
			auth certs.ClientAuth
			req  pki.Request // the client's certificate
			dial string      // the name the client dials
			chk  func(*tls.ConnectionState) error
		}{
			{"raft", certs.RequireServer, pki.Request{Server: true, CommonName: "n2"}, certs.ServerName, certs.PeerIsServer},
			{"API", certs.VerifyIfGiven, pki.Request{CommonName: "ops"}, "localhost", nil},
		} {
			for _, change := range []string{"CA removed", "certificate expired"} {
				t.Run(v.name+"/"+port.name+"/"+change, func(t *testing.T) {
					dir := t.TempDir()
					now := time.Now()
					caA, _ := newCA(t, dir, "a")
					caB, _ := newCA(t, dir, "b")
					bundle := filepath.Join(dir, "bundle.pem")
					write(t, bundle, append(append([]byte{}, caA.Cert...), caB.Cert...))
					var skew atomic.Int64 // the server's clock, ahead of the wall's by this much
					cert, key := pair(t, dir, "srv", caB, pki.Request{Server: true, CommonName: "n1", Validity: 12 * time.Hour}, now)
					srv, err := certs.Load(certs.Config{CertFile: cert, KeyFile: key, CAFile: bundle,
						Now: func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }})
					if err != nil {
						t.Fatal(err)
					}
					// The client trusts both CAs from a file of its own.
					cliBundle := filepath.Join(dir, "client-bundle.pem")
					write(t, cliBundle, append(append([]byte{}, caA.Cert...), caB.Cert...))
					cc, ck := pair(t, dir, "cli", caA, port.req, now)
					cli, err := certs.Load(certs.Config{CertFile: cc, KeyFile: ck, CAFile: cliBundle})
					if err != nil {
						t.Fatal(err)
					}
					// The server's refusals, to tell a resumed session's from
					// a fresh handshake's.
					sc := srv.ServerConfig(port.auth)
					verify, refusals := sc.VerifyConnection, make(chan string, 8)
					sc.VerifyConnection = func(cs tls.ConnectionState) error {
						err := verify(cs)
						if err != nil && cs.DidResume {
							refusals <- err.Error()
						}
						return err
					}
					addr := serve(t, sc, port.chk)
					resuming := cli.ClientConfig(port.dial)
					resuming.MaxVersion = v.max
					resuming.ClientSessionCache = tls.NewLRUClientSessionCache(4)
					fresh := cli.ClientConfig(port.dial)
					fresh.MaxVersion = v.max

					for i, want := range []bool{false, true} {
						c, err := handshake(t, addr, resuming)
						if err != nil {
							t.Fatalf("connection %d: %v", i+1, err)
						}
						if cs := c.ConnectionState(); cs.DidResume != want {
							t.Fatalf("connection %d: DidResume %v, want %v", i+1, cs.DidResume, want)
						}
					}

					switch change {
					case "CA removed":
						write(t, bundle, caB.Cert)
						if err := srv.Reload(); err != nil {
							t.Fatal(err)
						}
					case "certificate expired":
						skew.Store(int64(2 * time.Hour))
					}
					if _, err := handshake(t, addr, fresh); err == nil {
						t.Fatalf("%s: a fresh handshake was accepted", change)
					}
					c, err := handshake(t, addr, resuming)
					if err == nil {
						t.Fatalf("%s: a session was accepted (DidResume %v)", change, c.ConnectionState().DidResume)
					}
					t.Logf("%s: resuming refused: %v", change, err)
					if change == "CA removed" {
						// The ticket was taken and its certificate refused.
						// (An expired leaf's ticket crypto/tls itself
						// declines, by Config.Time, and the full handshake
						// that follows refuses the certificate.)
						select {
						case msg := <-refusals:
							if !strings.Contains(msg, "client certificate refused (resumed session)") {
								t.Errorf("the server's refusal of the resumed session: %q", msg)
							}
						default:
							t.Error("the server refused no resumed session: the ticket was not used")
						}
					}
				})
			}
		}
	}
}

// TestResumedSessionServerChecked: the mirror, on the client's side. A
// client config of this package keeps no session cache; one given a
// cache still refuses to resume with a server whose CA has left its
// bundle.
func TestResumedSessionServerChecked(t *testing.T) {
	for _, v := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		dir := t.TempDir()
		now := time.Now()
		caA, _ := newCA(t, dir, "a")
		caB, _ := newCA(t, dir, "b")
		cert, key := pair(t, dir, "srv", caA, pki.Request{Server: true, CommonName: "n1"}, now)
		srvBundleWithA := filepath.Join(dir, "server-a.pem")
		write(t, srvBundleWithA, append(append([]byte{}, caA.Cert...), caB.Cert...))
		srv, err := certs.Load(certs.Config{CertFile: cert, KeyFile: key, CAFile: srvBundleWithA})
		if err != nil {
			t.Fatal(err)
		}
		bundle := filepath.Join(dir, "client-bundle.pem")
		write(t, bundle, append(append([]byte{}, caA.Cert...), caB.Cert...))
		cli, err := certs.Load(certs.Config{CAFile: bundle})
		if err != nil {
			t.Fatal(err)
		}
		if cli.ClientConfig(certs.ServerName).ClientSessionCache != nil {
			t.Fatal("the client config keeps a session cache")
		}
		addr := serve(t, srv.ServerConfig(certs.VerifyIfGiven), nil)
		cc := cli.ClientConfig(certs.ServerName)
		cc.MaxVersion = v
		cc.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		for i, want := range []bool{false, true} {
			c, err := handshake(t, addr, cc)
			if err != nil {
				t.Fatalf("version %x, connection %d: %v", v, i+1, err)
			}
			if c.ConnectionState().DidResume != want {
				t.Fatalf("version %x, connection %d: DidResume %v, want %v", v, i+1, c.ConnectionState().DidResume, want)
			}
		}
		write(t, bundle, caB.Cert)
		if err := cli.Reload(); err != nil {
			t.Fatal(err)
		}
		if c, err := handshake(t, addr, cc); err == nil {
			t.Fatalf("version %x: a server of a CA no longer trusted: accepted (DidResume %v)", v, c.ConnectionState().DidResume)
		}
	}
}
