package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

const discarded = "cairn_health_evidence_discarded_total"

func TestProbeReport(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	a := h.register(reg(svc, "a", "10.0.0.1"))
	h.tick(0) // the Node learns the members and the instances
	target := TargetID(a.Key(), a.Incarnation)
	key := a.Key().String()

	t.Run("an assigned observer's result becomes evidence", func(t *testing.T) {
		at := h.clk.Now()
		r := h.n.ProbeReport(wire.ProbeReport{Observer: "n1", Seq: 1, Results: []wire.ProbeResult{
			{Target: target, At: at, Code: 503}}})
		if r.Accepted != 1 || r.Discarded != 0 {
			t.Fatalf("reply %+v, want 1 accepted, 0 discarded", r)
		}
		if !slices.Equal(r.Live, []string{"n1"}) {
			t.Errorf("reply names live members %v, want [n1]", r.Live)
		}
		ev, ok := h.n.Evidence(key, a.Incarnation)
		want := []wire.ClassEvidence{{Class: "probe", Observer: "n1", At: at, OK: false, Detail: "status 503"}}
		if !ok || !slices.Equal(ev, want) {
			t.Fatalf("Evidence = %+v, %t; want %+v, true", ev, ok, want)
		}
		// A batch repeats the latest result of every target: the same
		// result again is the same observation, not a second one.
		h.n.ProbeReport(wire.ProbeReport{Observer: "n1", Seq: 2, Results: []wire.ProbeResult{{Target: target, At: at, Code: 503}}})
		h.n.mu.Lock()
		got := len(h.n.evidence[key].probes)
		h.n.mu.Unlock()
		if got != 1 {
			t.Errorf("%d probe observations after a repeated result, want 1", got)
		}
	})

	t.Run("an unassigned observer's result is discarded and counted", func(t *testing.T) {
		before := h.metric(discarded, "reason", "unassigned")
		r := h.n.ProbeReport(wire.ProbeReport{Observer: "n9", Results: []wire.ProbeResult{
			{Target: target, At: h.clk.Now(), Hard: true, Error: "connection refused"}}})
		if r.Accepted != 0 || r.Discarded != 1 {
			t.Fatalf("reply %+v, want 0 accepted, 1 discarded", r)
		}
		if got := h.metric(discarded, "reason", "unassigned"); got != before+1 {
			t.Errorf("discarded{reason=unassigned} = %v, want %v", got, before+1)
		}
		ev, _ := h.n.Evidence(key, a.Incarnation)
		for _, e := range ev {
			if e.Observer == "n9" {
				t.Errorf("evidence from the unassigned observer was kept: %+v", e)
			}
		}
	})

	t.Run("malformed target ids and a missing observer are discarded", func(t *testing.T) {
		before := h.metric(discarded, "reason", "malformed")
		bad := []string{"", "shop/cart/a", "shop/cart/a#0", "shop/cart/a#x", "cart/a#1", "shop/cart/a/b#1", "#1",
			// Not the canonical spelling: it hashes to other observers.
			"shop/cart/a#0" + strconv.FormatUint(a.Incarnation, 10)}
		var rs []wire.ProbeResult
		for _, id := range bad {
			rs = append(rs, wire.ProbeResult{Target: id, At: h.clk.Now()})
		}
		r := h.n.ProbeReport(wire.ProbeReport{Observer: "n1", Results: rs})
		if r.Accepted != 0 || r.Discarded != len(bad) {
			t.Fatalf("reply %+v, want all %d discarded", r, len(bad))
		}
		r = h.n.ProbeReport(wire.ProbeReport{Results: []wire.ProbeResult{{Target: target, At: h.clk.Now(), OK: true}}})
		if r.Accepted != 0 || r.Discarded != 1 {
			t.Fatalf("reply to a report without observer %+v, want 1 discarded", r)
		}
		if got := h.metric(discarded, "reason", "malformed"); got != before+float64(len(bad)+1) {
			t.Errorf("discarded{reason=malformed} = %v, want %v", got, before+float64(len(bad)+1))
		}
	})

	t.Run("a result from the future is discarded", func(t *testing.T) {
		r := h.n.ProbeReport(wire.ProbeReport{Observer: "n1", Results: []wire.ProbeResult{
			{Target: target, At: h.clk.Now().Add(2 * publish.DefaultInterval), OK: true},
			{Target: target, At: h.clk.Now().Add(publish.DefaultInterval / 2), OK: true}, // clock skew within an interval
		}})
		if r.Accepted != 1 || r.Discarded != 1 || h.metric(discarded, "reason", "future") != 1 {
			t.Fatalf("reply %+v, discarded{reason=future} %v; want 1 accepted, 1 discarded as future", r, h.metric(discarded, "reason", "future"))
		}
	})

	t.Run("a result about an older incarnation is discarded", func(t *testing.T) {
		r2 := reg(svc, "a", "10.0.0.2") // changed: a new incarnation
		r2.Replaces = a.Incarnation
		a2 := h.register(r2)
		if a2.Incarnation <= a.Incarnation {
			t.Fatalf("re-registration got incarnation %d, want > %d", a2.Incarnation, a.Incarnation)
		}
		h.tick(time.Second)
		if r := h.probe("n1", a2, true, false); r.Accepted != 1 {
			t.Fatalf("result about the current incarnation: %+v, want accepted", r)
		}
		r := h.n.ProbeReport(wire.ProbeReport{Observer: "n1", Results: []wire.ProbeResult{{Target: target, At: h.clk.Now(), OK: true}}})
		if r.Accepted != 0 || r.Discarded != 1 || h.metric(discarded, "reason", "stale_incarnation") != 1 {
			t.Fatalf("reply %+v, discarded{reason=stale_incarnation} %v; want 1 discarded", r, h.metric(discarded, "reason", "stale_incarnation"))
		}
		if ev, _ := h.n.Evidence(key, a.Incarnation); len(ev) != 0 {
			t.Errorf("evidence about the old incarnation %+v, want none", ev)
		}
		if ev, _ := h.n.Evidence(key, a2.Incarnation); len(ev) != 1 || !ev[0].OK {
			t.Errorf("evidence about the new incarnation %+v, want its one success", ev)
		}
	})
}

