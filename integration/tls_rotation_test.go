package integration

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/pki"
	"github.com/cairn-sd/cairn/wire"
)

// TestTLSRotationUnderLoad: grpc-go's xDS client resolves a service
// through a server over TLS (the bootstrap `cairn xds-bootstrap --tls-*`
// prints), while DNS queries run steadily. The servers' certificates are
// then rotated: one node's on SIGHUP, the other's found by polling the
// files; then a new CA is added to every node's bundle and one node
// moves to a certificate of the new CA, so that the cluster runs a mix
// of old and new leaves (field notes T5). Through all of it no DNS query
// fails, the xDS stream is never re-opened and still delivers a drain,
// raft still replicates, and new connections see the new certificates.
func TestTLSRotationUnderLoad(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartTLSCluster(t, 2, healthArgs...)
	ctx := ctxT(t, 3*time.Minute)
	_, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const svc = "rotated"
	addrs := []string{"127.0.0.71", "127.0.0.72", "127.0.0.73"}
	regs, port := grpcHealthFleet(ctx, t, c, svc, "r", addrs)

	// grpc-go's xDS client, over TLS with a client certificate, to the
	// follower.
	bootstrap := runCLI(ctx, t, follower, "xds-bootstrap", "--xds-addr", follower.GRPCAddr, "--node-id", "rotation-test",
		"--tls-ca", c.TLS.CAFile, "--tls-cert", c.TLS.ClientCert, "--tls-key", c.TLS.ClientKey)
	calls := xdsCaller(ctx, t, bootstrap, svc)
	Eventually(t, 30*time.Second, func() error {
		if got := calls(30); got[addrs[0]] == 0 || got[addrs[1]] == 0 || got[addrs[2]] == 0 {
			return fmt.Errorf("30 calls reached %v, want all three instances", got)
		}
		return nil
	})
	opened, err := follower.Metric(ctx, "cairn_xds_streams_opened_total")
	if err != nil {
		t.Fatal(err)
	}

	// Steady DNS: a query every 5 ms to each node, every answer counted.
	name := svc + "." + healthNS + ".svc.cairn.internal."
	var (
		queries, failures atomic.Int64
		lastFailure       atomic.Value
		wg                sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	for _, n := range c.Nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(5 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-loadCtx.Done():
					return
				case <-tick.C:
				}
				queries.Add(1)
				r, err := exchange("udp", n.DNSAddr, name, dns.TypeA, false)
				if err == nil && (r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0) {
					err = fmt.Errorf("%s: rcode %s, %d answers", n.ID, dns.RcodeToString[r.Rcode], len(r.Answer))
				}
				if err != nil {
					failures.Add(1)
					lastFailure.Store(err.Error())
				}
			}
		}()
	}
	t.Cleanup(func() { stopLoad(); wg.Wait() })

	// servedSerial dials a node's API and returns the serial of the
	// certificate it presents, verified with the bundle of the moment.
	servedSerial := func(n *Node) string {
		t.Helper()
		f, err := certs.Load(certs.Config{CAFile: c.TLS.CAFile})
		if err != nil {
			t.Fatal(err)
		}
		d := &tls.Dialer{Config: f.ClientConfig("localhost")}
		conn, err := d.DialContext(ctx, "tcp", n.HTTPAddr)
		if err != nil {
			t.Fatalf("dialling %s: %v", n.ID, err)
		}
		defer conn.Close()
		return conn.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	serialOf := func(path string) string {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(path, path[:len(path)-len(".pem")]+"-key.pem")
		if err != nil {
			t.Fatal(err)
		}
		return pair.Leaf.SerialNumber.String()
	}
	rotate := func(n *Node, ca pki.PEM, hup bool) {
		t.Helper()
		if _, _, err := WriteCert(c.TLS.Dir, n.ID, ca, pki.Request{Server: true}); err != nil {
			t.Fatal(err)
		}
		want := serialOf(n.CertFile)
		if hup {
			if err := n.signal(syscall.SIGHUP); err != nil {
				t.Fatal(err)
			}
		}
		// SIGHUP reloads at once; polling within certs.DefaultPoll.
		Eventually(t, 3*certs.DefaultPoll, func() error {
			if got := servedSerial(n); got != want {
				return fmt.Errorf("%s serves certificate %s; want the new %s", n.ID, got, want)
			}
			return nil
		})
		t.Logf("%s serves its new certificate (%s)", n.ID, map[bool]string{true: "SIGHUP", false: "file change"}[hup])
	}
	rotate(c.Nodes[0], c.TLS.CA, true)
	rotate(c.Nodes[1], c.TLS.CA, false)

	// CA rotation, stage 1: every node trusts the old CA and a new one.
	newCA, err := pki.NewCA("cairn integration CA 2", 24*time.Hour, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(c.TLS.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeAtomic(c.TLS.CAFile, append(append([]byte{}, old...), newCA.Cert...)); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		if err := n.signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.TLS.Reload(); err != nil {
		t.Fatal(err)
	}
	// Stage 2 for one node: a certificate of the new CA. Its peer, on the
	// old CA's, must take it over raft.
	rotate(follower, newCA, true)
	// Both ways, each side's raft port takes the other's certificate: the
	// old CA's leaf and the new one's.
	leader := c.Nodes[0]
	if leader == follower {
		leader = c.Nodes[1]
	}
	if err := dialRaft(ctx, t, follower.RaftAddr, c.TLS.CAFile, leader.CertFile, leader.KeyFile); err != nil {
		t.Errorf("%s (old CA) to %s's raft port (new CA): %v", leader.ID, follower.ID, err)
	}
	if err := dialRaft(ctx, t, leader.RaftAddr, c.TLS.CAFile, follower.CertFile, follower.KeyFile); err != nil {
		t.Errorf("%s (new CA) to %s's raft port (old CA): %v", follower.ID, leader.ID, err)
	}
	Eventually(t, 30*time.Second, func() error {
		// A write on the leader reaches the follower over raft, over new
		// connections made with the rotated certificates.
		if _, err := c.Nodes[0].Client().Register(ctx, healthNS, svc, wire.Registration{ID: "after-rotation",
			Addresses: []string{"127.0.0.74"}, Ports: map[string]int{"http": port}}); err != nil {
			return err
		}
		es, err := endpointsOn(ctx, follower, svc)
		if err != nil {
			return err
		}
		if _, ok := es["after-rotation"]; !ok {
			return fmt.Errorf("%s does not list the write made after the rotation", follower.ID)
		}
		return nil
	})

	// The stream opened before the rotations still delivers: a drain.
	runCLI(ctx, t, follower, "drain", "--instance", "r-1", "--incarnation", strconv.FormatUint(regs["r-1"], 10), healthNS+"/"+svc)
	Eventually(t, 5*time.Second, func() error {
		if got := calls(20); got[addrs[1]] != 0 {
			return fmt.Errorf("20 calls after the drain reached %v", got)
		}
		return nil
	})
	if now, err := follower.Metric(ctx, "cairn_xds_streams_opened_total"); err != nil || now != opened {
		t.Errorf("xDS streams opened on %s: %v before the rotations, %v after (%v); want none re-opened", follower.ID, opened, now, err)
	}
	stopLoad()
	wg.Wait()
	t.Logf("%d DNS queries during the rotations, %d failed", queries.Load(), failures.Load())
	if queries.Load() < 100 {
		t.Errorf("only %d DNS queries ran", queries.Load())
	}
	if f := failures.Load(); f != 0 {
		t.Errorf("%d DNS queries failed during the rotations; the last: %v", f, lastFailure.Load())
	}
}
