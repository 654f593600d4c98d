package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// registerIn registers id of shop/web in zone with the registrar token.
func (e *env) registerIn(t *testing.T, id, addr, zone string) {
	t.Helper()
	r := e.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", registrarSecret,
		mustJSON(map[string]any{"instance_id": id, "addresses": []string{addr}, "ports": map[string]int{"http": 8080}, "zone": zone}))
	if r.Status != http.StatusCreated {
		t.Fatalf("%s; want 201", r)
	}
}

func TestEvacuations(t *testing.T) {
	t.Parallel()
	// Refusals are audited at most one a second per identity.
	clk := &clock{t: time.Now()}
	e, _ := newACLEnv(t, options{now: clk.Now}) // shop/web i-1, i-2 in no zone
	e.registerIn(t, "a1", "10.0.1.1", "a")
	e.registerIn(t, "a2", "10.0.1.2", "a")
	// Scopes: a zone of every service is an admin's; of one service,
	// its namespace's registrar's too; a reader's never.
	wantError(t, e.call(t, http.MethodPost, "/v1/evacuations", registrarSecret, `{"zone": "a"}`), http.StatusForbidden, wire.CodeDenied, "admin")
	wantError(t, e.call(t, http.MethodPost, "/v1/evacuations", registrarSecret, `{"zone": "a", "namespace": "other", "service": "web"}`),
		http.StatusForbidden, wire.CodeDenied)
	wantError(t, e.call(t, http.MethodPost, "/v1/evacuations", readerSecret, `{"zone": "a", "namespace": "shop", "service": "web"}`),
		http.StatusForbidden, wire.CodeDenied)
	wantError(t, e.call(t, http.MethodPost, "/v1/evacuations", adminSecret, `{"zone": "A!"}`), http.StatusBadRequest, wire.CodeInvalid, "zone")
	wantError(t, e.call(t, http.MethodPost, "/v1/evacuations", adminSecret, `{"zone": "a", "expires": "200h"}`), http.StatusBadRequest, wire.CodeInvalid, "expires")
	wantError(t, e.call(t, http.MethodPost, "/v1/evacuations", adminSecret, `{"zone": "b", "undo": true}`), http.StatusNotFound, wire.CodeNotFound, "not evacuated")

	// An evacuation is a voluntary disruption: a1 and a2 are half of
	// shop/web, past the default budget (25% of 4 rounds up to 1).
	clk.Advance(time.Second)
	before := e.snapshot(t)
	evacuateA := `{"zone": "a", "namespace": "shop", "service": "web", "reason": "rack swap", "expires": "2h"}`
	wantError(t, e.call(t, http.MethodPost, "/v1/evacuations", registrarSecret, evacuateA), http.StatusTooManyRequests, wire.CodeBudget,
		"shop/web: its 2 available instance(s) in the zone would make 2 unavailable", "max_unavailable 25% (the default) = 1 of 4 instances", "--force")
	if evs := e.node.Events("shop", "web", 0); evs[len(evs)-1].Kind != wire.EventRefused || !strings.Contains(evs[len(evs)-1].Reason, "disruption budget") {
		t.Fatalf("budget refusal not audited: %+v", evs[len(evs)-1])
	} else if r := evs[len(evs)-1].Reason; strings.Contains(r, "store:") {
		t.Errorf("the audited refusal carries the store's sentinel: %q", r)
	}
	e.wantDataUnchanged(t, before, "a refused evacuation")
	e.apply(t, adminSecret, strings.Replace(webYAML, "drain_window: 1h}", "drain_window: 1h, max_unavailable: 50%}", 1))

	r := e.call(t, http.MethodPost, "/v1/evacuations", registrarSecret, evacuateA)
	wantStatus(t, r, http.StatusCreated)
	ev := decodeAs[wire.EvacuationView](t, r)
	if ev.State != "evacuated" || ev.Reason != "rack swap" || ev.ExpiresIn.D() < 2*time.Hour-time.Minute || ev.ExpiresIn.D() > 2*time.Hour || ev.Actor != identity("registrar", registrarSecret) {
		t.Fatalf("evacuation %+v", ev)
	}
	list := decodeAs[[]wire.EvacuationView](t, e.call(t, http.MethodGet, "/v1/evacuations", readerSecret, ""))
	if len(list) != 1 || list[0].ID != ev.ID {
		t.Fatalf("list %+v", list)
	}
	// The service's view names it; its instances stay registered.
	d := decodeAs[wire.ServiceDetail](t, e.call(t, http.MethodGet, svcPath("shop", "web"), readerSecret, ""))
	if len(d.View.Evacuations) != 1 || len(d.View.Endpoints) != 4 {
		t.Fatalf("view: %d evacuations, %d endpoints", len(d.View.Evacuations), len(d.View.Endpoints))
	}
	// A zone-wide evacuation of the same zone: i-1 and i-2 are
	// elsewhere. Then b's only instance: evacuating it too would leave
	// i-1 and i-2 of five, below 0.5, and is refused.
	r = e.call(t, http.MethodPost, "/v1/evacuations", adminSecret, `{"zone": "a"}`)
	wantStatus(t, r, http.StatusCreated)
	e.registerIn(t, "b1", "10.0.2.1", "b")
	clk.Advance(time.Second)
	before = e.snapshot(t)
	wantError(t, e.call(t, http.MethodPost, "/v1/evacuations", adminSecret, `{"zone": "b", "namespace": "shop", "service": "web"}`),
		http.StatusConflict, wire.CodeCapacity, "shop/web", "keep 2", "needs 3", "--force")
	evs := e.node.Events("shop", "web", 0)
	if last := evs[len(evs)-1]; last.Kind != wire.EventRefused || !strings.Contains(last.Reason, "needs") {
		t.Fatalf("refusal not audited: %+v", last)
	}
	if after := e.snapshot(t); len(after.Instances) != len(before.Instances) {
		t.Fatal("a refused evacuation changed the instances")
	}
	r = e.call(t, http.MethodPost, "/v1/evacuations", adminSecret, `{"zone": "b", "namespace": "shop", "service": "web", "force": true}`)
	wantStatus(t, r, http.StatusCreated)
	if ev := decodeAs[wire.EvacuationView](t, r); !ev.Forced || !strings.Contains(ev.Note, "capacity") {
		t.Fatalf("forced %+v", ev)
	}
	// Undo: the zone returns.
	r = e.call(t, http.MethodPost, "/v1/evacuations", registrarSecret, `{"zone": "a", "namespace": "shop", "service": "web", "undo": true}`)
	wantStatus(t, r, http.StatusOK)
	if ev := decodeAs[wire.EvacuationView](t, r); ev.State != "returning" || ev.EndedBy != identity("registrar", registrarSecret) {
		t.Fatalf("undone %+v", ev)
	}
	kinds := []wire.EventKind{}
	zoneWide := false
	for _, ev := range e.node.Events("shop", "web", 0) {
		kinds = append(kinds, ev.Kind)
		zoneWide = zoneWide || ev.Kind == wire.EventEvacuated && ev.Namespace == ""
	}
	if !zoneWide {
		t.Error("the zone-wide evacuation is not in shop/web's audit trail")
	}
	for _, k := range []wire.EventKind{wire.EventEvacuated, wire.EventEvacuationEnded} {
		if !slices.Contains(kinds, k) {
			t.Errorf("no %s event in %v", k, kinds)
		}
	}
}
