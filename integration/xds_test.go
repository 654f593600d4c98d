package integration

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds" // grpc-go's xDS resolver and balancers: the real client

	"github.com/cairn-sd/cairn/wire"
)

// TestXDSGRPCClient: a gRPC client given the bootstrap `cairn
// xds-bootstrap` prints when asked through a follower's API (it names
// that follower's own gRPC port) resolves
// xds:///<svc>.<ns> through the whole path — registrations in the store,
// probes, the follower's own status table, its xDS server — and calls
// all three instances; a drained one gets no new calls within 5 s of
// `cairn drain` returning; a killed one's withdrawal reaches the client
// (it acknowledges an assignment without it) within 5 s; and its load
// reports reach the leader as outcome evidence.
func TestXDSGRPCClient(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 3, healthArgs...)
	ctx := ctxT(t, 2*time.Minute)
	const svc = "grpcy"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}",
		"{lease_ttl: 10m, drain_window: 1h, slow_start: 0s}"))
	// Three real gRPC servers on three loopback addresses, one port.
	addrs := []string{"127.0.0.61", "127.0.0.62", "127.0.0.63"}
	var mu sync.Mutex
	stops := map[string]func(){}
	port := serveAll(t, addrs, func(ln net.Listener) func() {
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, health.NewServer())
		go func() { _ = gs.Serve(ln) }()
		host, _, _ := net.SplitHostPort(ln.Addr().String())
		mu.Lock()
		stops[host] = gs.Stop
		mu.Unlock()
		return gs.Stop
	})
	regs := map[string]uint64{}
	for i, a := range addrs {
		id := fmt.Sprintf("g-%d", i)
		// Each alone in its zone: grpc-go reports its loads per locality,
		// and a locality's totals are one instance's only when it is alone.
		r := registerLoopback(ctx, t, c, svc, id, port, func(r *wire.Registration) {
			r.Addresses, r.Region, r.Zone = []string{a}, "r1", fmt.Sprintf("z%d", i)
		})
		regs[id] = r.Incarnation
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, "g-0", "g-1", "g-2")
	_, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	calls := xdsCaller(ctx, t, runCLI(ctx, t, follower, "xds-bootstrap", "--node-id", "xds-test"), svc)
	Eventually(t, 30*time.Second, func() error {
		if got := calls(30); got[addrs[0]] == 0 || got[addrs[1]] == 0 || got[addrs[2]] == 0 {
			return fmt.Errorf("30 calls reached %v, want all three instances", got)
		}
		return nil
	})

	runCLI(ctx, t, follower, "drain", "--instance", "g-1", "--incarnation", strconv.FormatUint(regs["g-1"], 10), healthNS+"/"+svc)
	// The drain is on the follower's table when the call returns; its xDS
	// stream carries it to the client, which then stops calling g-1.
	Eventually(t, 5*time.Second, func() error {
		if got := calls(20); got[addrs[1]] != 0 {
			return fmt.Errorf("20 calls after the drain reached %v", got)
		}
		return nil
	})

	// Killed: grpc-go would stop calling a refused address by itself, so
	// the proof is what it holds. The follower's table withdraws g-2 once
	// probes find it refused, and the client's acknowledged assignment is
	// the follower's current one (no subscriber behind): it holds the
	// withdrawal.
	mu.Lock()
	stops[addrs[2]]()
	mu.Unlock()
	Eventually(t, 5*time.Second, func() error {
		es, err := endpointsOn(ctx, follower, svc)
		if err != nil {
			return err
		}
		if es["g-2"].Eligible {
			return fmt.Errorf("g-2 still eligible on %s", follower.ID)
		}
		subs, err := follower.Client().Subscribers(ctx, healthNS, svc)
		if err != nil {
			return err
		}
		if subs.Subscribers != 1 || subs.Behind != 0 {
			return fmt.Errorf("subscribers of %s on %s: %+v, want one, not behind", svc, follower.ID, subs)
		}
		return nil
	})

	// The client reports its loads over LRS to the follower, which hands
	// them to the leader: caller-observed evidence about g-0, from the
	// anonymous caller (ACLs off: the client's node id names nobody).
	leader, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		calls(5)
		es, err := endpointsOn(ctx, leader, svc)
		if err != nil {
			return err
		}
		for _, ev := range es["g-0"].Evidence {
			if ev.Class == "outcome" && ev.Observer == "anonymous" && ev.OK {
				return nil
			}
		}
		return fmt.Errorf("the leader holds no passing outcome evidence about g-0 from anonymous: %+v", es["g-0"].Evidence)
	})
}

// xdsCaller makes a grpc-go client of xds:///svc.shop from the bootstrap
// (closed when the test ends) and returns calls: n health checks
// through it, counted by the address of the instance that answered.
func xdsCaller(ctx context.Context, t *testing.T, bootstrap []byte, svc string) (calls func(n int) map[string]int) {
	t.Helper()
	rb, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatalf("grpc-go refuses the bootstrap `cairn xds-bootstrap` printed: %v\n%s", err, bootstrap)
	}
	// The instances speak plaintext; the xDS channel is the bootstrap's.
	cc, err := grpc.NewClient("xds:///"+svc+"."+healthNS, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return func(n int) map[string]int {
		out := map[string]int{}
		hc := healthpb.NewHealthClient(cc)
		for range n {
			var p peer.Peer
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := hc.Check(cctx, &healthpb.HealthCheckRequest{}, grpc.Peer(&p), grpc.WaitForReady(true))
			cancel()
			if err != nil {
				t.Fatalf("Check through xDS: %v", err)
			}
			host, _, _ := net.SplitHostPort(p.Addr.String())
			out[host]++
		}
		return out
	}
}
