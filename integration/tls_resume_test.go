package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/pki"
)

// TestTLSResumedSessionChecked: a peer that resumes a TLS session is held
// to the node's CA bundle and the clock of the moment, as one that makes
// a fresh handshake is (issue 28). Peers of a second CA, trusted by the
// node, take session tickets from its raft, API and gRPC ports and
// resume them (the control: DidResume, so resumption happens at all);
// the CA is then removed from --tls-ca and SIGHUP sent, and the resumed
// sessions are refused as fresh ones are. Peers with certificates that
// live a few seconds resume while they are valid and are refused once
// they have expired.
func TestTLSResumedSessionChecked(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartTLSCluster(t, 1)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	caPEM, err := os.ReadFile(c.TLS.CAFile)
	if err != nil {
		t.Fatal(err)
	}

	// The node trusts a second CA, a, and takes its certificates.
	caA, err := pki.NewCA("resumption CA a", 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(c.TLS.CAFile, append(append([]byte{}, caPEM...), caA.Cert...)); err != nil {
		t.Fatal(err)
	}
	if err := n.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	ofA := newPeers(t, c, "a", caA, 0)
	Eventually(t, 10*time.Second, func() error {
		if _, err := ofA.raft.dial(ctx, n.RaftAddr, false); err != nil {
			return fmt.Errorf("a server certificate of CA a at the raft port after SIGHUP: %v", err)
		}
		return nil
	})
	ofA.resume(ctx, t, n)

	// CA a leaves the bundle.
	if err := writeAtomic(c.TLS.CAFile, caPEM); err != nil {
		t.Fatal(err)
	}
	if err := n.signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, func() error {
		if _, err := ofA.raft.dial(ctx, n.RaftAddr, false); err == nil {
			return errors.New("a fresh handshake of CA a at the raft port still accepted after SIGHUP")
		}
		return nil
	})
	ofA.refused(ctx, t, n, "CA a removed from --tls-ca")
	// The API refused a session resumed, not a fresh one: the node logs
	// it so.
	Eventually(t, 5*time.Second, func() error {
		for _, l := range strings.Split(n.Tail(50), "\n") {
			if strings.Contains(l, "TLS handshake error") && strings.Contains(l, "client certificate refused (resumed session)") {
				return nil
			}
		}
		return errors.New("the node's log has no API handshake refused on a resumed session")
	})

	// Certificates of the cluster's CA that expire in a few seconds.
	const life = 5 * time.Second
	short := newPeers(t, c, "short", c.TLS.CA, life)
	short.resume(ctx, t, n)
	// Wait for the wall clock to pass their NotAfter (the server reads
	// the real clock): a poll with a deadline.
	Eventually(t, 3*life, func() error {
		if now := time.Now(); !now.After(short.notAfter) {
			return fmt.Errorf("%s: the certificates expire at %s", now.Format(time.StampMilli), short.notAfter.Format(time.StampMilli))
		}
		return nil
	})
	short.refused(ctx, t, n, "certificates expired")
}

// peers are three TLS clients of one CA that keep session tickets: a
// server certificate for the raft and gRPC ports, a client certificate
// for the API.
type peers struct {
	raft, grpc session
	api        *http.Client
	notAfter   time.Time // the earlier of the two certificates'
}

// session is a TLS client config with a session cache; fresh is the
// same without one.
type session struct{ resuming, fresh *tls.Config }

