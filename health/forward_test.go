package health_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/internal/addrpolicy"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestForwarder: a follower's evidence reaches the leader's evaluator
// over the leader's real API (the route a server's prober and its xDS
// subscribers' load reports take); the leader's own goes straight into
// its Node; with no leader known, nothing is sent and the error says so.
func TestForwarder(t *testing.T) {
	lns := make([]net.Listener, 2)
	addrs := make([]string, 2)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	nodes := storetest.ClusterWith(t, addrs)
	leader := storetest.Leader(t, nodes)
	regs := map[*storetest.Node]*prometheus.Registry{}
	hns := map[*storetest.Node]*health.Node{}
	var follower *storetest.Node
	for i, nd := range nodes {
		regs[nd] = prometheus.NewRegistry()
		table, err := status.New(status.Config{Capacity: 16})
		if err != nil {
			t.Fatal(err)
		}
		pn, err := publish.New(publish.Config{Store: nd.Store, Table: table, Registerer: regs[nd], Logger: storetest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		hn, err := health.New(health.Config{Store: nd.Store, Publish: pn, Registerer: regs[nd], Logger: storetest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		hns[nd] = hn
		if nd != leader {
			follower = nd
			lns[i].Close() // the follower's API is not needed
			continue
		}
		authz, err := acl.New(acl.Config{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := api.New(api.Config{Store: nd.Store, ACL: authz, Addrs: addrpolicy.New(addrpolicy.Config{}), Health: hn, Publish: pn, Table: table,
			Registerer: regs[nd], Gatherer: regs[nd], Logger: storetest.Logger(t)})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: a, ReadHeaderTimeout: 5 * time.Second}
		done := make(chan struct{})
		go func(ln net.Listener) { defer close(done); srv.Serve(ln) }(lns[i])
		t.Cleanup(func() { srv.Close(); <-done; a.Close() })
	}
	// Known to no one: the leader discards it, counting why.
	batch := wire.OutcomeBatch{Reports: []wire.ObservedOutcomes{{Observer: "xds:caller",
		OutcomeReport: wire.OutcomeReport{Endpoints: []wire.EndpointOutcome{{Namespace: "shop", Service: "cart", Instance: "gone", Incarnation: 1, Success: 1}}}}}}
	unknown := func() float64 {
		return discarded(t, regs[leader], "unknown_endpoint")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()

	fw := health.NewForwarder(health.ForwardConfig{Store: follower.Store})
	defer fw.Close()
	if err := fw.Outcomes(hns[follower])(ctx, batch); err != nil {
		t.Fatalf("the follower's outcomes: %v", err)
	}
	if n := unknown(); n != 1 {
		t.Fatalf("the leader discarded %v forwarded outcomes as unknown_endpoint, want 1", n)
	}
	// The leader hears the follower's report; after its next round the
	// follower is live, and the reply to its next report says so.
	if _, err := fw.ProbeResults(ctx, wire.ProbeReport{Observer: follower.NodeID()}); err != nil {
		t.Fatalf("the follower's probe results: %v", err)
	}
	hns[leader].Tick(ctx)
	reply, err := fw.ProbeResults(ctx, wire.ProbeReport{Observer: follower.NodeID()})
	if err != nil {
		t.Fatalf("the follower's probe results: %v", err)
	}
	if !slices.Contains(reply.Live, follower.NodeID()) {
		t.Errorf("the leader's reply does not name the follower live: %+v", reply)
	}

	// On the leader, nothing is dialled: its own Node takes them.
	lfw := health.NewForwarder(health.ForwardConfig{Store: leader.Store, Dial: func(addr, _ string) (*client.Client, error) {
		t.Errorf("the leader dialled %s", addr)
		return nil, errors.New("no dialling on the leader")
	}})
	defer lfw.Close()
	if err := lfw.Outcomes(hns[leader])(ctx, batch); err != nil {
		t.Fatalf("the leader's own outcomes: %v", err)
	}
	if n := unknown(); n != 2 {
		t.Fatalf("the leader discarded %v outcomes as unknown_endpoint, want 2", n)
	}

	// A follower that knows no leader sends nothing.
	if err := leader.Stop(); err != nil {
		t.Fatal(err)
	}
	storetest.WaitFor(t, 10*time.Second, func() error {
		if id, _ := follower.Leader(); id != "" {
			return errors.New("the follower still names a leader")
		}
		return nil
	})
	if err := fw.Outcomes(hns[follower])(ctx, batch); !errors.Is(err, store.ErrNoLeader) {
		t.Errorf("outcomes without a leader: %v, want store.ErrNoLeader", err)
	}
	if _, err := fw.ProbeResults(ctx, wire.ProbeReport{}); !errors.Is(err, store.ErrNoLeader) {
		t.Errorf("probe results without a leader: %v, want store.ErrNoLeader", err)
	}
}

// discarded reads cairn_health_evidence_discarded_total{reason} from g.
func discarded(t *testing.T, g prometheus.Gatherer, reason string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "cairn_health_evidence_discarded_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
