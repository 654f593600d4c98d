package api_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// extraNode is an in-memory store started outside storetest.ClusterWith,
// to join a running cluster over the API.
type extraNode struct {
	*store.Store
	trans    *raft.InmemTransport
	cancel   context.CancelFunc
	done     chan error
	stopOnce sync.Once
}

func startExtraNode(t *testing.T, id, httpAddr string) *extraNode {
	t.Helper()
	// Store.Join wants a host:port raft address.
	_, trans := raft.NewInmemTransport(raft.ServerAddress(id + ":8300"))
	st, err := store.Open(storetest.Fast(store.Config{NodeID: id, HTTPAddr: httpAddr,
		Transport: trans, Logger: testLogger(t, nil).With("node", id)}))
	if err != nil {
		t.Fatalf("opening store %s: %v", id, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &extraNode{Store: st, trans: trans, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- st.Run(ctx) }()
	t.Cleanup(func() { n.stop(t) })
	return n
}

func (n *extraNode) stop(t *testing.T) {
	n.stopOnce.Do(func() {
		n.cancel()
		if err := <-n.done; err != nil {
			t.Errorf("%s: Run: %v", n.NodeID(), err)
		}
		if err := n.Close(); err != nil {
			t.Errorf("%s: Close: %v", n.NodeID(), err)
		}
	})
}

// waitConverged waits until every store sees want members, all with their
// HTTP address, and knows the leader's HTTP address.
func waitConverged(t *testing.T, stores []*store.Store, want int) {
	t.Helper()
	storetest.WaitFor(t, 10*time.Second, func() error {
		for _, st := range stores {
			if _, addr := st.Leader(); addr == "" {
				return fmt.Errorf("%s knows no leader address", st.NodeID())
			}
			ms, err := st.Members()
			if err != nil {
				return err
			}
			if len(ms) != want {
				return fmt.Errorf("%s sees %d members, want %d", st.NodeID(), len(ms), want)
			}
			for _, m := range ms {
				if m.HTTPAddr == "" {
					return fmt.Errorf("%s has no HTTP address for %s", st.NodeID(), m.NodeID)
				}
			}
		}
		return nil
	})
}

// apiNode is a cluster node's API on a real listener.
type apiNode struct {
	*storetest.Node
	*env
}

// newAPICluster starts n nodes, each with its own api.Server behind a
// real listener whose address is the node's recorded HTTP address.
func newAPICluster(t *testing.T, n int) []*apiNode {
	t.Helper()
	lns := make([]net.Listener, n)
	addrs := make([]string, n)
	for i := range lns {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		lns[i], addrs[i] = ln, ln.Addr().String()
	}
	nodes := storetest.ClusterWith(t, addrs)
	stores := make([]*store.Store, n)
	for i, nd := range nodes {
		stores[i] = nd.Store
	}
	waitConverged(t, stores, n)
	authz, err := acl.New(acl.Config{Enabled: true, Tokens: scopeTokens()})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]*apiNode, n)
	for i, nd := range nodes {
		reg := prometheus.NewRegistry()
		a, err := api.New(api.Config{Store: nd.Store, ACL: authz, Addrs: policyFor(nd.Store, false),
			Registerer: reg, Gatherer: reg, Logger: testLogger(t, nil).With("node", nd.NodeID())})
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: a, ReadHeaderTimeout: 10 * time.Second}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(lns[i]) }()
		tr := &http.Transport{}
		t.Cleanup(func() {
			tr.CloseIdleConnections()
			if err := srv.Close(); err != nil {
				t.Errorf("closing the HTTP server of %s: %v", nd.NodeID(), err)
			}
			if err := <-served; !errors.Is(err, http.ErrServerClosed) {
				t.Errorf("serving %s: %v", nd.NodeID(), err)
			}
			// Followers forward with http.DefaultTransport.
			http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		})
		out[i] = &apiNode{Node: nd, env: &env{url: "http://" + addrs[i], hc: &http.Client{Transport: tr, Timeout: 20 * time.Second}, reg: reg}}
	}
	return out
}

// leaderAndFollower returns the ready leader and one follower.
func leaderAndFollower(t *testing.T, nodes []*apiNode) (leader, follower *apiNode) {
	t.Helper()
	storetest.WaitFor(t, 10*time.Second, func() error {
		leader, follower = nil, nil
		for _, nd := range nodes {
			if nd.LeaderReady() {
				leader = nd
			} else if follower == nil {
				follower = nd
			}
		}
		if leader == nil || follower == nil {
			return errors.New("no ready leader yet")
		}
		if id, _ := follower.Leader(); id != leader.NodeID() {
			return fmt.Errorf("%s thinks the leader is %q, not %s", follower.NodeID(), id, leader.NodeID())
		}
		return nil
	})
	return leader, follower
}

