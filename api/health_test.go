package api_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/acl"
	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/health"
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
func healthEnv(t *testing.T, o options) (*env, *clock, map[string]api.Registered) {
	t.Helper()
	clk := &clock{t: time.Now()}
	o.health, o.clock = true, clk
	e := newEnv(t, o)
	tok := ""
	if o.acl.Enabled {
		tok = adminSecret
	}
	e.apply(t, tok, payYAML)
	regs := map[string]api.Registered{}
	for _, id := range []string{"p-1", "p-2", "p-3"} {
		body := map[string]any{"instance_id": id, "addresses": []string{"10.0.1." + id[2:]}, "ports": map[string]int{"http": 8080}}
		if id == "p-2" {
			body["lifecycle"] = "starting"
		}
		r := e.call(t, http.MethodPost, svcPath("shop", "pay")+"/instances", tok, mustJSON(body))
		wantStatus(t, r, http.StatusCreated)
		regs[id] = decodeAs[api.Registered](t, r)
	}
	e.tick(t)
	return e, clk, regs
}

func endpointsOf(t *testing.T, e *env, token string) map[string]api.Endpoint {
	t.Helper()
	r := e.call(t, http.MethodGet, svcPath("shop", "pay")+"/endpoints", token, "")
	wantStatus(t, r, http.StatusOK)
	out := map[string]api.Endpoint{}
	for _, ep := range decodeAs[[]api.Endpoint](t, r) {
		out[ep.InstanceID] = ep
	}
	return out
}

