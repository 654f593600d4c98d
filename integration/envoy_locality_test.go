package integration

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestEnvoyLocalityTiers: cairn gives each Envoy its endpoints in
// priorities by topology tier, from the Envoy's own locality (SPEC §3,
// §4): its zone first, then the rest of its region, then other regions.
// An Envoy in zone-1 (the bootstrap's), instances in zone-1, zone-2
// (region local) and region far:
//
//   - zone-1 healthy: every request goes to zone-1.
//   - zone-1 below the overprovisioning threshold (one of three left):
//     zone-1's callers spill into zone-2 by the rule of SPEC §3, zone-1
//     keeping 1.4 × its healthy fraction of the load; region far, the next
//     tier, gets nothing while zone-2 can take the rest.
//   - every instance failing its probe: the guard publishes them all,
//     HEALTHY and flagged cairn.health_disregarded, and Envoy sends
//     requests to every one of them, no 503 of its own.
func TestEnvoyLocalityTiers(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	c := StartCluster(t, 1, "--dev")
	n := c.Nodes[0]
	ctx := ctxT(t, 3*time.Minute)
	// No slow start, so that every weight is the base weight, 100.
	applyDefinition(ctx, t, c, demoDefinition(t, "slow_start: 0s"))
	z1, z2, far := newUpstreams(t, "z1", 3), newUpstreams(t, "z2", 3), newUpstreams(t, "far", 2)
	registerUpstreams(ctx, t, c, z1, nil, nil)
	registerUpstreams(ctx, t, c, z2, func(int) string { return "zone-2" }, nil)
	registerUpstreams(ctx, t, c, far, func(int) string { return "far-a" }, func(r *wire.Registration) { r.Region = "far" })
	all := append(append(append([]*upstream(nil), z1...), z2...), far...)
	ids := map[string]*upstream{}
	for _, u := range all {
		ids[u.ID] = u
	}
	e := startEnvoy(t, c, EnvoyConfig{})

	// Zone-1 has capacity: its three take every request. Envoy holds
	// zone-1 at priority 0, zone-2 at 1, region far at 2.
	waitHosts(t, e, 30*time.Second, "all eight, in three priorities", func(hs []EnvoyHost) error {
		if err := hostsAre("", all...)(hs); err != nil {
			return err
		}
		return priorities(hs, map[*upstream]int{z1[0]: 0, z1[1]: 0, z1[2]: 0, z2[0]: 1, z2[1]: 1, z2[2]: 1, far[0]: 2, far[1]: 2})
	})
	by := share(ctx, t, e, 300)
	if got := sum(by, z1...); got != 300 {
		t.Errorf("zone-1 answered %d of 300 requests; want all, while zone-1 is healthy (all: %v)", got, by)
	}
	for _, u := range z1 {
		if by[u.ID] < 50 {
			t.Errorf("%s answered %d of 300; want about 100 (all: %v)", u.ID, by[u.ID], by)
		}
	}

	// Two of zone-1's three fail their probe and are withdrawn. Zone-1 is
	// left with a healthy fraction of 1/3: 1.4 × 1/3 ≈ 0.47 < 1, so by
	// SPEC §3 (Envoy's priority arithmetic with its overprovisioning
	// factor of 1.4) zone-1's callers keep 47% of their load there and
	// spill 53% into zone-2, which, healthy, can take it all: region far
	// gets nothing. Measured over 300 requests, within 0.06.
	z1[0].Ready.Store(false)
	z1[1].Ready.Store(false)
	withdrawnAt := time.Now()
	// cairn publishes the spill (Envoy, holding only zone-1's healthy
	// instance, would see its priority 0 fully healthy and never spill):
	// zone-1 and zone-2 together at priority 0, weighted 47:53, region
	// far at 1.
	waitHosts(t, e, 45*time.Second, "zone-1's two failing withdrawn", func(hs []EnvoyHost) error {
		if err := hostsAre("", z1[2], z2[0], z2[1], z2[2], far[0], far[1])(hs); err != nil {
			return err
		}
		return priorities(hs, map[*upstream]int{z1[2]: 0, z2[0]: 0, z2[1]: 0, z2[2]: 0, far[0]: 1, far[1]: 1})
	})
	t.Logf("two of zone-1 withdrawn from Envoy after %s", time.Since(withdrawnAt).Round(time.Millisecond))
	hs, err := e.Hosts(ctx, demoCluster)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Envoy holds:%s", hostLines(hs))
	by = share(ctx, t, e, 300)
	t.Logf("zone-1 below the threshold: %v", by)
	const keep, tol = 1.4 / 3, 0.06
	if got := float64(sum(by, z1[2])) / 300; math.Abs(got-keep) > tol {
		t.Errorf("zone-1's last healthy instance answered %.3f of the requests; want %.3f ± %.2f, the rest spilled to zone-2 (all: %v)", got, keep, tol, by)
	}
	if got := float64(sum(by, z2...)) / 300; math.Abs(got-(1-keep)) > tol {
		t.Errorf("zone-2 answered %.3f of the requests; want %.3f ± %.2f: what zone-1 cannot take (all: %v)", got, 1-keep, tol, by)
	}
	for _, u := range z2 {
		if by[u.ID] == 0 {
			t.Errorf("%s answered none of the spilled requests (all: %v)", u.ID, by)
		}
	}
	if got := sum(by, far...); got != 0 {
		t.Errorf("region far answered %d requests while zone-2 has capacity; want none (all: %v)", got, by)
	}

	// Every instance fails its probe. Fewer than min_healthy_fraction
	// (0.5) of the service's instances are healthy, so health is
	// disregarded: cairn publishes all eight, HEALTHY, each flagged
	// cairn.health_disregarded, and Envoy must route to every one of
	// them rather than answer 503 itself. Spread as SPEC §3 spreads a
	// caller under the guard: over every tier, by the number of
	// instances, an eighth each.
	for _, u := range all {
		u.Ready.Store(false)
	}
	failedAt := time.Now()
	Eventually(t, 45*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		d, err := n.Client().Service(cctx, demoNS, demoSvc)
		if err != nil {
			return err
		}
		if !d.View.HealthDisregarded || len(d.View.Endpoints) != len(all) {
			return fmt.Errorf("view health_disregarded=%v:\n%s", d.View.HealthDisregarded, viewLines(d.View))
		}
		for _, ep := range d.View.Endpoints {
			if !ep.Eligible || ep.Verdict != status.Unhealthy || !hasFlag(ep.Flags, "health_disregarded") {
				return fmt.Errorf("%s; want unhealthy, eligible, flagged health_disregarded", describe(ep))
			}
		}
		return nil
	})
	t.Logf("every probe failing: health disregarded after %s", time.Since(failedAt).Round(time.Millisecond))
	waitHosts(t, e, 30*time.Second, "all eight back, HEALTHY under the guard, in one priority", func(hs []EnvoyHost) error {
		if err := hostsAre("HEALTHY", all...)(hs); err != nil {
			return err
		}
		want := map[*upstream]int{}
		for _, u := range all {
			want[u] = 0
		}
		return priorities(hs, want)
	})
	Eventually(t, 15*time.Second, func() error { return disregardedMetadata(ctx, e, len(all)) })
	hs, err = e.Hosts(ctx, demoCluster)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Envoy holds:%s", hostLines(hs))
	by = share(ctx, t, e, 400)
	t.Logf("health disregarded: %v", by)
	for _, u := range all {
		// An eighth of 400 is 50; half of it only a real skew misses.
		if by[u.ID] < 25 {
			t.Errorf("%s answered %d of 400 requests with health disregarded; want about 50, every instance in rotation (all: %v)", u.ID, by[u.ID], by)
		}
	}
}