// TestLiveTimeout: on the leader, a member whose results have not arrived
// for LiveTimeout leaves the live set (its targets move to live nodes),
// except during the first LiveTimeout of leadership, when every member is
// live.
func TestLiveTimeout(t *testing.T) {
	nodes := cluster(t, 3)
	leader := storetest.Leader(t, nodes)
	self := leader.NodeID()
	var others []string
	for _, nd := range nodes {
		if nd != leader {
			others = append(others, nd.NodeID())
		}
	}
	all := []string{"n1", "n2", "n3"}
	clk := newClock()
	n := newNode(t, leader.Store, clk, 0, nil)
	ctx := t.Context()
	hear := func(id string) wire.ProbeReply { return n.ProbeReport(wire.ProbeReport{Observer: id}) }
	wantLive := func(want ...string) {
		t.Helper()
		slices.Sort(want)
		if got := n.liveSet(); !slices.Equal(got, want) {
			t.Fatalf("at +%v live set %v, want %v", clk.Now().Sub(newClock().Now()), got, want)
		}
		if got := hear("").Live; !slices.Equal(got, want) {
			t.Fatalf("at +%v the reply names %v live, want %v", clk.Now().Sub(newClock().Now()), got, want)
		}
	}

	n.Tick(ctx) // leadership starts now
	wantLive(all...)
	if g := nodeMetric(t, n, "cairn_health_live_members"); g != 3 {
		t.Errorf("cairn_health_live_members = %v during the grace, want 3", g)
	}
	clk.Advance(4 * time.Second)
	hear(others[0])
	n.Tick(ctx)
	wantLive(all...) // others[1] never heard from, but the grace holds

	clk.Advance(2 * time.Second) // 6s into leadership; others[0] heard 2s ago
	n.Tick(ctx)
	wantLive(self, others[0])
	if g := nodeMetric(t, n, "cairn_health_live_members"); g != 2 {
		t.Errorf("cairn_health_live_members = %v, want 2", g)
	}

	clk.Advance(DefaultLiveTimeout) // others[0] silent for 7s
	n.Tick(ctx)
	wantLive(self)

	// A member that reports again is live again at the next round.
	hear(others[1])
	n.Tick(ctx)
	wantLive(self, others[1])
}

