package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/cairn-sd/cairn/cmd"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// TestXDSNeverOlderAfterRestart: a grpc-go xDS client and a delta
// client (Envoy's kind) of one node see an instance drained. The three
// servers are killed; the node is restarted alone, without quorum, from
// a table it kept on disk before the drain (the file is written at most
// every 5 s: a kill lands after a drain and before the next write), with
// a --stale-after long enough that staleness ends no stream. Both
// clients reconnect to it, naming what they hold (grpc-go its last
// version_info, the delta client its initial_resource_versions), and
// neither is ever handed the older view: the drained instance never
// comes back into rotation. Once a second node is back, the next drain
// reaches both.
func TestXDSNeverOlderAfterRestart(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 3, append(healthArgs, "--stale-after", "1h")...)
	ctx := ctxT(t, 3*time.Minute)
	const svc = "mono"
	addrs := []string{"127.0.0.71", "127.0.0.72", "127.0.0.73"}
	regs, _ := grpcHealthFleet(ctx, t, c, svc, "m", addrs)

	n := c.Nodes[1] // the node the clients use, restarted alone
	calls := xdsCaller(ctx, t, runCLI(ctx, t, n, "xds-bootstrap", "--xds-addr", n.GRPCAddr, "--node-id", "mono-grpc"), svc)
	cluster := svc + "." + healthNS + ":http"
	dc := startDeltaRecorder(ctx, t, n.GRPCAddr, cluster)
	Eventually(t, 30*time.Second, func() error {
		if got := calls(30); got[addrs[0]] == 0 || got[addrs[1]] == 0 || got[addrs[2]] == 0 {
			return fmt.Errorf("30 calls reached %v, want all three instances", got)
		}
		if h := dc.held(); len(h) != 3 {
			return fmt.Errorf("the delta client holds %v, want all three", h)
		}
		return nil
	})
	// The table kept on disk before the drain: all three in rotation.
	tablePath := filepath.Join(n.DataDir, cmd.TableFile)
	before, _ := keptTableWith(t, tablePath, 3, 20*time.Second)

	runCLI(ctx, t, n, "drain", "--instance", "m-1", "--incarnation", strconv.FormatUint(regs["m-1"], 10), healthNS+"/"+svc)
	Eventually(t, 10*time.Second, func() error {
		if got := calls(20); got[addrs[1]] != 0 {
			return fmt.Errorf("20 calls after the drain reached %v", got)
		}
		if h := dc.held()[addrs[1]]; h != corev3.HealthStatus_DRAINING {
			return fmt.Errorf("the delta client holds m-1 %v, want DRAINING", h)
		}
		return nil
	})
	drained := dc.revision()
	dc.markDrained()

	for _, node := range c.Nodes {
		if err := node.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(tablePath, before, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := tablefile.Load(tablePath); err != nil || s == nil || s.Revision >= drained {
		t.Fatalf("the kept table: %+v (%v); want one older than revision %d, the drain's", s, err, drained)
	}
	if err := n.Respawn(); err != nil {
		t.Fatal(err)
	}
	// Both clients try the restarted node again. It serves its kept
	// table, stale, so it lets clients that hold a view go (item 4):
	// both are refused, and keep their views. (A server behind that is
	// not stale holds the older resources back instead: the xdsserver
	// unit tests.)
	Eventually(t, 60*time.Second, func() error {
		v, err := n.Metric(ctx, `cairn_xds_streams_refused_total{reason="stale"}`)
		if err != nil {
			return err
		}
		if v < 2 {
			return fmt.Errorf("%s refused %v reconnections as stale; want both clients'", n.ID, v)
		}
		return nil
	})
	// For 5 s, neither client has m-1 in rotation.
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); {
		got, back := calls(10), dc.neverBack(addrs[1])
		if got[addrs[1]] != 0 || back != nil {
			t.Fatalf("after %s restarted from an older table: 10 grpc-go calls reached %v (the drained m-1 is %s); delta client: %v\n%s",
				n.ID, got, addrs[1], back, n.Tail(30))
		}
	}

	// Quorum again: the node catches up, and the next drain (through the
	// node that came back: the restarted one still retries its join
	// through the first, which stays down) reaches both clients.
	back := c.Nodes[2]
	if err := back.Respawn(); err != nil {
		t.Fatal(err)
	}
	if err := back.WaitReady(60 * time.Second); err != nil {
		t.Fatal(err)
	}
	runCLI(ctx, t, back, "drain", "--instance", "m-2", "--incarnation", strconv.FormatUint(regs["m-2"], 10), healthNS+"/"+svc)
	Eventually(t, 10*time.Second, func() error {
		if got := calls(20); got[addrs[1]] != 0 || got[addrs[2]] != 0 || got[addrs[0]] != 20 {
			return fmt.Errorf("20 calls after the second drain reached %v, want m-0 alone", got)
		}
		if h := dc.held(); h[addrs[2]] != corev3.HealthStatus_DRAINING {
			return fmt.Errorf("the delta client holds %v, want m-2 DRAINING", h)
		}
		return nil
	})
	if err := dc.neverBack(addrs[1]); err != nil {
		t.Fatal(err)
	}
	if rev := dc.revision(); rev <= drained {
		t.Errorf("the delta client holds revision %d after the second drain, want past %d", rev, drained)
	}
}

// keptInRotation returns the instance ids a kept table has eligible.
func keptInRotation(s *tablefile.Snapshot) []string {
	var out []string
	for _, e := range s.Entries {
		if e.Entry.Flags.Has(status.Eligible) && e.Instance != nil {
			out = append(out, e.Instance.ID)
		}
	}
	return out
}