// share sends n requests through e and returns how many each upstream
// answered; it fails the test if Envoy answered any itself.
func share(ctx context.Context, t *testing.T, e *Envoy, n int) map[string]int {
	t.Helper()
	by, own, err := spread(ctx, e, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(own) > 0 {
		t.Errorf("Envoy answered %v of %d requests itself (upstreams: %v)", own, n, by)
	}
	return by
}

// sum is how many requests the upstreams us answered.
func sum(by map[string]int, us ...*upstream) int {
	var s int
	for _, u := range us {
		s += by[u.ID]
	}
	return s
}

// priorities passes when each upstream's host has the priority want
// gives it.
func priorities(hs []EnvoyHost, want map[*upstream]int) error {
	at := map[string]EnvoyHost{}
	for _, h := range hs {
		at[h.Addr] = h
	}
	for u, p := range want {
		h, ok := at[u.Addr]
		if !ok {
			return fmt.Errorf("%s (%s) is not in Envoy", u.ID, u.Addr)
		}
		if h.Priority != p {
			return fmt.Errorf("%s is at priority %d, want %d", u.ID, h.Priority, p)
		}
	}
	return nil
}

// disregardedMetadata passes when the demo cluster's assignment Envoy
// holds flags n endpoints cairn.health_disregarded = true.
func disregardedMetadata(ctx context.Context, e *Envoy, n int) error {
	b, err := e.AdminGet(ctx, "/config_dump?resource=dynamic_endpoint_configs&include_eds")
	if err != nil {
		return err
	}
	dump := string(b)
	if !strings.Contains(dump, `"cluster_name": "`+demoCluster+`"`) {
		return fmt.Errorf("Envoy's endpoint configs hold no %s:\n%s", demoCluster, dump)
	}
	if got := strings.Count(dump, `"health_disregarded": true`); got != n {
		return fmt.Errorf("Envoy's assignment flags %d endpoints cairn.health_disregarded; want %d:\n%s", got, n, dump)
	}
	return nil
}
