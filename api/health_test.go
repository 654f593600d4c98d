package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// A service without a check: caller outcomes and the lease are its
// evidence.
const payYAML = `namespace: shop
name: pay
ports: [{name: http, number: 8080}]
capability: {readiness: none}
policy: {drain_window: 1h, lease_ttl: 1h}
`

func outcome(id string, inc uint64, succ, fail, tmo int) map[string]any {
	return map[string]any{"namespace": "shop", "service": "pay", "instance_id": id, "incarnation": inc,
		"success": succ, "failure": fail, "timeout": tmo}
}

func outcomesBody(eps ...map[string]any) string { return mustJSON(map[string]any{"endpoints": eps}) }

// healthEnv is an API with an evaluator on a settable clock, shop/pay
// defined, p-1 and p-3 ready and p-2 starting, and one round run.
func healthEnv(t *testing.T, o options) (*env, *clock, map[string]wire.Registered) {
	t.Helper()
	clk := &clock{t: time.Now()}
	o.health, o.clock = true, clk
	e := newEnv(t, o)
	tok := ""
	if o.acl.Enabled {
		tok = adminSecret
	}
	e.apply(t, tok, payYAML)
	regs := map[string]wire.Registered{}
	for _, id := range []string{"p-1", "p-2", "p-3"} {
		body := map[string]any{"instance_id": id, "addresses": []string{"10.0.1." + id[2:]}, "ports": map[string]int{"http": 8080}}
		if id == "p-2" {
			body["lifecycle"] = "starting"
		}
		r := e.call(t, http.MethodPost, svcPath("shop", "pay")+"/instances", tok, mustJSON(body))
		wantStatus(t, r, http.StatusCreated)
		regs[id] = decodeAs[wire.Registered](t, r)
	}
	e.tick(t)
	return e, clk, regs
}

func endpointsOf(t *testing.T, e *env, token string) map[string]wire.Endpoint {
	t.Helper()
	r := e.call(t, http.MethodGet, svcPath("shop", "pay")+"/endpoints", token, "")
	wantStatus(t, r, http.StatusOK)
	out := map[string]wire.Endpoint{}
	for _, ep := range decodeAs[[]wire.Endpoint](t, r) {
		out[ep.InstanceID] = ep
	}
	return out
}

func TestOutcomesRefuseBadInput(t *testing.T) {
	e, _, regs := healthEnv(t, options{})
	inc := regs["p-1"].Incarnation
	many := make([]map[string]any, wire.MaxOutcomeEndpoints+1)
	for i := range many {
		many[i] = outcome(fmt.Sprintf("x-%d", i), 1, 1, 0, 0)
	}
	for _, c := range []struct {
		name, body string
		mentions   []string
	}{
		{"empty object", `{}`, []string{"endpoints", "at least one"}},
		{"no endpoints", `{"endpoints": []}`, []string{"endpoints"}},
		{"unknown field", `{"endpoints": [], "window": "10s"}`, []string{"window", "unknown field"}},
		{"bad namespace", outcomesBody(map[string]any{"namespace": "Shop", "service": "pay", "instance_id": "p-1", "incarnation": inc, "success": 1}), []string{"endpoints[0].namespace"}},
		{"no incarnation", outcomesBody(outcome("p-1", 0, 1, 0, 0)), []string{"endpoints[0].incarnation", "required"}},
		{"negative count", outcomesBody(outcome("p-1", inc, 1, 0, 0), outcome("p-3", 1, 1, -1, 0)), []string{"endpoints[1].failure"}},
		{"count too large", outcomesBody(outcome("p-1", inc, 0, 0, 2_000_000_000)), []string{"endpoints[0].timeout"}},
		{"twice", outcomesBody(outcome("p-1", inc, 1, 0, 0), outcome("p-1", inc, 0, 1, 0)), []string{"endpoints[1]", "twice"}},
		{"too many", outcomesBody(many...), []string{"endpoints", "at most 1000"}},
		{"count as string", `{"endpoints": [{"namespace": "shop", "service": "pay", "instance_id": "p-1", "incarnation": 1, "success": "1"}]}`, []string{"success"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := e.snapshot(t)
			r := e.call(t, http.MethodPost, "/v1/outcomes", "", c.body)
			wantError(t, r, http.StatusBadRequest, wire.CodeInvalid, c.mentions...)
			e.wantUnchanged(t, before, c.name)
			if ev, _ := e.health.Evidence("shop/pay/p-1", inc); len(ev) != 0 {
				t.Fatalf("a refused report left evidence: %+v", ev)
			}
		})
	}
}

