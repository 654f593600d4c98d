package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os/exec"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// TestWriteToFollowerIsForwarded: writes sent to a follower (apply,
// register, renew) succeed, are forwarded to the leader, and are visible
// there.
func TestWriteToFollowerIsForwarded(t *testing.T) {
	needProcesses(t)
	c := StartCluster(t, 3)
	ctx := ctxT(t, time.Minute)
	leader, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	forwardedBefore := forwardedWrites(t, follower)
	fc := follower.Client()

	if _, err := fc.Apply(ctx, []byte(testService)); err != nil {
		t.Fatalf("apply via follower %s: %v", follower.ID, err)
	}
	r, err := fc.Register(ctx, testNS, testSvc, registration("via-follower", 7))
	if err != nil {
		t.Fatalf("register via follower %s: %v", follower.ID, err)
	}
	if !r.Created || r.Incarnation == 0 {
		t.Fatalf("register via follower: created=%v incarnation=%d; want a new incarnation", r.Created, r.Incarnation)
	}
	key := wire.InstanceKey{Namespace: testNS, Service: testSvc, ID: "via-follower"}
	if _, err := fc.Renew(ctx, key, r.Incarnation); err != nil {
		t.Fatalf("renew via follower %s: %v", follower.ID, err)
	}
	// The leader answered only after applying the entry, so it has it.
	got, err := incarnations(ctx, leader.Client())
	if err != nil {
		t.Fatal(err)
	}
	if got["via-follower"] != r.Incarnation {
		t.Fatalf("leader %s: via-follower has incarnation %d (present: %v); the follower acknowledged %d", leader.ID, got["via-follower"], len(got), r.Incarnation)
	}
	// The follower was a follower throughout: it forwarded all three.
	if n := forwardedWrites(t, follower) - forwardedBefore; n < 3 {
		t.Errorf("follower %s forwarded %v writes; want 3 (apply, register, renew)", follower.ID, n)
	}
	if l, err := c.WaitLeader(10 * time.Second); err != nil || l != leader {
		t.Errorf("leader after the writes: %v (%v); want %s unchanged", l, err, leader.ID)
	}
	// And the follower's own replica catches up.
	Eventually(t, 10*time.Second, func() error {
		got, err := incarnations(ctx, fc)
		if err != nil {
			return err
		}
		if got["via-follower"] != r.Incarnation {
			return fmt.Errorf("follower %s: via-follower incarnation %d; want %d", follower.ID, got["via-follower"], r.Incarnation)
		}
		return nil
	})
}

// forwardedWrites reads cairn_api_forwarded_writes_total from a node's
// /metrics.
func forwardedWrites(t *testing.T, n *Node) float64 {
	t.Helper()
	v, err := n.Metric(t.Context(), "cairn_api_forwarded_writes_total")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestMembersCLIJSON: `cairn --output json members`, run as the real
// binary against each node, lists the three members with node_id,
// raft_addr, http_addr and leader, exactly one of them leader.
func TestMembersCLIJSON(t *testing.T) {
	needProcesses(t)
	c := StartCluster(t, 3)
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		cmd := exec.CommandContext(ctx, bin, "--addr", n.URL(), "--output", "json", "members")
		cmd.Env = childEnv()
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		cancel()
		if err != nil {
			t.Fatalf("cairn --addr %s --output json members: %v\nstderr: %s", n.URL(), err, stderr.String())
		}
		var ms []map[string]any
		if err := json.Unmarshal(stdout.Bytes(), &ms); err != nil {
			t.Fatalf("members via %s: not a JSON list: %v\n%s", n.ID, err, stdout.String())
		}
		if len(ms) != 3 {
			t.Fatalf("members via %s: %d members; want 3:\n%s", n.ID, len(ms), stdout.String())
		}
		leaders := 0
		seen := map[string]bool{}
		for _, m := range ms {
			for _, f := range []string{"node_id", "raft_addr", "http_addr", "leader"} {
				if _, ok := m[f]; !ok {
					t.Fatalf("members via %s: a member lacks %q: %v", n.ID, f, m)
				}
			}
			isLeader, ok := m["leader"].(bool)
			if !ok {
				t.Fatalf("members via %s: leader is %T, not a bool: %v", n.ID, m["leader"], m)
			}
			id, _ := m["node_id"].(string)
			want := c.Node(id)
			if want == nil || seen[id] {
				t.Fatalf("members via %s: unknown or repeated node_id %q", n.ID, id)
			}
			seen[id] = true
			if m["raft_addr"] != want.RaftAddr || m["http_addr"] != want.HTTPAddr {
				t.Errorf("members via %s: %s has raft_addr %v http_addr %v; want %s %s", n.ID, id, m["raft_addr"], m["http_addr"], want.RaftAddr, want.HTTPAddr)
			}
			if isLeader {
				leaders++
				if want != leader {
					t.Errorf("members via %s: %s is leader; the cluster agreed on %s", n.ID, id, leader.ID)
				}
			}
		}
		if leaders != 1 {
			t.Errorf("members via %s: %d members with leader:true; want exactly 1:\n%s", n.ID, leaders, stdout.String())
		}
	}
}

// TestStartRetriesTakenPort: a port taken between FreePorts and the
// server's listen (by a parallel test package, say) does not fail the
// start: the node starts again on fresh ports.
func TestStartRetriesTakenPort(t *testing.T) {
	needProcesses(t)
	c, err := New(Config{Nodes: 1, Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	ports, err := FreePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	n := c.Nodes[0]
	if err := n.setPorts(append([]int{taken.Addr().(*net.TCPAddr).Port}, ports...)); err != nil {
		t.Fatal(err)
	}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	if n.HTTPAddr == taken.Addr().String() {
		t.Fatalf("node runs on the taken address %s", n.HTTPAddr)
	}
}

// TestRespawnWaitsForItsPorts: a node started again on its own ports,
// one of them taken meanwhile (another connection's ephemeral port, say),
// waits until the port is free instead of exiting on it.
func TestRespawnWaitsForItsPorts(t *testing.T) {
	needProcesses(t)
	c, err := New(Config{Nodes: 1, Dir: t.TempDir(), Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	n := c.Nodes[0]
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	grpcAddr := n.GRPCAddr
	taken, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	// The port is given back a little later, as a connection's would be.
	release := time.AfterFunc(500*time.Millisecond, func() { taken.Close() })
	defer release.Stop()
	if err := n.Respawn(); err != nil {
		t.Fatal(err)
	}
	if !n.Running() || n.GRPCAddr != grpcAddr {
		t.Fatalf("after Respawn: running %t on gRPC %s; want running on %s", n.Running(), n.GRPCAddr, grpcAddr)
	}
	if err := n.WaitReady(30 * time.Second); err != nil {
		t.Fatal(err)
	}
}