// keptTableWith waits until the table kept at path has want instances
// in rotation, and returns the file's bytes and the table's revision.
func keptTableWith(t *testing.T, path string, want int, timeout time.Duration) ([]byte, uint64) {
	t.Helper()
	var kept []byte
	var rev uint64
	Eventually(t, timeout, func() error {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s, err := tablefile.Load(path)
		if err != nil || s == nil {
			return fmt.Errorf("kept table: %v", err)
		}
		if in := keptInRotation(s); len(in) != want {
			return fmt.Errorf("kept table at revision %d has %v in rotation, want %d", s.Revision, in, want)
		}
		kept, rev = b, s.Revision
		return nil
	})
	return kept, rev
}

// deltaRecorder is a delta xDS client of one assignment, as Envoy is
// one: it acknowledges every response, holds what it was sent, and
// whenever its stream ends opens another, naming in
// initial_resource_versions the version it holds. It records the
// assignments it was sent after markDrained.
type deltaRecorder struct {
	t    *testing.T
	name string

	mu      sync.Mutex
	version string
	health  map[string]corev3.HealthStatus // by endpoint address
	drained bool
	after   []map[string]corev3.HealthStatus // what was sent after markDrained
}

// startDeltaRecorder runs a deltaRecorder of the assignment name at
// addr until the test ends.
func startDeltaRecorder(ctx context.Context, t *testing.T, addr, name string) *deltaRecorder {
	cc, err := xdstest.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	d := &deltaRecorder{t: t, name: name}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		retry := time.NewTicker(200 * time.Millisecond) // the client's reconnect pace
		defer retry.Stop()
		for ctx.Err() == nil {
			d.session(ctx, cc)
			select {
			case <-ctx.Done():
			case <-retry.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cc.Close()
	})
	return d
}

// session runs one stream until it ends.
func (d *deltaRecorder) session(ctx context.Context, cc *grpc.ClientConn) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := xdstest.Open(ctx, cc, xdstest.Options{Node: &corev3.Node{Id: "mono-delta"}})
	if err != nil {
		return
	}
	d.mu.Lock()
	var held map[string]string
	if d.version != "" {
		held = map[string]string{d.name: d.version}
	}
	d.mu.Unlock()
	if s.Subscribe(resourcev3.EndpointType, []string{d.name}, held) != nil {
		return
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			return
		}
		d.mu.Lock()
		for _, r := range resp.Resources {
			if r.Name != d.name {
				continue
			}
			var cla endpointv3.ClusterLoadAssignment
			if err := r.Resource.UnmarshalTo(&cla); err != nil {
				d.mu.Unlock()
				d.t.Errorf("delta client: %s: %v", r.Name, err)
				return
			}
			h := map[string]corev3.HealthStatus{}
			for _, l := range cla.Endpoints {
				for _, e := range l.LbEndpoints {
					h[e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = e.HealthStatus
				}
			}
			d.version, d.health = r.Version, h
			if d.drained {
				d.after = append(d.after, h)
			}
		}
		for _, n := range resp.RemovedResources {
			if n == d.name {
				d.version, d.health = "", nil
				if d.drained {
					d.after = append(d.after, nil)
				}
			}
		}
		d.mu.Unlock()
		if s.Ack(resp) != nil {
			return
		}
	}
}

// held returns the health of each endpoint of the assignment held.
func (d *deltaRecorder) held() map[string]corev3.HealthStatus {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.health
}

// revision returns the store revision the version held names.
func (d *deltaRecorder) revision() uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	rev, _ := xdsserver.ParseVersion(d.version)
	return rev
}

// markDrained starts the record of what the client is sent.
func (d *deltaRecorder) markDrained() {
	d.mu.Lock()
	d.drained = true
	d.mu.Unlock()
}

// neverBack fails if any assignment sent since markDrained had addr in
// rotation (HEALTHY or UNKNOWN), or removed the assignment.
func (d *deltaRecorder) neverBack(addr string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, h := range d.after {
		if h == nil {
			return fmt.Errorf("the delta client was sent the removal of %s (response %d after the drain)", d.name, i+1)
		}
		if s, ok := h[addr]; ok && (s == corev3.HealthStatus_HEALTHY || s == corev3.HealthStatus_UNKNOWN) {
			return fmt.Errorf("the delta client was sent %s with the drained %s %v (response %d after the drain: %v)", d.name, addr, s, i+1, h)
		}
	}
	return nil
}

// grpcHealthFleet applies svc (a TCP check, leases of 10 minutes, a drain
// window of an hour, no slow start), runs a gRPC health server on each of
// addrs (one port), registers each as prefix-i at its address, waits
// until every node has them all healthy, and returns their incarnations
// by id, and the port.
func grpcHealthFleet(ctx context.Context, t *testing.T, c *Cluster, svc, prefix string, addrs []string) (map[string]uint64, int) {
	t.Helper()
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}",
		"{lease_ttl: 10m, drain_window: 1h, slow_start: 0s, max_unavailable: 2}")) // not a test of budgets: two of three drain
	port := serveAll(t, addrs, func(ln net.Listener) func() {
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, health.NewServer())
		go func() { _ = gs.Serve(ln) }()
		return gs.Stop
	})
	regs := map[string]uint64{}
	var ids []string
	for i, a := range addrs {
		id := fmt.Sprintf("%s-%d", prefix, i)
		r := registerLoopback(ctx, t, c, svc, id, port, func(r *wire.Registration) { r.Addresses = []string{a} })
		regs[id] = r.Incarnation
		ids = append(ids, id)
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)
	return regs, port
}