func TestOutcomesWithoutEvaluator(t *testing.T) {
	e := newEnv(t, options{})
	r := e.call(t, http.MethodPost, "/v1/outcomes", "", outcomesBody(outcome("p-1", 1, 1, 0, 0)))
	wantError(t, r, http.StatusServiceUnavailable, wire.CodeNoLeader, "no health evaluator")
}

// Only endpoints the caller can have been served count: a starting
// instance was never published, an old incarnation is not the one
// served, an unknown instance was never there, and a window without
// calls says nothing.
func TestOutcomesDiscardWhatWasNeverServed(t *testing.T) {
	e, _, regs := healthEnv(t, options{})
	r := e.call(t, http.MethodPost, "/v1/outcomes", "", outcomesBody(
		outcome("p-1", regs["p-1"].Incarnation, 9, 1, 0),
		outcome("p-2", regs["p-2"].Incarnation, 5, 0, 0),
		outcome("p-3", regs["p-3"].Incarnation+100, 5, 0, 0),
		outcome("ghost", 7, 5, 0, 0),
	))
	wantStatus(t, r, http.StatusAccepted)
	got := decodeAs[wire.OutcomeReply](t, r)
	want := map[string]int{"not_served": 1, "stale_incarnation": 1, "unknown_endpoint": 1}
	if got.Accepted != 1 || !mapsEqual(got.Discarded, want) {
		t.Fatalf("reply %+v, want 1 accepted and discarded %v", got, want)
	}
	r = e.call(t, http.MethodPost, "/v1/outcomes", "", outcomesBody(outcome("p-3", regs["p-3"].Incarnation, 0, 0, 0)))
	if got := decodeAs[wire.OutcomeReply](t, r); got.Accepted != 0 || got.Discarded["no_calls"] != 1 {
		t.Fatalf("a window without calls: %+v, want discarded no_calls", got)
	}
	for reason, n := range map[string]float64{"not_served": 1, "stale_incarnation": 1, "unknown_endpoint": 1, "no_calls": 1} {
		if v := e.metric(t, "cairn_health_evidence_discarded_total", map[string]string{"reason": reason}); v != n {
			t.Errorf("cairn_health_evidence_discarded_total{reason=%q} = %v, want %v", reason, v, n)
		}
	}
	eps := endpointsOf(t, e, "")
	ev := eps["p-1"].Evidence
	if len(ev) != 1 || ev[0].Class != "outcome" || ev[0].Observer != "anonymous" || !ev[0].OK ||
		!strings.Contains(ev[0].Detail, "9 ok, 1 failed") {
		t.Fatalf("p-1 evidence %+v, want the accepted outcome window from anonymous", ev)
	}
	if len(eps["p-2"].Evidence) != 0 || len(eps["p-3"].Evidence) != 0 {
		t.Fatalf("discarded outcomes became evidence: p-2 %+v, p-3 %+v", eps["p-2"].Evidence, eps["p-3"].Evidence)
	}
}

