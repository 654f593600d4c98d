package api_test

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/wire"
)

// A service in slow start: a new instance's published weight rises from
// 10% of its base weight over 30 s.
const slowYAML = `namespace: shop
name: slow
ports: [{name: http, number: 8080}]
capability: {readiness: none}
policy: {drain_window: 1h, lease_ttl: 1h, slow_start: 30s}
`

// tableRow is what a status table serves of one instance, as the
// endpoints view spells it.
type tableRow struct {
	Verdict  string
	Eligible bool
	Weight   int
	Flags    string
	Tier     int
	Version  uint64
}

// servedRows reads the node's current status table, the one its DNS and
// xDS servers answer from, for the instances of shop/slow.
func servedRows(t *testing.T, e *env, ids ...string) map[string]tableRow {
	t.Helper()
	tb := e.table.Acquire()
	if tb == nil {
		t.Fatal("no status table published")
	}
	defer tb.Release()
	loc := tb.LocalityOf("r1", "z1")
	out := map[string]tableRow{}
	for _, id := range ids {
		key := "shop/slow/" + id
		slot, ok := tb.Directory().SlotOfKey(key)
		if !ok {
			continue
		}
		ent, ok := tb.Lookup(int(slot), status.KeyHash(key))
		if !ok {
			continue
		}
		out[id] = tableRow{Verdict: ent.Verdict.String(), Eligible: ent.Flags.Has(status.Eligible), Weight: int(ent.Weight),
			Flags: ent.Flags.String(), Tier: status.TierOf(loc, ent), Version: tb.Version()}
	}
	return out
}

// viewRows is GET …/endpoints of shop/slow in the same terms.
func viewRows(t *testing.T, e *env) (map[string]tableRow, map[string]wire.Endpoint) {
	t.Helper()
	r := e.call(t, http.MethodGet, svcPath("shop", "slow")+"/endpoints", "", "")
	wantStatus(t, r, http.StatusOK)
	rows, eps := map[string]tableRow{}, map[string]wire.Endpoint{}
	for _, ep := range decodeAs[[]wire.Endpoint](t, r) {
		eps[ep.InstanceID] = ep
		if !ep.InTable {
			continue
		}
		flags := strings.Join(ep.Flags, "|")
		if flags == "" {
			flags = "0"
		}
		tier := -1
		if ep.Tier != nil {
			tier = *ep.Tier
		}
		rows[ep.InstanceID] = tableRow{Verdict: ep.Verdict.String(), Eligible: ep.Eligible, Weight: ep.Weight, Flags: flags, Tier: tier, Version: ep.TableVersion}
	}
	return rows, eps
}

// TestEndpointsShowWhatTheTableServes: the endpoints view is what the
// status table DNS and xDS answer from serves, row for row and at one
// table version, with the evaluator's committed verdict beside it
// (issue 26 item 7). Right after a registration the table does not hold
// the instance yet: the view says not served (it said eligible, weight
// 100, while DNS had nothing of it). In slow start the weight the
// evaluator would give now runs ahead of the table's until the next
// build, and the view shows the table's. Tiers are relative to this
// node's locality.
func TestEndpointsShowWhatTheTableServes(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	e := newEnv(t, options{health: true, clock: clk, now: clk.Now, region: "r1", zone: "z1"})
	e.apply(t, "", slowYAML)
	e.tick(t) // a table without shop/slow's instances
	places := map[string][2]string{"s-1": {"r1", "z1"}, "s-2": {"r1", "z2"}, "s-3": {"r2", "z3"}}
	ids := []string{"s-1", "s-2", "s-3"}
	for i, id := range ids {
		body := map[string]any{"instance_id": id, "addresses": []string{fmt.Sprintf("10.0.2.%d", i+1)}, "ports": map[string]int{"http": 8080},
			"region": places[id][0], "zone": places[id][1]}
		wantStatus(t, e.call(t, http.MethodPost, svcPath("shop", "slow")+"/instances", "", mustJSON(body)), http.StatusCreated)
	}

	t.Run("registered, not yet in the table: not served", func(t *testing.T) {
		if got := servedRows(t, e, ids...); len(got) != 0 {
			t.Fatalf("the table already holds %v", got)
		}
		_, eps := viewRows(t, e)
		for _, id := range ids {
			ep := eps[id]
			if ep.InTable || ep.Eligible || ep.Weight != 0 || ep.Tier != nil || ep.TableVersion == 0 ||
				len(ep.Reasons) != 1 || !strings.Contains(ep.Reasons[0], "not in this node's status table") {
				t.Errorf("%s: in_table %v, eligible %v, weight %d, tier %v, table %d, reasons %q; want not served (DNS has nothing of it), saying why",
					id, ep.InTable, ep.Eligible, ep.Weight, ep.Tier, ep.TableVersion, ep.Reasons)
			}
		}
	})

	check := func(t *testing.T, wantWeight int) {
		t.Helper()
		want := servedRows(t, e, ids...)
		got, eps := viewRows(t, e)
		if len(want) != 3 || !maps.Equal(got, want) {
			t.Fatalf("the endpoints view serves\n%v\nthe status table serves\n%v", got, want)
		}
		for i, id := range ids {
			ep := eps[id]
			if ep.Weight != wantWeight || ep.BaseWeight != 100 || !slices.Contains(ep.Flags, "slow_start") || !slices.Contains(ep.Reasons, "slow start") {
				t.Errorf("%s: weight %d of %d, flags %v, reasons %q; want %d of 100 in slow start", id, ep.Weight, ep.BaseWeight, ep.Flags, ep.Reasons, wantWeight)
			}
			if ep.Tier == nil || *ep.Tier != i {
				t.Errorf("%s in %v: tier %v; want %d for a caller in r1/z1", id, places[id], ep.Tier, i)
			}
			if ev := ep.Evaluator; ev == nil || ev.Verdict != ep.Verdict || !ev.Eligible {
				t.Errorf("%s: evaluator %+v; want its committed verdict %s, eligible, beside the table's", id, ev, ep.Verdict)
			}
		}
	}
	e.tick(t)
	t.Run("published: weight 10 of 100", func(t *testing.T) { check(t, 10) })

	clk.Advance(6 * time.Second)
	t.Run("6 s on, before the next build: still the table's 10", func(t *testing.T) { check(t, 10) })
	e.tick(t)
	t.Run("6 s on, built: 28", func(t *testing.T) { check(t, 28) })
}

