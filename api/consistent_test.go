package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestConsistentReadSeesAcknowledgedWrite: a read with ?consistent=true
// sent to a follower is answered by the leader once it has confirmed its
// leadership, so it holds every write acknowledged before it was sent,
// at once; without the flag the follower answers from its own replica.
func TestConsistentReadSeesAcknowledgedWrite(t *testing.T) {
	// Not parallel: the cluster tests run alone, so that no other test
	// starves raft's heartbeats.
	nodes := newAPICluster(t, 3)
	leader, follower := leaderAndFollower(t, nodes)
	wantStatus(t, leader.call(t, http.MethodPost, "/v1/apply", adminSecret, webYAML), http.StatusOK)
	for i := range 20 {
		id := fmt.Sprintf("i-%d", i)
		reg := leader.register(t, registrarSecret, "shop", "web", id, fmt.Sprintf("10.0.0.%d", i+1))
		// No wait: the acknowledged write must be in the answer.
		for _, path := range []string{svcPath("shop", "web") + "/endpoints?all=true&consistent=true", svcPath("shop", "web") + "?consistent=true"} {
			r := follower.call(t, http.MethodGet, path, readerSecret, "")
			wantStatus(t, r, http.StatusOK)
			var eps []wire.Endpoint
			if path[len(path)-len("?consistent=true"):] == "?consistent=true" {
				eps = decodeAs[wire.ServiceDetail](t, r).View.Endpoints
			} else {
				eps = decodeAs[[]wire.Endpoint](t, r)
			}
			found := false
			for _, e := range eps {
				found = found || e.InstanceID == id && e.Incarnation == reg.Incarnation
			}
			if !found {
				t.Fatalf("consistent read %s through %s after %s was acknowledged (incarnation %d): %d endpoints, not it",
					path, follower.NodeID(), id, reg.Incarnation, len(eps))
			}
		}
	}
	if got := follower.metric(t, "cairn_api_forwarded_writes_total", nil); got != 40 {
		t.Errorf("follower forwarded %v requests, want the 40 consistent reads", got)
	}
	// Any other value of the flag is an ordinary read, served by the
	// follower itself.
	wantStatus(t, follower.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints?consistent=yes", readerSecret, ""), http.StatusOK)
	if got := follower.metric(t, "cairn_api_forwarded_writes_total", nil); got != 40 {
		t.Errorf("follower forwarded %v requests after an ordinary read, want 40", got)
	}
	// A consistent read forwarded once is not forwarded again.
	r := follower.request(t, http.MethodGet, svcPath("shop", "web")+"/endpoints?consistent=true", map[string]string{
		"Authorization": "Bearer " + readerSecret, "X-Cairn-Forwarded-By": "n9"}, "")
	wantError(t, r, http.StatusServiceUnavailable, wire.CodeNoLeader, "leader")
	// A reader out of scope is refused as for an ordinary read.
	wantError(t, follower.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints?consistent=true", "", ""),
		http.StatusUnauthorized, wire.CodeUnauthenticated, "token")
}

// TestConsistentReadRefusedByCutOffLeader: a leader cut off from the
// other voters cannot confirm its leadership, so it answers a consistent
// read with 503 rather than from a replica the majority may have moved
// past; an ordinary read it still answers.
func TestConsistentReadRefusedByCutOffLeader(t *testing.T) {
	nodes := newAPICluster(t, 3)
	leader, _ := leaderAndFollower(t, nodes)
	wantStatus(t, leader.call(t, http.MethodPost, "/v1/apply", adminSecret, webYAML), http.StatusOK)
	leader.Trans.DisconnectAll()
	for _, nd := range nodes {
		if nd != leader {
			nd.Trans.Disconnect(leader.Trans.LocalAddr())
		}
	}
	storetest.WaitFor(t, 10*time.Second, func() error {
		r := leader.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints?consistent=true", readerSecret, "")
		if r.Status != http.StatusServiceUnavailable {
			return fmt.Errorf("cut-off leader answered %s", r)
		}
		return nil
	})
	r := leader.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints?consistent=true", readerSecret, "")
	wantError(t, r, http.StatusServiceUnavailable, wire.CodeNoLeader, "leader")
	wantStatus(t, leader.call(t, http.MethodGet, svcPath("shop", "web")+"/endpoints", readerSecret, ""), http.StatusOK)
}