func TestOutcomesRefuseBadInput(t *testing.T) {
	e, _, regs := healthEnv(t, options{})
	inc := regs["p-1"].Incarnation
	many := make([]map[string]any, health.MaxOutcomeEndpoints+1)
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
			wantError(t, r, http.StatusBadRequest, api.CodeInvalid, c.mentions...)
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
	wantError(t, r, http.StatusServiceUnavailable, api.CodeNoLeader, "no health evaluator")
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
	got := decodeAs[health.OutcomeReply](t, r)
	want := map[string]int{"not_served": 1, "stale_incarnation": 1, "unknown_endpoint": 1}
	if got.Accepted != 1 || !mapsEqual(got.Discarded, want) {
		t.Fatalf("reply %+v, want 1 accepted and discarded %v", got, want)
	}
	r = e.call(t, http.MethodPost, "/v1/outcomes", "", outcomesBody(outcome("p-3", regs["p-3"].Incarnation, 0, 0, 0)))
	if got := decodeAs[health.OutcomeReply](t, r); got.Accepted != 0 || got.Discarded["no_calls"] != 1 {
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

// Failing outcome windows withdraw an instance after withdraw_after of
// them, and the endpoints view shows the verdict, its reason and its
// evidence; the audit trail has the transition.
func TestOutcomesWithdraw(t *testing.T) {
	e, clk, regs := healthEnv(t, options{})
	inc := regs["p-1"].Incarnation
	eps := endpointsOf(t, e, "")
	if p1 := eps["p-1"]; !p1.Eligible || p1.Verdict != "unknown" || p1.Weight == 0 || !slices.Contains(p1.Flags, "eligible") {
		t.Fatalf("before any evidence p-1 is %+v, want unknown and eligible", p1)
	}
	if p2 := eps["p-2"]; p2.Eligible || p2.Weight != 0 {
		t.Fatalf("starting p-2 is %+v, want not eligible", p2)
	}
	for i := range 3 {
		r := e.call(t, http.MethodPost, "/v1/outcomes", "", outcomesBody(outcome("p-1", inc, 1, 7, 2)))
		wantStatus(t, r, http.StatusAccepted)
		// Evidence younger than one interval waits for the next round.
		clk.Advance(1100 * time.Millisecond)
		e.tick(t)
		if p1 := endpointsOf(t, e, "")["p-1"]; p1.Eligible != (i < 2) {
			t.Fatalf("after %d failing windows p-1 is eligible=%v (%v), want withdrawn after 3", i+1, p1.Eligible, p1.Reasons)
		}
	}
	p1 := endpointsOf(t, e, "")["p-1"]
	if p1.Verdict != "unhealthy" || p1.Weight != 0 || len(p1.Reasons) == 0 || !strings.Contains(p1.Reasons[0], "outcome failing") {
		t.Fatalf("p-1 is %+v, want unhealthy with an outcome reason", p1)
	}
	if p1.VerdictEvidence == nil || p1.VerdictEvidence.Class != "outcome" || p1.VerdictEvidence.Observer != "anonymous" {
		t.Fatalf("p-1's verdict evidence %+v, want the outcome window from anonymous", p1.VerdictEvidence)
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
	r := e.call(t, http.MethodGet, "/v1/services", "", "")
	for _, s := range decodeAs[[]api.ServiceSummary](t, r) {
		if s.Name == "pay" && (s.Instances != 3 || s.Eligible != 1) {
			t.Fatalf("services summary %+v, want 3 instances and 1 eligible (p-3)", s)
		}
	}
}

func TestOutcomesScopes(t *testing.T) {
	e, _, regs := healthEnv(t, options{acl: acl.Config{Enabled: true, Tokens: append(scopeTokens(),
		acl.Token{Secret: "reader-other-0123456789abcdefg", Scope: acl.Reader, Namespaces: []string{"other"}})}})
	body := outcomesBody(outcome("p-1", regs["p-1"].Incarnation, 3, 0, 0))
	for _, c := range []struct {
		secret string
		status int
	}{
		{adminSecret, http.StatusAccepted},
		{registrarSecret, http.StatusAccepted},
		{readerSecret, http.StatusAccepted},
		{proberSecret, http.StatusAccepted},
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
	want := []string{identity(acl.Admin, adminSecret), identity(acl.Prober, proberSecret),
		identity(acl.Reader, readerSecret), identity(acl.Registrar, registrarSecret)}
	slices.Sort(want)
	if !slices.Equal(who, want) {
		t.Fatalf("outcome observers %v, want %v", who, want)
	}
}

func TestProbeResultsRoute(t *testing.T) {
	e, _, regs := healthEnv(t, options{acl: acl.Config{Enabled: true, Tokens: scopeTokens()}})
	self := e.node.NodeID()
	target := health.TargetID(regs["p-1"].Key(), regs["p-1"].Incarnation)
	rep := func(observer string) string {
		return mustJSON(health.ProbeReport{Observer: observer, Seq: 1, Results: []health.ProbeResult{
			{Target: target, At: time.Now().Add(-time.Second), OK: true, Code: 200}}})
	}
	for _, secret := range []string{readerSecret, registrarSecret, instanceSecret} {
		r := e.call(t, http.MethodPost, "/v1/internal/probe-results", secret, rep(self))
		wantError(t, r, http.StatusForbidden, api.CodeDenied, "probe results")
	}
	r := e.call(t, http.MethodPost, "/v1/internal/probe-results", proberSecret, `{"results": []}`)
	wantError(t, r, http.StatusBadRequest, api.CodeInvalid, "observer")

	r = e.call(t, http.MethodPost, "/v1/internal/probe-results", proberSecret, rep(self))
	wantStatus(t, r, http.StatusOK)
	if got := decodeAs[health.ProbeReply](t, r); got.Accepted != 1 || got.Discarded != 0 || !slices.Equal(got.Live, []string{self}) {
		t.Fatalf("reply %+v, want 1 accepted and live [%s]", got, self)
	}
	// A node the target is not assigned to is not heard.
	r = e.call(t, http.MethodPost, "/v1/internal/probe-results", adminSecret, rep("intruder"))
	if got := decodeAs[health.ProbeReply](t, r); got.Accepted != 0 || got.Discarded != 1 {
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
