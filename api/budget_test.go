package api_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/wire"
)

const budgetYAML = `namespace: shop
name: cart
ports: [{name: http, number: 8080}]
policy: {drain_window: 1h, max_unavailable: 1}
`

// TestDisruptionBudget: a drain past the budget is 429
// disruption_budget, names the budget and what holds it, changes no
// instance and is in the audit trail as a refusal; the service's detail
// shows the budget in use; force goes through and is audited.
func TestDisruptionBudget(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	e.apply(t, "", budgetYAML)
	regs := map[string]wire.Registered{}
	for i := 1; i <= 3; i++ {
		id := fmt.Sprintf("c-%d", i)
		regs[id] = e.register(t, "", "shop", "cart", id, fmt.Sprintf("10.0.0.%d", i))
	}
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "cart", "c-1", "drain"), "", incBody(regs["c-1"].Incarnation)), http.StatusOK)

	before := e.snapshot(t)
	for _, verb := range []string{"drain", "deregister"} {
		wantError(t, e.call(t, http.MethodPost, instPath("shop", "cart", "c-2", verb), "", incBody(regs["c-2"].Incarnation)),
			http.StatusTooManyRequests, wire.CodeBudget,
			verb+" of shop/cart/c-2 refused: disruption budget max_unavailable 1 of 3 instances is used by c-1 (draining); --force overrides")
	}
	e.wantDataUnchanged(t, before, "drains past the budget")
	var refusals []wire.Event
	for _, ev := range e.node.Events("shop", "cart", 0) {
		if ev.Kind == wire.EventRefused {
			refusals = append(refusals, ev)
		}
	}
	if len(refusals) == 0 || refusals[0].Instance != "c-2" || refusals[0].Actor != "anonymous" ||
		!strings.HasPrefix(refusals[0].Reason, "drain of shop/cart/c-2 refused: disruption budget") ||
		strings.HasSuffix(refusals[0].Reason, "exhausted") {
		t.Errorf("refusals in the audit trail: %+v", refusals)
	}

	r := e.call(t, http.MethodGet, svcPath("shop", "cart"), "", "")
	d := decodeAs[wire.ServiceDetail](t, r)
	if b := d.Budget; b == nil || b.MaxUnavailable != "1" || b.Default || b.Instances != 3 || b.Limit != 1 || b.InUse != 1 ||
		len(b.Unavailable) != 1 || b.Unavailable[0] != (wire.Unavailable{InstanceID: "c-1", Incarnation: regs["c-1"].Incarnation, Why: "draining"}) {
		t.Errorf("disruption budget in the detail: %+v", d.Budget)
	}
	if !strings.Contains(string(r.Body), `"max_unavailable": 1,`) || !strings.Contains(string(r.Body), `"in_use": 1`) {
		t.Errorf("detail body: %s", r.Body)
	}

	wantError(t, e.call(t, http.MethodPost, instPath("shop", "cart", "c-2", "renew"), "",
		fmt.Sprintf(`{"incarnation": %d, "force": true}`, regs["c-2"].Incarnation)), http.StatusBadRequest, wire.CodeInvalid, "force")
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "cart", "c-2", "drain"), "",
		fmt.Sprintf(`{"incarnation": %d, "force": true}`, regs["c-2"].Incarnation)), http.StatusOK)
	ev := e.node.Events("shop", "cart", 2)
	if len(ev) != 2 || ev[0].Kind != wire.EventBudgetOverridden || ev[0].Actor != "anonymous" ||
		!strings.Contains(ev[0].Reason, "drain of shop/cart/c-2 forced past disruption budget max_unavailable 1 of 3 instances") {
		t.Errorf("events after the forced drain: %+v", ev)
	}

	// The Go client: a 429 *Error, not retried; ForceDeregister goes.
	cl := e.client(t, "")
	_, err := cl.Deregister(t.Context(), wire.InstanceKey{Namespace: "shop", Service: "cart", ID: "c-3"}, regs["c-3"].Incarnation)
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Status != http.StatusTooManyRequests || ce.Code != wire.CodeBudget || client.IsRetryable(err) {
		t.Errorf("client deregister past the budget: %v", err)
	}
	if _, err := cl.ForceDeregister(t.Context(), wire.InstanceKey{Namespace: "shop", Service: "cart", ID: "c-3"}, regs["c-3"].Incarnation); err != nil {
		t.Errorf("ForceDeregister: %v", err)
	}
}

// TestDisruptionBudgetInvalid: a bad max_unavailable is refused naming
// the field and the rule, in YAML and JSON alike.
func TestDisruptionBudgetInvalid(t *testing.T) {
	t.Parallel()
	e := newEnv(t, options{})
	for _, body := range []string{
		strings.Replace(budgetYAML, "max_unavailable: 1", "max_unavailable: 120%", 1),
		`{"namespace": "shop", "name": "cart", "ports": [{"name": "http", "number": 8080}], "policy": {"max_unavailable": -2}}`,
		`{"namespace": "shop", "name": "cart", "ports": [{"name": "http", "number": 8080}], "policy": {"max_unavailable": "1.5"}}`,
	} {
		wantError(t, e.call(t, http.MethodPost, "/v1/apply", "", body), http.StatusBadRequest, wire.CodeInvalid,
			"policy.max_unavailable", "percentage")
	}
	if _, ok := e.node.Service("shop", "cart"); ok {
		t.Error("a refused definition was stored")
	}
}

// TestSelfDrainPastTheBudget: an instance draining itself is not judged
// against the budget (it leaves anyway; refused, it would leave
// undrained), and counts toward it afterwards.
func TestSelfDrainPastTheBudget(t *testing.T) {
	t.Parallel()
	e, regs := newACLEnv(t, options{})
	e.apply(t, adminSecret, "namespace: shop\nname: web\nports: [{name: http, number: 8080}, {name: admin, number: 9090}]\n"+
		"policy: {drain_window: 1h, max_unavailable: 0}\n")
	wantError(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-2", "drain"), registrarSecret, incBody(regs["i-2"].Incarnation)),
		http.StatusTooManyRequests, wire.CodeBudget)
	wantStatus(t, e.call(t, http.MethodPost, instPath("shop", "web", "i-1", "drain"), instanceSecret, incBody(regs["i-1"].Incarnation)), http.StatusOK)
	d := decodeAs[wire.ServiceDetail](t, e.call(t, http.MethodGet, svcPath("shop", "web"), adminSecret, ""))
	if b := d.Budget; b == nil || b.InUse != 1 {
		t.Fatalf("budget after the self-drain: %+v", d.Budget)
	}
	for _, ev := range e.node.Events("shop", "web", 0) {
		if ev.Kind == wire.EventBudgetOverridden {
			t.Fatalf("a self-drain recorded as an override: %+v", ev)
		}
	}
}