// newPeers writes a server and a client certificate of ca (valid for
// life; zero is an hour) and makes their clients. Every peer trusts the
// cluster's CA, which signs the node's certificate.
func newPeers(t *testing.T, c *Cluster, name string, ca pki.PEM, life time.Duration) *peers {
	t.Helper()
	load := func(req pki.Request, what string) *certs.Files {
		req.Validity = life
		cert, key, err := WriteCert(c.TLS.Dir, name+"-"+what, ca, req)
		if err != nil {
			t.Fatal(err)
		}
		f, err := certs.Load(certs.Config{CAFile: c.TLS.CAFile, CertFile: cert, KeyFile: key,
			Logger: slog.New(slog.DiscardHandler)}) // short-lived: "rotate it"
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	srv, cli := load(pki.Request{Server: true}, "server"), load(pki.Request{}, "client")
	p := &peers{notAfter: srv.NotAfter()}
	if cli.NotAfter().Before(p.notAfter) {
		p.notAfter = cli.NotAfter()
	}
	mk := func(alpn ...string) session {
		s := session{resuming: srv.ClientConfig(certs.ServerName), fresh: srv.ClientConfig(certs.ServerName)}
		s.resuming.ClientSessionCache = tls.NewLRUClientSessionCache(4)
		s.resuming.NextProtos, s.fresh.NextProtos = alpn, alpn
		return s
	}
	p.raft, p.grpc = mk(), mk("h2")
	api := cli.ClientConfig("")
	api.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	// A new connection for every request: each one a handshake, the
	// second and later resumed.
	p.api = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: api, DisableKeepAlives: true}}
	return p
}

// dial opens a connection to addr and reports whether the node kept it:
// the node's first byte (gRPC's settings) or silence (raft waits for the
// dialler) is acceptance, an alert a refusal. TLS 1.3 delivers a refused
// client certificate, and the session ticket, after the client's side of
// the handshake: both come with the first read.
func (s session) dial(ctx context.Context, addr string, resume bool) (tls.ConnectionState, error) {
	cfg := s.fresh
	if resume {
		cfg = s.resuming
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: cfg}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return tls.ConnectionState{}, err
	}
	defer conn.Close()
	tc := conn.(*tls.Conn)
	tc.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = tc.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		err = nil
	}
	return tc.ConnectionState(), err
}

// resume checks that each peer's first connection to n is accepted and
// its second resumes and is accepted.
func (p *peers) resume(ctx context.Context, t *testing.T, n *Node) {
	t.Helper()
	for i, want := range []bool{false, true} {
		for _, port := range []struct {
			name, addr string
			s          session
		}{{"raft", n.RaftAddr, p.raft}, {"gRPC", n.GRPCAddr, p.grpc}} {
			cs, err := port.s.dial(ctx, port.addr, true)
			if err != nil {
				t.Fatalf("%s port, connection %d: %v", port.name, i+1, err)
			}
			if cs.DidResume != want {
				t.Fatalf("%s port, connection %d: DidResume %v, want %v", port.name, i+1, cs.DidResume, want)
			}
		}
		resp, err := p.api.Get(n.URL() + "/v1/members")
		if err != nil {
			t.Fatalf("API, connection %d: %v", i+1, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.TLS.DidResume != want {
			t.Fatalf("API, connection %d: %d, DidResume %v; want 200, DidResume %v", i+1, resp.StatusCode, resp.TLS.DidResume, want)
		}
	}
}

// refused checks that, after why, every peer is refused at n: a fresh
// handshake and a resumed session alike.
func (p *peers) refused(ctx context.Context, t *testing.T, n *Node, why string) {
	t.Helper()
	for _, port := range []struct {
		name, addr string
		s          session
	}{{"raft", n.RaftAddr, p.raft}, {"gRPC", n.GRPCAddr, p.grpc}} {
		for _, resume := range []bool{false, true} {
			if cs, err := port.s.dial(ctx, port.addr, resume); err == nil {
				t.Errorf("%s: %s port, session cache %v: accepted (DidResume %v)", why, port.name, resume, cs.DidResume)
			} else {
				t.Logf("%s: %s port, session cache %v: %v", why, port.name, resume, err)
			}
		}
	}
	resp, err := p.api.Get(n.URL() + "/v1/members")
	if err == nil {
		resp.Body.Close()
		t.Errorf("%s: API: %d (DidResume %v); want the connection refused", why, resp.StatusCode, resp.TLS.DidResume)
	} else {
		t.Logf("%s: API: %v", why, err)
	}
}
