package integration

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/pki"
	"github.com/cairn-sd/cairn/wire"
)

// TestTLSCluster: three servers with mutual TLS on loopback. Writes sent
// to a follower are forwarded to the leader, every node's probe results
// reach the leader, and the cluster fails over. A fourth node with a
// certificate of another CA is refused at join and at the raft port; one
// with the cluster CA's client certificate (not a server's) cannot join
// or pass a write off as forwarded; plaintext clients get an error that
// says what to do.
func TestTLSCluster(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartTLSCluster(t, 3, healthArgs...)
	ctx := ctxT(t, 3*time.Minute)
	leader, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	// Forwarding: the definition and the registrations go to a follower.
	const svc = "tls"
	if _, err := follower.Client().Apply(ctx, []byte(healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}", "{lease_ttl: 10m}"))); err != nil {
		t.Fatalf("apply through follower %s: %v", follower.ID, err)
	}
	var ids []string
	for i := range 6 {
		b := newBackend(t, nil)
		id := fmt.Sprintf("t-%d", i)
		if _, err := follower.Client().Register(ctx, healthNS, svc, wire.Registration{ID: id, Addresses: []string{"127.0.0.1"}, Ports: map[string]int{"http": b.port}}); err != nil {
			t.Fatalf("register through follower %s: %v", follower.ID, err)
		}
		ids = append(ids, id)
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)
	// Probe reports: the leader's evaluator holds probe evidence from
	// every node (each probes a share of the targets and sends its
	// results to the leader over mutual TLS).
	Eventually(t, 30*time.Second, func() error {
		es, err := endpointsOn(ctx, leader, svc)
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, e := range es {
			for _, ev := range e.Evidence {
				if ev.Class == "probe" {
					seen[ev.Observer] = true
				}
			}
		}
		for _, n := range c.Nodes {
			if !seen[n.ID] {
				return fmt.Errorf("the leader holds probe evidence from %v; want every node's", seen)
			}
		}
		return nil
	})

	// Plaintext clients, each told what to do.
	plain, err := client.New("http://"+leader.HTTPAddr, "")
	if err != nil {
		t.Fatal(err)
	}
	plain.RetryFor = -1
	var ce *client.Error
	if _, err := plain.Members(ctx); !errors.As(err, &ce) || ce.Code != "tls_required" || !strings.Contains(ce.Message, "https") {
		t.Errorf("a plaintext API client: %v; want tls_required naming https", err)
	}
	untrusting, err := client.NewTLS("https://"+leader.HTTPAddr, "", &tls.Config{})
	if err != nil {
		t.Fatal(err)
	}
	untrusting.RetryFor = -1
	if _, err := untrusting.Members(ctx); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("a client without the CA: %v; want a certificate error", err)
	}

	// A forwarded write is a call between servers: one marked forwarded
	// by a client certificate is refused before anything else.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, leader.URL()+"/v1/services/"+healthNS+"/"+svc+"/instances",
		strings.NewReader(`{"id": "smuggled", "addresses": ["127.0.0.1"], "ports": {"http": 1}}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Cairn-Forwarded-By", "n9")
	hc := c.HTTPClient(5 * time.Second)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "call between servers") {
		t.Errorf("a write marked forwarded, from a client certificate: %d %s; want 403, a call between servers", resp.StatusCode, body)
	}

	// The raft port takes servers of the cluster's CA only.
	other, err := pki.NewCA("another CA", time.Hour*24, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	foreignCert, foreignKey, err := WriteCert(c.TLS.Dir, "foreign", other, pki.Request{Server: true})
	if err != nil {
		t.Fatal(err)
	}
	clientOnlyCert, clientOnlyKey, err := c.TLS.WriteCert("client-only", pki.Request{})
	if err != nil {
		t.Fatal(err)
	}
	spareCert, spareKey, err := c.TLS.WriteCert("spare-server", pki.Request{Server: true})
	if err != nil {
		t.Fatal(err)
	}
	// The foreign node's bundle trusts its CA and ours: the refusals seen
	// are the cluster's.
	bundle := filepath.Join(c.TLS.Dir, "foreign-bundle.pem")
	caPEM, err := os.ReadFile(c.TLS.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bundle, append(append([]byte{}, other.Cert...), caPEM...), 0o600); err != nil {
		t.Fatal(err)
	}
	dial := func(cert, key string) error {
		ca := c.TLS.CAFile
		if cert == foreignCert {
			ca = bundle
		}
		return dialRaft(ctx, t, leader.RaftAddr, ca, cert, key)
	}
	if err := dial(spareCert, spareKey); err != nil {
		t.Fatalf("a server certificate of the cluster's CA at the raft port: %v", err)
	}
	for _, tc := range []struct{ name, cert, key string }{
		{"foreign CA", foreignCert, foreignKey},
		{"client certificate", clientOnlyCert, clientOnlyKey},
		{"no certificate", "", ""},
	} {
		if err := dial(tc.cert, tc.key); err == nil {
			t.Errorf("%s at the raft port: accepted", tc.name)
		} else {
			t.Logf("%s at the raft port: %v", tc.name, err)
		}
	}
	raw, err := net.DialTimeout("tcp", leader.RaftAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	raw.Write([]byte("\x00\x00\x00\x00plaintext raft\n"))
	raw.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := raw.Read(make([]byte, 64)); err == nil {
		t.Errorf("plaintext at the raft port got an answer")
	}
	raw.Close()

	// Joining: a node presenting a foreign certificate, and one presenting
	// the cluster CA's client certificate, are refused; the membership
	// stays three.
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	joiners := []struct {
		name, cert, key, ca string
		refusal             string // in the leader's log or the joiner's
	}{
		{"foreign", foreignCert, foreignKey, bundle, "client certificate refused"},
		{"client-only", clientOnlyCert, clientOnlyKey, c.TLS.CAFile, "join is a call between servers"},
	}
	for _, j := range joiners {
		ports, err := FreePorts(4)
		if err != nil {
			t.Fatal(err)
		}
		p := &proc{name: j.name, LogPath: filepath.Join(c.TLS.Dir, j.name+".log"), logf: t.Logf}
		args := []string{"server", "--data-dir", filepath.Join(c.TLS.Dir, j.name+"-data"), "--node-id", j.name,
			"--http-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[1]),
			"--dns-addr", fmt.Sprintf("127.0.0.1:%d", ports[2]), "--grpc-addr", fmt.Sprintf("127.0.0.1:%d", ports[3]),
			"--join", leader.HTTPAddr, "--tls-cert", j.cert, "--tls-key", j.key, "--tls-ca", j.ca}
		if err := p.start(bin, args, "a node that must not join"); err != nil {
			t.Fatal(err)
		}
		Eventually(t, 20*time.Second, func() error {
			logs := p.Tail(40) + leader.Tail(200)
			if !strings.Contains(logs, j.refusal) {
				return fmt.Errorf("%s: no %q in its log or the leader's yet", j.name, j.refusal)
			}
			return nil
		})
		ms, err := leader.Client().Members(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) != 3 {
			t.Errorf("after %s tried to join: %d members %+v", j.name, len(ms), ms)
		}
		p.Kill()
	}

	// Failover over mutual TLS: the leader killed, another is elected and
	// takes writes.
	leader.Kill()
	next, err := c.WaitLeader(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatal("the killed leader still leads")
	}
	for _, n := range c.Live() {
		Eventually(t, 10*time.Second, func() error {
			_, err := n.Client().Register(ctx, healthNS, svc, wire.Registration{ID: "after-" + n.ID, Addresses: []string{"127.0.0.1"}, Ports: map[string]int{"http": 1}})
			return err
		})
	}
}

// dialRaft opens a TLS connection to a raft port as a server would, with
// cert and key (none when empty) and the bundle ca, and returns nil if
// the server kept it open.
func dialRaft(ctx context.Context, t *testing.T, addr, ca, cert, key string) error {
	t.Helper()
	f, err := certs.Load(certs.Config{CAFile: ca, CertFile: cert, KeyFile: key})
	if err != nil {
		t.Fatal(err)
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := (&tls.Dialer{Config: f.ClientConfig(certs.ServerName)}).DialContext(dctx, "tcp", addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	// TLS 1.3: a refused client certificate shows on the first read.
	conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	_, err = conn.Read(make([]byte, 1))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		return nil // accepted: raft waits for the dialler to speak
	}
	return err
}

// TestAgentOverTLS: an agent given the CA and a client certificate
// follows a TLS server's views and answers from them; its status names
// the server it is connected to.
func TestAgentOverTLS(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartClusterWith(t, Config{Nodes: 1, Args: []string{"--dev"}, TLS: true})
	srv := c.Nodes[0]
	ctx := ctxT(t, time.Minute)
	applyDefinition(ctx, t, c, agentServices)
	fx := &agentFixture{c: c, srv: srv}
	fx.register(ctx, t, 1)
	a := StartAgent(t, []string{srv.GRPCAddr}, "--service", "shop/front",
		"--tls-ca", c.TLS.CAFile, "--tls-cert", c.TLS.ClientCert, "--tls-key", c.TLS.ClientKey)
	if err := a.WaitReady(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, func() error {
		got, _, r, err := frontAnswer(a.DNSAddr)
		if err != nil {
			return err
		}
		if r.Rcode != dns.RcodeSuccess || len(got) != 1 || got[0] != "127.0.0.51" {
			return fmt.Errorf("agent: %s A: %v", frontName, replyOf(r))
		}
		return nil
	})
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Connected || st.Server != srv.GRPCAddr {
		t.Errorf("agent status %+v; want connected to %s", st, srv.GRPCAddr)
	}
}