func TestWriteToFollowerIsForwarded(t *testing.T) {
	// Not parallel: the cluster tests run alone, so that no other test
	// starves raft's heartbeats.
	nodes := newAPICluster(t, 3)
	leader, follower := leaderAndFollower(t, nodes)

	// Writes sent to a follower reach the leader.
	r := follower.call(t, http.MethodPost, "/v1/apply", adminSecret, webYAML)
	wantStatus(t, r, http.StatusOK)
	if _, ok := leader.Service("shop", "web"); !ok {
		t.Fatal("the leader does not have the definition applied through a follower")
	}
	r = follower.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", registrarSecret, regJSON("i-1", "10.0.0.1"))
	wantStatus(t, r, http.StatusCreated)
	reg := decodeAs[wire.Registered](t, r)
	if reg.Registrar != identity(acl.Registrar, registrarSecret) {
		t.Errorf("registrar %q: the leader did not see the caller's token", reg.Registrar)
	}
	// A retry through another follower is the same registration.
	var other *apiNode
	for _, nd := range nodes {
		if nd != leader && nd != follower {
			other = nd
		}
	}
	r = other.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", registrarSecret, regJSON("i-1", "10.0.0.1"))
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[wire.Registered](t, r); got.Incarnation != reg.Incarnation {
		t.Errorf("retry through %s: incarnation %d, want %d", other.NodeID(), got.Incarnation, reg.Incarnation)
	}
	wantStatus(t, follower.call(t, http.MethodPost, instPath("shop", "web", "i-1", "renew"), instanceSecret, incBody(reg.Incarnation)), http.StatusOK)

	// The leader's refusals come back through the follower as they are.
	wantError(t, follower.call(t, http.MethodPost, instPath("shop", "web", "i-1", "drain"), readerSecret, incBody(reg.Incarnation)),
		http.StatusForbidden, wire.CodeDenied, "drain")
	wantError(t, follower.call(t, http.MethodPost, instPath("shop", "web", "i-1", "drain"), adminSecret, incBody(reg.Incarnation+1)),
		http.StatusConflict, wire.CodeFenced, "incarnation")
	wantError(t, follower.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", adminSecret, regJSON("i-2", "169.254.169.254")),
		http.StatusForbidden, wire.CodeForbiddenAddress, "addresses[0]")
	// A token the follower does not know is the leader's to judge (it may
	// have been created there a moment ago); a missing token is refused
	// on the spot.
	wantError(t, follower.call(t, http.MethodPost, "/v1/apply", unknownSecret, webYAML), http.StatusUnauthorized, wire.CodeUnauthenticated, "token")
	wantError(t, follower.call(t, http.MethodPost, "/v1/apply", "", webYAML), http.StatusUnauthorized, wire.CodeUnauthenticated, "token")

	// Reads are served by the follower from its replica.
	storetest.WaitFor(t, 10*time.Second, func() error {
		r := follower.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints", readerSecret, "")
		if r.Status != http.StatusOK {
			return fmt.Errorf("%s", r)
		}
		if eps := decodeAs[[]wire.Endpoint](t, r); len(eps) != 1 || eps[0].Incarnation != reg.Incarnation {
			return fmt.Errorf("follower endpoints: %+v", eps)
		}
		return nil
	})
	if got := follower.metric(t, "cairn_api_forwarded_writes_total", nil); got != 7 {
		t.Errorf("follower forwarded %v writes, want 7", got)
	}
	if got := leader.metric(t, "cairn_api_forwarded_writes_total", nil); got != 0 {
		t.Errorf("the leader forwarded %v writes", got)
	}
	// Members as any node sees them: three, one leader, HTTP addresses.
	r = follower.call(t, http.MethodGet, "/v1/members", readerSecret, "")
	wantStatus(t, r, http.StatusOK)
	ms := decodeAs[[]wire.Member](t, r)
	var leaders []string
	for _, m := range ms {
		if m.Leader {
			leaders = append(leaders, m.NodeID)
		}
	}
	if len(ms) != 3 || !slices.Equal(leaders, []string{leader.NodeID()}) {
		t.Errorf("members through %s: %+v", follower.NodeID(), ms)
	}
}

func TestForwardedRequestIsNotForwardedAgain(t *testing.T) {
	// Not parallel: the cluster tests run alone, so that no other test
	// starves raft's heartbeats.
	nodes := newAPICluster(t, 3)
	leader, follower := leaderAndFollower(t, nodes)
	rev := leader.Revision()
	for _, tc := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/apply", webYAML},
		{http.MethodPost, svcPath("shop", "web") + "/instances", regJSON("i-1", "10.0.0.1")},
		{http.MethodPost, "/v1/members", `{"node_id": "n9", "raft_addr": "10.0.0.9:8482", "http_addr": "10.0.0.9:8480"}`},
		{http.MethodDelete, "/v1/members/n3", ""},
	} {
		r := follower.request(t, tc.method, tc.path, map[string]string{
			"Authorization":        "Bearer " + adminSecret,
			"X-Cairn-Forwarded-By": "n9",
		}, tc.body)
		wantError(t, r, http.StatusServiceUnavailable, wire.CodeNoLeader, "leader")
	}
	if got := follower.metric(t, "cairn_api_forwarded_writes_total", nil); got != 0 {
		t.Errorf("the follower forwarded %v writes", got)
	}
	if _, ok := leader.Service("shop", "web"); ok || leader.Revision() != rev {
		t.Errorf("a refused forwarded write changed the leader (revision %d → %d)", rev, leader.Revision())
	}
	// The leader itself takes a request marked as forwarded: that is what
	// a follower sends it.
	r := leader.request(t, http.MethodPost, "/v1/apply", map[string]string{
		"Authorization": "Bearer " + adminSecret, "X-Cairn-Forwarded-By": follower.NodeID()}, webYAML)
	wantStatus(t, r, http.StatusOK)
}