// One caller's failing outcome windows only lower an instance's weight:
// local evidence stays local (SPEC §2). A second caller reporting
// failures makes the quorum, and then withdraw_after windows withdraw it;
// the endpoints view shows the verdict, its reason and its evidence, and
// the audit trail has the transition.
func TestOutcomesWithdraw(t *testing.T) {
	const callerA, callerB = "reader-a-0123456789abcdefghij", "reader-b-0123456789abcdefghij"
	e, clk, regs := healthEnv(t, options{acl: acl.Config{Enabled: true, Tokens: append(scopeTokens(),
		acl.Token{Secret: callerA, Scope: acl.Reader, Namespaces: []string{"shop"}},
		acl.Token{Secret: callerB, Scope: acl.Reader, Namespaces: []string{"shop"}})}})
	inc := regs["p-1"].Incarnation
	eps := endpointsOf(t, e, adminSecret)
	if p1 := eps["p-1"]; !p1.Eligible || p1.Verdict != status.Unknown || p1.Weight == 0 || !slices.Contains(p1.Flags, "eligible") {
		t.Fatalf("before any evidence p-1 is %+v, want unknown and eligible", p1)
	}
	if p2 := eps["p-2"]; p2.Eligible || p2.Weight != 0 {
		t.Fatalf("starting p-2 is %+v, want not eligible", p2)
	}
	window := func(caller string) {
		t.Helper()
		r := e.call(t, http.MethodPost, "/v1/outcomes", caller, outcomesBody(outcome("p-1", inc, 1, 7, 2)))
		wantStatus(t, r, http.StatusAccepted)
	}
	for range 4 {
		window(callerA)
		// Evidence younger than one interval waits for the next round.
		clk.Advance(1100 * time.Millisecond)
		e.tick(t)
	}
	p1 := endpointsOf(t, e, adminSecret)["p-1"]
	if !p1.Eligible || p1.Verdict != status.Degraded || !slices.Contains(p1.Flags, "outcome_degraded") {
		t.Fatalf("after one caller's 4 failing windows p-1 is %+v, want eligible, degraded, outcome_degraded", p1)
	}
	for i := range 3 {
		window(callerA)
		window(callerB)
		clk.Advance(1100 * time.Millisecond)
		e.tick(t)
		if p1 := endpointsOf(t, e, adminSecret)["p-1"]; p1.Eligible != (i < 2) {
			t.Fatalf("after %d failing windows of two callers p-1 is eligible=%v (%v), want withdrawn after 3", i+1, p1.Eligible, p1.Reasons)
		}
	}
	p1 = endpointsOf(t, e, adminSecret)["p-1"]
	if p1.Verdict != status.Unhealthy || p1.Weight != 0 || len(p1.Reasons) == 0 || !strings.Contains(p1.Reasons[0], "outcome failing") {
		t.Fatalf("p-1 is %+v, want unhealthy with an outcome reason", p1)
	}
	if ev := p1.VerdictEvidence; ev == nil || ev.Class != "outcome" || !strings.HasPrefix(ev.Observer, "reader:") {
		t.Fatalf("p-1's verdict evidence %+v, want an outcome window from a reader", ev)
	}
	var found bool
	for _, ev := range e.node.Events("shop", "pay", 0) {
		if ev.Kind == "eligibility" && ev.Instance == "p-1" && strings.HasPrefix(ev.To, "withdrawn/") {
			found = ev.Evidence != nil && ev.Evidence.Class == "outcome" && strings.HasPrefix(ev.Actor, "evaluator@")
		}
	}
	if !found {
		t.Fatalf("no eligibility event with outcome evidence for p-1's withdrawal: %+v", e.node.Events("shop", "pay", 0))
	}
	// The services summary counts from the same table.
	r := e.call(t, http.MethodGet, "/v1/services", adminSecret, "")
	for _, s := range decodeAs[[]wire.ServiceSummary](t, r) {
		if s.Name == "pay" && (s.Instances != 3 || s.Eligible != 1) {
			t.Fatalf("services summary %+v, want 3 instances and 1 eligible (p-3)", s)
		}
	}
}

func TestOutcomesScopes(t *testing.T) {
	e, _, regs := healthEnv(t, options{acl: acl.Config{Enabled: true, Tokens: append(probeTokens(),
		acl.Token{Secret: "reader-other-0123456789abcdefg", Scope: acl.Reader, Namespaces: []string{"other"}})}})
	body := outcomesBody(outcome("p-1", regs["p-1"].Incarnation, 3, 0, 0))
	for _, c := range []struct {
		secret string
		status int
	}{
		{adminSecret, http.StatusAccepted},
		{registrarSecret, http.StatusAccepted},
		{readerSecret, http.StatusAccepted},
		// A server's token is no caller (docs/decisions.md).
		{proberSecret, http.StatusForbidden},
		{proberN1Secret, http.StatusForbidden},
		{"reader-other-0123456789abcdefg", http.StatusForbidden},
		{instanceSecret, http.StatusForbidden},
		{unknownSecret, http.StatusUnauthorized},
		{"", http.StatusUnauthorized},
	} {
		r := e.call(t, http.MethodPost, "/v1/outcomes", c.secret, body)
		if r.Status != c.status {
			t.Errorf("%.14s…: %s; want %d", c.secret, r, c.status)
		}
	}
	// Each caller is its own observer.
	ev, _ := e.health.Evidence("shop/pay/p-1", regs["p-1"].Incarnation)
	var who []string
	for _, x := range ev {
		who = append(who, x.Observer)
	}
	slices.Sort(who)
	want := []string{identity(acl.Admin, adminSecret), identity(acl.Reader, readerSecret), identity(acl.Registrar, registrarSecret)}
	slices.Sort(want)
	if !slices.Equal(who, want) {
		t.Fatalf("outcome observers %v, want %v", who, want)
	}
}

// Prober tokens bound to a server (SPEC §8): the test node is n1.
const (
	proberN1Secret = "prober-n1-0123456789abcdefghij"
	proberN2Secret = "prober-n2-0123456789abcdefghij"
)