// TestFollowerPushesBatches: a follower hands its prober's batches to the
// leader through Config.Push (empty slots left out, an empty batch sent
// too) and assigns targets over the live set the leader replies with.
func TestFollowerPushesBatches(t *testing.T) {
	nodes := cluster(t, 3)
	leader := storetest.Leader(t, nodes)
	var follower *storetest.Node
	for _, nd := range nodes {
		if nd != leader {
			follower = nd
			break
		}
	}
	clk := newClock()
	var pushed []wire.ProbeReport
	var pushErr error
	n := newNode(t, follower.Store, clk, 0, func(c *Config) {
		c.Push = func(ctx context.Context, r wire.ProbeReport) (wire.ProbeReply, error) {
			if _, ok := ctx.Deadline(); !ok {
				t.Error("Push called without a deadline")
			}
			pushed = append(pushed, r)
			if pushErr != nil {
				return wire.ProbeReply{}, pushErr
			}
			return wire.ProbeReply{Accepted: len(r.Results), Live: []string{leader.NodeID(), follower.NodeID()}}, nil
		}
	})
	ctx := t.Context()
	n.Tick(ctx)
	if n.Leading() {
		t.Fatal("a follower's Node says it is leading")
	}
	if got := n.liveSet(); !slices.Equal(got, []string{"n1", "n2", "n3"}) {
		t.Fatalf("a follower's live set before any reply is %v, want every member", got)
	}
	at := clk.Now()
	b := &probe.Batch{Observer: follower.NodeID(), Seq: 7, At: at, Results: []probe.Result{
		{}, // an unused slot
		{TargetID: "shop/cart/a#1", Observer: follower.NodeID(), At: at, Outcome: probe.Outcome{OK: true, Code: 200}},
		{TargetID: "shop/cart/b#2", Observer: follower.NodeID(), At: at, Outcome: probe.Outcome{Hard: true, Err: "connection refused"}},
		{},
	}}
	n.handleBatch(ctx, b)
	want := wire.ProbeReport{Observer: follower.NodeID(), Seq: 7, Results: []wire.ProbeResult{
		{Target: "shop/cart/a#1", At: at, OK: true, Code: 200},
		{Target: "shop/cart/b#2", At: at, Hard: true, Error: "connection refused"},
	}}
	if len(pushed) != 1 || pushed[0].Observer != want.Observer || pushed[0].Seq != want.Seq || !slices.Equal(pushed[0].Results, want.Results) {
		t.Fatalf("pushed %+v, want %+v", pushed, want)
	}
	if got, want := n.liveSet(), []string{leader.NodeID(), follower.NodeID()}; !slices.Equal(got, want) {
		t.Errorf("live set after the leader's reply %v, want %v", got, want)
	}
	n.Tick(ctx)
	if got, want := n.liveSet(), []string{leader.NodeID(), follower.NodeID()}; !slices.Equal(got, want) {
		t.Errorf("a round dropped the leader's live set: %v, want %v", got, want)
	}

	// An empty batch still tells the leader this node is live.
	n.handleBatch(ctx, &probe.Batch{Observer: follower.NodeID(), Seq: 8, Results: make([]probe.Result, 4)})
	if len(pushed) != 2 || len(pushed[1].Results) != 0 {
		t.Errorf("empty batch: pushed %+v, want an empty report", pushed[1:])
	}
	pushErr = errors.New("leader unreachable")
	n.handleBatch(ctx, b)
	for _, c := range []struct {
		result string
		want   float64
	}{{"ok", 2}, {"error", 1}, {"dropped", 0}} {
		if got := nodeMetric(t, n, "cairn_health_probe_pushes_total", "result", c.result); got != c.want {
			t.Errorf("cairn_health_probe_pushes_total{result=%q} = %v, want %v", c.result, got, c.want)
		}
	}

	// Without Push a follower drops its results, counted.
	quiet := newNode(t, follower.Store, clk, 0, nil)
	quiet.Tick(ctx)
	quiet.handleBatch(ctx, b)
	if got := nodeMetric(t, quiet, "cairn_health_probe_pushes_total", "result", "dropped"); got != 1 {
		t.Errorf("cairn_health_probe_pushes_total{result=dropped} = %v, want 1", got)
	}

	// A follower holds no evidence.
	if ev, ok := n.Evidence("shop/cart/a", 1); ok || ev != nil {
		t.Errorf("a follower's Evidence = %+v, %t; want nil, false", ev, ok)
	}

	// Regression: a node that stops leading forgets when it began, even
	// if its last round as leader failed to commit (which leaves no
	// evaluator state), so that its next term starts with the grace in
	// which every member is live.
	n.mu.Lock()
	n.leading = clk.Now().Add(-time.Hour)
	n.mu.Unlock()
	n.states = nil
	n.Tick(ctx)
	n.mu.Lock()
	leading := n.leading
	n.mu.Unlock()
	if !leading.IsZero() {
		t.Errorf("a follower's round kept the start of its last leadership, %v", leading)
	}
}