func TestJoinAndLeaveOverAPI(t *testing.T) {
	// Not parallel: the cluster tests run alone, so that no other test
	// starves raft's heartbeats.
	nodes := newAPICluster(t, 3)
	_, follower := leaderAndFollower(t, nodes)

	n4 := startExtraNode(t, "n4", "127.0.0.1:9")
	for _, nd := range nodes {
		nd.Trans.Connect(n4.trans.LocalAddr(), n4.trans)
		n4.trans.Connect(nd.Trans.LocalAddr(), nd.Trans)
	}
	all := []*store.Store{nodes[0].Store, nodes[1].Store, nodes[2].Store, n4.Store}

	join := mustJSON(wire.Member{NodeID: "n4", RaftAddr: n4.RaftAddr(), HTTPAddr: "127.0.0.1:9"})
	// Only an admin changes membership.
	wantError(t, follower.call(t, http.MethodPost, "/v1/members", registrarSecret, join), http.StatusForbidden, wire.CodeDenied, "membership")
	// Joined through a follower, which forwards to the leader.
	r := follower.call(t, http.MethodPost, "/v1/members", adminSecret, join)
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[wire.Member](t, r); got.NodeID != "n4" || got.RaftAddr != n4.RaftAddr() {
		t.Errorf("join answered %+v", got)
	}
	waitConverged(t, all, 4)
	storetest.WaitFor(t, 10*time.Second, func() error {
		if _, addr := n4.Leader(); addr == "" {
			return errors.New("n4 does not know the leader yet")
		}
		return nil
	})

	r = follower.call(t, http.MethodDelete, "/v1/members/n4", adminSecret, "")
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[map[string]string](t, r); got["node_id"] != "n4" {
		t.Errorf("leave answered %s", r.Body)
	}
	n4.stop(t)
	waitConverged(t, all[:3], 3)
	r = follower.call(t, http.MethodGet, "/v1/members", adminSecret, "")
	for _, m := range decodeAs[[]wire.Member](t, r) {
		if m.NodeID == "n4" {
			t.Errorf("n4 is still a member: %s", r.Body)
		}
	}
	// Leaving again is a retry: it succeeds, as the first leave did.
	wantStatus(t, follower.call(t, http.MethodDelete, "/v1/members/n4", adminSecret, ""), http.StatusOK)
}

// TestTokenCreatedOnLeaderWorksOnFollower: a token created a moment ago
// on the leader is honoured for writes through a follower at once (the
// follower forwards what it does not know), and for reads once the
// follower's replica has it.
func TestTokenCreatedOnLeaderWorksOnFollower(t *testing.T) {
	nodes := newAPICluster(t, 3)
	leader, follower := leaderAndFollower(t, nodes)
	wantStatus(t, leader.call(t, http.MethodPost, "/v1/apply", adminSecret, webYAML), http.StatusOK)
	r := leader.call(t, http.MethodPost, "/v1/acl/tokens", adminSecret, `{"scope": "registrar", "namespaces": ["shop"]}`)
	wantStatus(t, r, http.StatusCreated)
	tok := decodeAs[api.Token](t, r)
	wantStatus(t, follower.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", tok.Secret, regJSON("i-1", "10.0.0.1")), http.StatusCreated)
	storetest.WaitFor(t, 10*time.Second, func() error {
		if r := follower.call(t, http.MethodGet, "/v1/services", tok.Secret, ""); r.Status != http.StatusOK {
			return fmt.Errorf("read through the follower: %s", r)
		}
		return nil
	})
	// The node status needs no token and shows the revision followers
	// catch up to.
	r = follower.call(t, http.MethodGet, "/v1/status", "", "")
	wantStatus(t, r, http.StatusOK)
	if st := decodeAs[wire.Status](t, r); st.NodeID != follower.NodeID() || st.Revision == 0 || st.LeaderID != leader.NodeID() {
		t.Errorf("status %+v", st)
	} else if age := time.Since(st.LastContact); st.LastContact.IsZero() || age < -time.Second || age > 10*time.Second {
		t.Errorf("follower's last contact with the leader %v (%v ago), want within seconds", st.LastContact, age)
	}
}