// probeTokens are scopeTokens (whose prober token names no node) and a
// prober token for each of n1 and n2.
func probeTokens() []acl.Token {
	return append(scopeTokens(),
		acl.Token{Secret: proberN1Secret, Scope: acl.Prober, Node: "n1"},
		acl.Token{Secret: proberN2Secret, Scope: acl.Prober, Node: "n2"})
}

// probeEnv is healthEnv with probeTokens; it returns the target id of
// p-1, which the single node n1 is assigned to probe.
func probeEnv(t *testing.T) (*env, map[string]wire.Registered, string) {
	t.Helper()
	e, _, regs := healthEnv(t, options{acl: acl.Config{Enabled: true, Tokens: probeTokens()}})
	if id := e.node.NodeID(); id != "n1" {
		t.Fatalf("the test node is %q; probeTokens bind n1", id)
	}
	return e, regs, health.TargetID(regs["p-1"].Key(), regs["p-1"].Incarnation)
}

// probeReport is a report by observer of one passing result for target.
func probeReport(observer, target string) string {
	return mustJSON(wire.ProbeReport{Observer: observer, Seq: 1, Results: []wire.ProbeResult{
		{Target: target, At: time.Now().Add(-time.Second), OK: true, Code: 200}}})
}

func TestProbeResultsRoute(t *testing.T) {
	e, regs, target := probeEnv(t)
	self := e.node.NodeID()
	for _, secret := range []string{readerSecret, registrarSecret, instanceSecret} {
		r := e.call(t, http.MethodPost, "/v1/internal/probe-results", secret, probeReport(self, target))
		wantError(t, r, http.StatusForbidden, wire.CodeDenied, "probe results")
	}
	r := e.call(t, http.MethodPost, "/v1/internal/probe-results", adminSecret, `{"results": []}`)
	wantError(t, r, http.StatusBadRequest, wire.CodeInvalid, "observer")

	r = e.call(t, http.MethodPost, "/v1/internal/probe-results", proberN1Secret, probeReport(self, target))
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[wire.ProbeReply](t, r); got.Accepted != 1 || got.Discarded != 0 || !slices.Equal(got.Live, []string{self}) {
		t.Fatalf("reply %+v, want 1 accepted and live [%s]", got, self)
	}
	// A node the target is not assigned to is not heard.
	r = e.call(t, http.MethodPost, "/v1/internal/probe-results", adminSecret, probeReport("intruder", target))
	if got := decodeAs[wire.ProbeReply](t, r); got.Accepted != 0 || got.Discarded != 1 {
		t.Fatalf("reply to an unassigned observer %+v, want 1 discarded", got)
	}
	if v := e.metric(t, "cairn_health_evidence_discarded_total", map[string]string{"reason": "unassigned"}); v != 1 {
		t.Fatalf("discarded{unassigned} = %v, want 1", v)
	}
	ev, _ := e.health.Evidence("shop/pay/p-1", regs["p-1"].Incarnation)
	if len(ev) != 1 || ev[0].Observer != self || ev[0].Class != "probe" {
		t.Fatalf("evidence %+v, want one probe result from %s", ev, self)
	}
}