func TestOutcomes(t *testing.T) {
	h := newHarness(t, nil, 0, func(c *Config) { c.OutcomeHorizon = 10 * time.Second })
	svc := tcpService("shop", "cart")
	h.apply(svc)
	fleet := h.fleet(svc, "a", 3)
	sr := reg(svc, "s", "10.0.1.1")
	sr.Lifecycle = "starting"
	starting := h.register(sr)
	h.tick(0)
	for _, in := range fleet {
		if e := h.entry(in); !e.Flags.Has(status.Eligible) {
			t.Fatalf("%s is not published at the start: %+v", in.ID, e)
		}
	}
	ep := func(in wire.Instance, ok, failed, timedOut int) wire.EndpointOutcome {
		return wire.EndpointOutcome{Namespace: in.Namespace, Service: in.Service, Instance: in.ID, Incarnation: in.Incarnation,
			Success: ok, Failure: failed, Timeout: timedOut}
	}
	report := func(observer string, eps ...wire.EndpointOutcome) wire.OutcomeReply {
		t.Helper()
		r := wire.OutcomeReport{Endpoints: eps}
		if err := r.Validate(); err != nil {
			t.Fatalf("test report invalid: %v", err)
		}
		return h.n.Outcomes(observer, r)
	}
	a0, a1 := fleet[0], fleet[1]

	t.Run("accepted for a published endpoint", func(t *testing.T) {
		r := report("caller-1", ep(a0, 10, 1, 2))
		if r.Accepted != 1 || r.Discarded != nil {
			t.Fatalf("reply %+v, want 1 accepted and nothing discarded", r)
		}
		ev, _ := h.n.Evidence(a0.Key().String(), a0.Incarnation)
		want := []wire.ClassEvidence{{Class: "outcome", Observer: "caller-1", At: h.clk.Now(), OK: true, Detail: "10 ok, 1 failed, 2 timed out"}}
		if !slices.Equal(ev, want) {
			t.Errorf("Evidence = %+v, want %+v", ev, want)
		}
	})

	t.Run("discarded by reason", func(t *testing.T) {
		unknown := ep(a0, 1, 0, 0)
		unknown.Instance = "zz"
		otherSvc := ep(a0, 1, 0, 0)
		otherSvc.Service = "pay"
		newer, older := ep(a1, 1, 0, 0), ep(a1, 1, 0, 0)
		newer.Incarnation++
		older.Incarnation--
		h.clk.Advance(time.Millisecond) // a new window, not the same one again
		r := report("caller-2", unknown, otherSvc, newer, ep(starting, 5, 0, 0), ep(fleet[2], 0, 0, 0), ep(a0, 3, 0, 0))
		want := map[string]int{"unknown_endpoint": 2, "stale_incarnation": 1, "not_served": 1, "no_calls": 1}
		if r.Accepted != 1 || fmt.Sprint(r.Discarded) != fmt.Sprint(want) {
			t.Fatalf("reply %+v, want 1 accepted, discarded %v", r, want)
		}
		r = report("caller-2", older)
		if r.Accepted != 0 || r.Discarded["stale_incarnation"] != 1 {
			t.Fatalf("older incarnation: reply %+v, want discarded as stale_incarnation", r)
		}
		want["stale_incarnation"] = 2
		for reason, n := range want {
			if got := h.metric(discarded, "reason", reason); got != float64(n) {
				t.Errorf("discarded{reason=%q} = %v, want %d", reason, got, n)
			}
		}
	})

	t.Run("one caller's failing outcomes lower the weight", func(t *testing.T) {
		for i := range 4 {
			h.tick(2 * time.Second)
			if r := report("caller-1", ep(a1, 1, 3, 1)); r.Accepted != 1 {
				t.Fatalf("failing window %d: %+v, want accepted", i, r)
			}
		}
		h.tick(2 * time.Second)
		got := h.instance(a1).Health
		if got == nil || !got.Eligible || got.Verdict != status.Degraded || !status.Flags(got.Flags).Has(status.OutcomeDegraded) {
			t.Fatalf("health after one caller's failing windows: %+v, want eligible, degraded, outcome_degraded", got)
		}
	})

	t.Run("a caller's load reports are the same caller", func(t *testing.T) {
		// xds:caller-1 is caller-1's token over LRS (or, both anonymous,
		// any client with ACLs off): one voice, however it reports.
		for i := range 4 {
			h.tick(2 * time.Second)
			if r := report("xds:caller-1", ep(a1, 1, 3, 1)); r.Accepted != 1 {
				t.Fatalf("failing window %d: %+v, want accepted", i, r)
			}
			h.tick(0)
		}
		h.tick(2 * time.Second)
		got := h.instance(a1).Health
		if got == nil || !got.Eligible || got.Verdict != status.Degraded {
			t.Fatalf("health after one caller's failing windows over two ways: %+v, want eligible, degraded", got)
		}
		ev, _ := h.n.Evidence(a1.Key().String(), a1.Incarnation)
		for _, e := range ev {
			if e.Class == "outcome" && e.Observer != "caller-1" {
				t.Errorf("outcome evidence from %q, want every window caller-1's: %+v", e.Observer, ev)
			}
		}
	})

	t.Run("a quorum of callers' failing outcomes withdraw", func(t *testing.T) {
		for i := range 3 {
			h.tick(2 * time.Second)
			if r := report("caller-2", ep(a1, 1, 3, 1)); r.Accepted != 1 {
				t.Fatalf("failing window %d: %+v, want accepted", i, r)
			}
			h.tick(0)
		}
		h.tick(2 * time.Second)
		got := h.instance(a1).Health
		if got == nil || got.Eligible || got.Verdict != status.Unhealthy || len(got.Failing) != 1 || got.Failing[0].Class != "outcome" {
			t.Fatalf("health after three failing outcome windows: %+v, want withdrawn, the outcome class failing", got)
		}
		if e := h.entry(a1); e.Flags.Has(status.Eligible) {
			t.Errorf("table entry %+v is eligible", e)
		}
	})

	t.Run("not served once withdrawn for longer than the horizon", func(t *testing.T) {
		// Within the horizon a caller may still hold it.
		h.clk.Advance(time.Millisecond)
		if r := report("caller-1", ep(a1, 1, 3, 1)); r.Accepted != 1 {
			t.Fatalf("just withdrawn: %+v, want accepted", r)
		}
		h.tick(11 * time.Second)
		if r := report("caller-1", ep(a1, 1, 3, 1)); r.Accepted != 0 || r.Discarded["not_served"] != 1 {
			t.Fatalf("withdrawn 11s ago: %+v, want discarded as not_served", r)
		}
	})
}
