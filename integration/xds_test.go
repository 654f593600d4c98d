package integration

import (
	"context"
	"fmt"
	"net"
	"strconv"
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

// TestXDSGRPCClient: a gRPC client that only knows a follower's xDS
// address and the bootstrap `cairn xds-bootstrap` prints resolves
// xds:///<svc>.<ns> through the whole path — registrations in the store,
// probes, the follower's own status table, its xDS server — calls every
// instance, and stops calling one once `cairn drain` has returned.
func TestXDSGRPCClient(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 3, healthArgs...)
	ctx := ctxT(t, 2*time.Minute)
	const svc = "grpcy"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}",
		"{lease_ttl: 10m, drain_window: 1h, slow_start: 0s}"))
	// Two real gRPC servers on two loopback addresses, one port.
	addrs := []string{"127.0.0.61", "127.0.0.62"}
	port := serveAll(t, addrs, func(ln net.Listener) func() {
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, health.NewServer())
		go func() { _ = gs.Serve(ln) }()
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
	waitAllHealthy(ctx, t, c.Nodes, svc, "g-0", "g-1")
	_, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}

	bootstrap := runCLI(ctx, t, follower, "xds-bootstrap", "--xds-addr", follower.GRPCAddr, "--node-id", "xds-test")
	rb, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatalf("grpc-go refuses the bootstrap `cairn xds-bootstrap` printed: %v\n%s", err, bootstrap)
	}
	cc, err := grpc.NewClient("xds:///"+svc+"."+healthNS, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	calls := func(n int) map[string]int {
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
	Eventually(t, 30*time.Second, func() error {
		if got := calls(20); got[addrs[0]] == 0 || got[addrs[1]] == 0 {
			return fmt.Errorf("20 calls reached %v, want both instances", got)
		}
		return nil
	})

	runCLI(ctx, t, follower, "drain", "--instance", "g-1", "--incarnation", strconv.FormatUint(regs["g-1"], 10), healthNS+"/"+svc)
	// The drain is on the follower's table when the call returns; its xDS
	// stream carries it to the client, which then stops calling g-1.
	Eventually(t, 10*time.Second, func() error {
		if got := calls(20); got[addrs[1]] != 0 {
			return fmt.Errorf("20 calls after the drain reached %v", got)
		}
		return nil
	})

	// The client reports its loads over LRS to the follower, which hands
	// them to the leader: caller-observed evidence about g-0, from the
	// client's node.
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
			if ev.Class == "outcome" && ev.Observer == "xds:xds-test" && ev.OK {
				return nil
			}
		}
		return fmt.Errorf("the leader holds no passing outcome evidence about g-0 from xds:xds-test: %+v", es["g-0"].Evidence)
	})
}