func mapsEqual(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestProbeResultsAttributedByToken: a prober token reports as the node it
// names and as no other; a refused report leaves nothing behind. An admin
// may report as any observer.
func TestProbeResultsAttributedByToken(t *testing.T) {
	e, regs, target := probeEnv(t)
	post := func(secret, body string) reply {
		t.Helper()
		return e.call(t, http.MethodPost, "/v1/internal/probe-results", secret, body)
	}
	evidence := func() []wire.ClassEvidence {
		ev, _ := e.health.Evidence("shop/pay/p-1", regs["p-1"].Incarnation)
		return ev
	}
	discarded := func() float64 {
		return e.metric(t, "cairn_health_evidence_discarded_total", map[string]string{"reason": "unassigned"}) +
			e.metric(t, "cairn_health_evidence_discarded_total", map[string]string{"reason": "malformed"})
	}

	// Refusals first, while there is no evidence to hide a leak.
	for _, c := range []struct {
		name, secret, body string
		status             int
		code               string
		mentions           []string
	}{
		{"another node's token as n1", proberN2Secret, probeReport("n1", target), http.StatusForbidden, wire.CodeDenied,
			[]string{"prober token of node n2", "may not report as n1"}},
		{"this node's token as another", proberN1Secret, probeReport("n2", target), http.StatusForbidden, wire.CodeDenied,
			[]string{"prober token of node n1", "may not report as n2"}},
		{"a prober token without node as n1", proberSecret, probeReport("n1", target), http.StatusForbidden, wire.CodeDenied,
			[]string{"names no node", "node:"}},
		{"a prober token without node, no observer", proberSecret, probeReport("", target), http.StatusForbidden, wire.CodeDenied,
			[]string{"names no node"}},
		{"a reader token", readerSecret, probeReport("n1", target), http.StatusForbidden, wire.CodeDenied,
			[]string{"reader token may not send probe results"}},
		{"an observer that is no node id", proberN1Secret, probeReport("N1!", target), http.StatusBadRequest, wire.CodeInvalid,
			[]string{"observer", "DNS label"}},
		{"an admin naming no observer", adminSecret, probeReport("", target), http.StatusBadRequest, wire.CodeInvalid,
			[]string{"observer", "required"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := discarded()
			wantError(t, post(c.secret, c.body), c.status, c.code, c.mentions...)
			if ev := evidence(); len(ev) != 0 {
				t.Fatalf("a refused report left evidence: %+v", ev)
			}
			if d := discarded(); d != before {
				t.Fatalf("a refused report reached the evaluator: discarded went from %v to %v", before, d)
			}
		})
	}

	// A report naming no observer is the token's node's: n2's is heard as
	// n2 (not assigned p-1 here, so discarded), never as n1.
	r := post(proberN2Secret, probeReport("", target))
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[wire.ProbeReply](t, r); got.Accepted != 0 || got.Discarded != 1 {
		t.Fatalf("n2's report without observer: %+v, want it discarded as n2's (unassigned)", got)
	}
	if ev := evidence(); len(ev) != 0 {
		t.Fatalf("n2's report became evidence about a target of n1: %+v", ev)
	}
	r = post(proberN1Secret, probeReport("", target))
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[wire.ProbeReply](t, r); got.Accepted != 1 {
		t.Fatalf("n1's report without observer: %+v, want it accepted as n1's", got)
	}
	if ev := evidence(); len(ev) != 1 || ev[0].Observer != "n1" || ev[0].Class != "probe" {
		t.Fatalf("evidence %+v, want one probe result observed by n1", ev)
	}
	// Naming its own node is the same.
	r = post(proberN1Secret, probeReport("n1", target))
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[wire.ProbeReply](t, r); got.Accepted != 1 {
		t.Fatalf("n1's report as n1: %+v, want it accepted", got)
	}

	// An admin speaks for any observer.
	r = post(adminSecret, probeReport("n1", target))
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[wire.ProbeReply](t, r); got.Accepted != 1 {
		t.Fatalf("an admin's report as n1: %+v, want it accepted", got)
	}
}

// TestForwardedOutcomesRoute: only a server (a prober token that names
// its node, or an admin) forwards its xDS subscribers' load reports; each
// report's outcomes are taken as its xds: observer's caller: xds:NAME is
// NAME (wire.Caller).
func TestForwardedOutcomesRoute(t *testing.T) {
	e, regs, _ := probeEnv(t)
	inc := regs["p-1"].Incarnation
	body := func(observer string) string {
		return mustJSON(map[string]any{"reports": []map[string]any{
			{"observer": observer, "endpoints": []map[string]any{outcome("p-1", inc, 9, 1, 0)}}}})
	}
	for _, secret := range []string{readerSecret, registrarSecret, instanceSecret} {
		r := e.call(t, http.MethodPost, "/v1/internal/outcomes", secret, body("xds:envoy-1"))
		wantError(t, r, http.StatusForbidden, wire.CodeDenied, "forward xDS outcomes")
	}
	r := e.call(t, http.MethodPost, "/v1/internal/outcomes", proberN1Secret, body("envoy-1"))
	wantError(t, r, http.StatusBadRequest, wire.CodeInvalid, "reports[0].observer")

	r = e.call(t, http.MethodPost, "/v1/internal/outcomes", proberN1Secret, body("xds:envoy-1"))
	wantStatus(t, r, http.StatusAccepted)
	if got := decodeAs[wire.OutcomeReply](t, r); got.Accepted != 1 || len(got.Discarded) != 0 {
		t.Fatalf("reply %+v, want 1 accepted", got)
	}
	ev, _ := e.health.Evidence("shop/pay/p-1", inc)
	if !slices.ContainsFunc(ev, func(x wire.ClassEvidence) bool { return x.Class == "outcome" && x.Observer == "envoy-1" }) {
		t.Fatalf("p-1 evidence %+v, want an outcome window from the caller envoy-1", ev)
	}
}
