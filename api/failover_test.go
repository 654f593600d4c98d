package api_test

import (
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// regionB is region b's instances of shop/web as this node's view of b
// holds them (package peer in a server; set by the test here).
type regionB struct {
	mu  sync.Mutex
	gen uint64
	ins []status.Instance
}

func (r *regionB) Follow([]string)          {}
func (r *regionB) Changed() <-chan struct{} { return nil }
func (r *regionB) Instances() (uint64, func(ns, svc string) []status.Instance) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ins := r.ins
	return r.gen, func(ns, svc string) []status.Instance {
		if ns+"/"+svc == "shop/web" {
			return ins
		}
		return nil
	}
}

// set gives b n instances of shop/web, up of them eligible.
func (r *regionB) set(n, up int, stale bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ins = nil
	for i := range n {
		in := status.Instance{ID: "b" + string(rune('0'+i)), Incarnation: 7, Region: "b", Zone: "b-1",
			Addresses: []string{"10.2.0." + string(rune('1'+i))}, Verdict: status.Healthy, Lifecycle: status.Ready, BaseWeight: 100}
		if i < up {
			in.Flags, in.Weight = status.Eligible, 100
		}
		if stale {
			in.Flags |= status.PeerStale
		}
		r.ins = append(r.ins, in)
	}
	r.gen++
}

func (r *regionB) regions() []wire.PeerRegion {
	return []wire.PeerRegion{{Region: "b", Connected: true}}
}

