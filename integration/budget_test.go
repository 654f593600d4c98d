package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestDisruptionBudget: a 10-instance service with max_unavailable 2,
// driven with the cairn binary against a 3-node cluster. Two drains go
// through and the third is refused, naming the budget and what holds
// it, and changes nothing; once a drained instance is deregistered the
// next drain goes through; an instance whose listener closes is
// withdrawn (never refused) and holds the budget, so the next drain is
// refused naming it; draining the failing instance is no new
// disruption; --force goes through and is audited.
func TestDisruptionBudget(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 3, healthArgs...)
	ctx := ctxT(t, 3*time.Minute)
	const svc = "budget"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}",
		"{lease_ttl: 10m, drain_window: 1h, max_unavailable: 2}"))
	bs, ids := loopbackFleet(ctx, t, c, svc, "b", 10, nil)
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)
	leader, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	incs := map[string]string{}
	es, err := endpointsOn(ctx, leader, svc)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		incs[id] = strconv.FormatUint(es[id].Incarnation, 10)
	}
	act := func(n *Node, verb, id string, more ...string) (string, error) {
		args := append([]string{verb, "--instance", id, "--incarnation", incs[id]}, more...)
		return runCLIResult(ctx, t, n, append(args, healthNS+"/"+svc)...)
	}
	mustAct := func(n *Node, verb, id string, more ...string) {
		t.Helper()
		if out, err := act(n, verb, id, more...); err != nil {
			t.Fatalf("cairn %s %s via %s: %v\n%s", verb, id, n.ID, err, out)
		}
	}
	refused := func(n *Node, verb, id, holders string) {
		t.Helper()
		out, err := act(n, verb, id)
		want := fmt.Sprintf("%s of %s/%s/%s refused: disruption budget max_unavailable 2 of %s is used by %s; --force overrides",
			verb, healthNS, svc, id, "%d instances", holders)
		if err == nil || !strings.Contains(out, "429 disruption_budget") || !containsf(out, want) {
			t.Fatalf("cairn %s %s via %s past the budget: %v\n%s\nwant exit 1 and a 429 saying %q", verb, id, n.ID, err, out, want)
		}
		e, err := endpointOn(ctx, leader, svc, id)
		if err != nil {
			t.Fatal(err)
		}
		if e.Lifecycle != status.Ready {
			t.Fatalf("a refused %s changed %s: %s", verb, id, describe(e))
		}
	}

	mustAct(leader, "drain", "b-0")
	mustAct(follower, "drain", "b-1")
	seq := lastSeq(ctx, t, leader, svc)
	refused(follower, "drain", "b-2", "b-0 (draining), b-1 (draining)") // forwarded to the leader
	waitEvent(ctx, t, leader, svc, seq, "refusal of b-2", func(e wire.Event) bool {
		return e.Kind == wire.EventRefused && e.Instance == "b-2" && strings.Contains(e.Reason, "disruption budget max_unavailable 2")
	})

	// The normal end of a drain frees its share: the next drain goes.
	mustAct(leader, "deregister", "b-0")
	// A consistent read through the follower, at once, holds the
	// deregistration the leader acknowledged (the follower's replica may
	// not yet): b-0 is not listed, b-1 is draining.
	consistentOnFollower(ctx, t, follower, svc, "b-0", "b-1")
	mustAct(follower, "drain", "b-2")
	refused(leader, "drain", "b-4", "b-1 (draining), b-2 (draining)")

	// b-3's listener closes: it is withdrawn past the budget, and holds it.
	bs[3].Close()
	withdrawnVerdict(ctx, t, leader, svc, "b-3")
	withdrawnVerdict(ctx, t, follower, svc, "b-3")
	out, err := runCLIResult(ctx, t, follower, "endpoints", healthNS+"/"+svc)
	if want := "disruption budget: max_unavailable 2 of 9 instances, 3 in use: b-1 (draining), b-2 (draining), b-3 (unhealthy)"; err != nil || !strings.Contains(out, want) {
		t.Fatalf("cairn endpoints: %v\n%s\nwant %q", err, out, want)
	}
	refused(leader, "drain", "b-4", "b-1 (draining), b-2 (draining), b-3 (unhealthy)")
	mustAct(leader, "drain", "b-3") // failing already: no new disruption

	seq = lastSeq(ctx, t, leader, svc)
	mustAct(follower, "drain", "b-4", "--force")
	ev := waitEvent(ctx, t, leader, svc, seq, "override by b-4's drain", func(e wire.Event) bool {
		return e.Kind == wire.EventBudgetOverridden && e.Instance == "b-4"
	})
	if !strings.Contains(ev.Reason, "drain of shop/budget/b-4 forced past disruption budget max_unavailable 2 of 9 instances, which is used by b-1 (draining), b-2 (draining), b-3 (draining)") || ev.Actor == "" {
		t.Errorf("override event: %s", eventLines([]wire.Event{ev}))
	}
	d, err := leader.Client().Service(ctx, healthNS, svc)
	if err != nil {
		t.Fatal(err)
	}
	if b := d.Budget; b == nil || b.InUse != 4 || b.Limit != 2 || b.Instances != 9 {
		t.Errorf("the service's disruption budget after the forced drain: %+v", d.Budget)
	}
}

// containsf reports whether out holds want, whose one %d is any number.
func containsf(out, want string) bool {
	head, tail, _ := strings.Cut(want, "%d")
	i := strings.Index(out, head)
	if i < 0 {
		return false
	}
	rest := strings.TrimLeft(out[i+len(head):], "0123456789")
	return strings.HasPrefix(rest, tail)
}

// lastSeq is the sequence number of the last event of shop/svc on n.
func lastSeq(ctx context.Context, t *testing.T, n *Node, svc string) uint64 {
	t.Helper()
	evs, err := eventsOn(ctx, n, svc)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) == 0 {
		return 0
	}
	return evs[len(evs)-1].Seq
}

// consistentOnFollower runs `cairn endpoints --consistent` against
// follower, as JSON and as a table: gone is not listed and draining is
// draining, and the table names the leader's status table.
func consistentOnFollower(ctx context.Context, t *testing.T, follower *Node, svc, gone, draining string) {
	t.Helper()
	var eps []wire.Endpoint
	cliJSON(ctx, t, follower, &eps, "endpoints", "--consistent", healthNS+"/"+svc)
	found := false
	for _, e := range eps {
		if e.InstanceID == gone {
			t.Fatalf("cairn endpoints --consistent via follower %s right after %s's deregistration was acknowledged lists it: %s", follower.ID, gone, describe(e))
		}
		if e.InstanceID == draining {
			found = true
			if e.Lifecycle != status.Draining {
				t.Fatalf("cairn endpoints --consistent via follower %s: %s", follower.ID, describe(e))
			}
		}
	}
	if !found {
		t.Fatalf("cairn endpoints --consistent via follower %s does not list %s: %d endpoints", follower.ID, draining, len(eps))
	}
	out := string(runCLI(ctx, t, follower, "endpoints", "--consistent", healthNS+"/"+svc))
	if !strings.Contains(out, "served by the leader's DNS and xDS") || !strings.Contains(out, "disruption budget: ") {
		t.Fatalf("cairn endpoints --consistent via follower %s:\n%s\nwant the leader's status table named and the budget", follower.ID, out)
	}
}