// TestEndpointsShowTheTableKeptOnDisk: a restarted node serves DNS and
// xDS from the table it kept on disk until its replica catches up, and
// the endpoints view shows those rows, as served, though its store does
// not hold the instances yet; it used to show nothing.
func TestEndpointsShowTheTableKeptOnDisk(t *testing.T) {
	clk := &clock{t: time.Unix(1_700_000_000, 0)}
	before := newEnv(t, options{health: true, clock: clk, now: clk.Now})
	before.apply(t, "", slowYAML)
	body := map[string]any{"instance_id": "s-1", "addresses": []string{"10.0.2.1"}, "ports": map[string]int{"http": 8080}, "zone": "z1"}
	wantStatus(t, before.call(t, http.MethodPost, svcPath("shop", "slow")+"/instances", "", mustJSON(body)), http.StatusCreated)
	before.tick(t)
	tb := before.table.Acquire()
	kept := tablefile.Take(tb, clk.Now(), clk.Now())
	tb.Release()

	after := newEnv(t, options{health: true, clock: clk, now: clk.Now, restore: kept})
	after.apply(t, "", slowYAML) // the definition alone: the route needs it
	_, eps := viewRows(t, after)
	ep, ok := eps["s-1"]
	if !ok {
		t.Fatalf("the view %v does not show s-1, which the kept table serves", eps)
	}
	if !ep.InTable || !ep.Eligible || ep.Weight != 10 || ep.Zone != "z1" || !slices.Equal(ep.Addresses, []string{"10.0.2.1"}) ||
		ep.Ports["http"] != 8080 || len(ep.Reasons) == 0 || !strings.Contains(ep.Reasons[0], "kept on disk") {
		t.Errorf("s-1 from the kept table: %+v; want in the table, eligible, weight 10, z1, 10.0.2.1, http 8080, saying it is the kept table", ep)
	}
	// A consistent read answers for the store alone: the kept table's row
	// of an instance the store does not hold is not in it.
	for _, path := range []string{svcPath("shop", "slow") + "/endpoints?all=true&consistent=true", svcPath("shop", "slow") + "?consistent=true"} {
		r := after.call(t, http.MethodGet, path, "", "")
		wantStatus(t, r, http.StatusOK)
		var eps []wire.Endpoint
		if strings.Contains(path, "/endpoints") {
			eps = decodeAs[[]wire.Endpoint](t, r)
		} else {
			eps = decodeAs[wire.ServiceDetail](t, r).View.Endpoints
		}
		if len(eps) != 0 {
			t.Errorf("consistent read %s: %+v; want no endpoint (the store holds none)", path, eps)
		}
	}
}