// A failover is a region's own decision, checked against the other
// region's capacity as this node's view of it holds it: refused
// (409, audited) when short or stale, unless forced; started, the
// region's own instances go last; undone, they return.
func TestFailover(t *testing.T) {
	t.Parallel()
	b := &regionB{}
	b.set(2, 1, false)
	// Refusals are audited at most one a second per identity.
	clk := &clock{t: time.Now()}
	e, _ := newACLEnv(t, options{now: clk.Now, region: "a", health: true, peers: b, peerRegions: b.regions}) // shop/web i-1, i-2 in no region
	for i, id := range []string{"a1", "a2", "a3", "a4"} {
		r := e.call(t, http.MethodPost, svcPath("shop", "web")+"/instances", registrarSecret,
			mustJSON(map[string]any{"instance_id": id, "addresses": []string{"10.1.0." + string(rune('1'+i))}, "ports": map[string]int{"http": 8080},
				"region": "a", "zone": "a-1"}))
		wantStatus(t, r, http.StatusCreated)
	}
	e.tick(t)
	const path = "/v1/regions/failover"
	// Fields first: the region asked must be the one failing over, and
	// the other one a region it follows.
	wantError(t, e.call(t, http.MethodPost, path, adminSecret, `{"from": "b", "to": "a"}`), http.StatusBadRequest, wire.CodeInvalid, "from", `this server is in region "a"`)
	wantError(t, e.call(t, http.MethodPost, path, adminSecret, `{"from": "a", "to": "c"}`), http.StatusBadRequest, wire.CodeInvalid, "to", "--peer-region")
	wantError(t, e.call(t, http.MethodPost, path, adminSecret, `{"from": "a", "to": "a"}`), http.StatusBadRequest, wire.CodeInvalid, "to")
	wantError(t, e.call(t, http.MethodPost, path, registrarSecret, `{"from": "a", "to": "b"}`), http.StatusForbidden, wire.CodeDenied, "admin")
	wantError(t, e.call(t, http.MethodPost, "/v1/evacuations", adminSecret, `{"region": "a", "zone": "", "to": "b", "capacity": "plenty"}`),
		http.StatusBadRequest, wire.CodeInvalid, "/v1/regions/failover")
	// b has 1 eligible of shop/web; a's 4 ready need 2 there.
	clk.Advance(time.Second)
	before := e.snapshot(t)
	failWeb := `{"from": "a", "to": "b", "namespace": "shop", "service": "web", "reason": "a is on fire"}`
	wantError(t, e.call(t, http.MethodPost, path, registrarSecret, failWeb), http.StatusConflict, wire.CodeCapacity,
		"shop/web: region b has 1 eligible instance(s) and needs 2", "--force")
	if !slices.ContainsFunc(e.node.Events("shop", "web", 0), func(ev wire.Event) bool {
		return ev.Kind == wire.EventRefused && strings.Contains(ev.Reason, "region b has 1")
	}) {
		t.Fatal("the refusal is not in the audit trail")
	}
	e.wantDataUnchanged(t, before, "a refused failover")
	// A stale view of b is refused however many it shows.
	b.set(3, 3, true)
	e.tick(t)
	wantError(t, e.call(t, http.MethodPost, path, registrarSecret, failWeb), http.StatusConflict, wire.CodeCapacity, "stale")
	// Fresh and enough: started; a's own go last (a caller in a gets
	// b first), and the trail says what the check found.
	b.set(3, 2, false)
	e.tick(t)
	r := e.call(t, http.MethodPost, path, registrarSecret, failWeb)
	wantStatus(t, r, http.StatusCreated)
	ev := decodeAs[wire.EvacuationView](t, r)
	if ev.To != "b" || ev.Region != "a" || ev.State != "evacuated" || ev.Forced || !strings.Contains(ev.Capacity, "2 eligible for 2 needed") {
		t.Fatalf("failover %+v", ev)
	}
	e.tick(t)
	v := decodeAs[wire.ServiceDetail](t, e.call(t, http.MethodGet, svcPath("shop", "web"), readerSecret, ""))
	tiers := map[string]int{}
	for _, ep := range v.View.Endpoints {
		tiers[ep.InstanceID] = *ep.Tier
	}
	if tiers["a1"] != status.TierEvacuated || tiers["b0"] != status.TierOther {
		t.Fatalf("tiers %v, want a's last (%d) and b's %d", tiers, status.TierEvacuated, status.TierOther)
	}
	if !slices.ContainsFunc(e.node.Events("shop", "web", 0), func(ev wire.Event) bool {
		return ev.Kind == wire.EventEvacuated && strings.Contains(ev.Reason, "failover to b") && strings.Contains(ev.Reason, "a is on fire") &&
			strings.Contains(ev.Reason, "capacity")
	}) {
		t.Fatal("the failover is not in the audit trail with its reason and capacity")
	}
	// A draining instance of b's carries nothing.
	b.set(3, 2, false)
	b.mu.Lock()
	b.ins[1].Lifecycle = status.Draining
	b.gen++
	b.mu.Unlock()
	e.tick(t)
	clk.Advance(time.Second)
	wantError(t, e.call(t, http.MethodPost, path, adminSecret, `{"from": "a", "to": "b"}`), http.StatusConflict, wire.CodeCapacity,
		"region b has 1 eligible instance(s) and needs 2")
	// Forced past a short capacity: started, and the trail says so.
	b.set(3, 1, false)
	e.tick(t)
	r = e.call(t, http.MethodPost, path, adminSecret, `{"from": "a", "to": "b", "force": true}`)
	wantStatus(t, r, http.StatusCreated)
	if ev := decodeAs[wire.EvacuationView](t, r); !ev.Forced || !strings.Contains(ev.Capacity, "forced past the capacity check") {
		t.Fatalf("forced failover %+v", ev)
	}
	// Undone: a's own return over shift_back.
	r = e.call(t, http.MethodPost, path, registrarSecret, `{"from": "a", "to": "b", "namespace": "shop", "service": "web", "undo": true}`)
	wantStatus(t, r, http.StatusOK)
	if ev := decodeAs[wire.EvacuationView](t, r); ev.State != "returning" {
		t.Fatalf("undone %+v", ev)
	}
	regions := decodeAs[wire.Regions](t, e.call(t, http.MethodGet, "/v1/regions", readerSecret, ""))
	if regions.Region != "a" || len(regions.Peers) != 1 || regions.Peers[0].Region != "b" {
		t.Fatalf("regions %+v", regions)
	}
}
