package integration

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"
)

// TestEnvoyWeightsFollowSlowStart: cairn publishes a newly eligible
// instance at a weight rising from 10% to 100% of its base weight over
// the service's slow-start window (SPEC §2), as the endpoint's
// load_balancing_weight (SPEC §4); Envoy's round robin honours it. Three
// instances finish slow start, a fourth is registered, and while it ramps
// the test samples, again and again: the weights cairn's API publishes,
// the weights Envoy holds, and who answers a batch of requests through
// Envoy's listener. Envoy must hold cairn's weights, send the new
// instance the share its weight gives it, and that share must rise over
// the ramp. Envoy's own slow start must be off, or the two would compound.
func TestEnvoyWeightsFollowSlowStart(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	c := StartCluster(t, 1, "--dev")
	n := c.Nodes[0]
	ctx := ctxT(t, 3*time.Minute)
	// A 24 s window: long enough for several batches while the weight
	// rises (it moves 3.75 points a second), short enough for the test.
	// Admission after 4 passing probes and 4 s instead of 5 and 10 s.
	const window = 24 * time.Second
	applyDefinition(ctx, t, c, demoDefinition(t, "slow_start: 24s", "admit_after: 4", "admit_min: 4s"))
	us := newUpstreams(t, "web", 4)
	old, fresh := us[:3], us[3]
	registerUpstreams(ctx, t, c, old, nil, nil)
	byAddr := map[string]string{}
	for _, u := range us {
		byAddr[u.Addr] = u.ID
	}

	e := startEnvoy(t, c, EnvoyConfig{})
	waitHosts(t, e, 30*time.Second, "the three first instances", hostsAre("", old...))
	assertNoEnvoySlowStart(ctx, t, e)

	// The three finish slow start: cairn publishes them at their base
	// weight, 100, and Envoy holds that.
	full := map[string]int{}
	for _, u := range old {
		full[u.ID] = 100
	}
	Eventually(t, 30*time.Second+window, func() error {
		return sameWeights(ctx, n, e, byAddr, full)
	})

	registerUpstreams(ctx, t, c, []*upstream{fresh}, nil, nil)
	start := time.Now()
	waitHosts(t, e, 30*time.Second, "the new instance", hostsAre("", us...))
	t.Logf("the new instance is in Envoy after %s", time.Since(start).Round(time.Millisecond))
	// The test ends its ramp once the published weight reaches 100 (or
	// after admission plus twice the window, which fails).
	type sample struct {
		published int    // cairn's weight for the new instance, read before the batch
		envoy     [2]int // Envoy's, before and after the batch
		want      [2]float64
		share     float64 // measured: the new instance's share of the batch
	}
	var samples []sample
	var matched int
	const batch = 300
	deadline := start.Add(30*time.Second + 2*window)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("the new instance did not reach weight 100 within %s; samples %+v", time.Since(start), samples)
		}
		pub, err := apiWeights(ctx, n)
		if err != nil {
			t.Fatal(err)
		}
		before, err := envoyWeights(ctx, e, byAddr)
		if err != nil {
			t.Fatal(err)
		}
		by, own, err := spread(ctx, e, batch)
		if err != nil {
			t.Fatal(err)
		}
		if len(own) > 0 {
			t.Fatalf("Envoy answered itself during the ramp: %v", own)
		}
		after, err := envoyWeights(ctx, e, byAddr)
		if err != nil {
			t.Fatal(err)
		}
		s := sample{published: pub[fresh.ID], envoy: [2]int{before[fresh.ID], after[fresh.ID]},
			want: [2]float64{shareOf(before, fresh.ID), shareOf(after, fresh.ID)}, share: float64(by[fresh.ID]) / batch}
		samples = append(samples, s)
		for _, u := range old {
			if before[u.ID] != 100 || after[u.ID] != 100 {
				t.Errorf("Envoy holds %s at weight %d→%d during the ramp; want 100", u.ID, before[u.ID], after[u.ID])
			}
		}
		if s.envoy[0] == s.published {
			matched++
		}
		// Logged once per pair of weights.
		if len(samples) == 1 || samples[len(samples)-2].envoy != s.envoy {
			t.Logf("%5.1fs published %3d, Envoy %3d→%3d: expected share %.3f–%.3f, measured %.3f (%v)",
				time.Since(start).Seconds(), s.published, s.envoy[0], s.envoy[1], s.want[0], s.want[1], s.share, by)
		}
		// Envoy's round robin with unequal weights is an earliest
		// deadline first schedule: over any run of requests each host's
		// count is within a couple of its weight's share, and the share
		// of 300 requests within 0.05 of it is generous (the weights can
		// change during the batch, hence the range of before and after).
		const tol = 0.05
		lo, hi := min(s.want[0], s.want[1])-tol, max(s.want[0], s.want[1])+tol
		if s.share < lo || s.share > hi {
			t.Errorf("the new instance answered %.3f of %d requests; its weights in Envoy (%d→%d of %v→%v) give %.3f–%.3f, ± %.2f",
				s.share, batch, s.envoy[0], s.envoy[1], before, after, s.want[0], s.want[1], tol)
		}
		if pub[fresh.ID] >= 100 && after[fresh.ID] >= 100 {
			break
		}
	}
	// Envoy holds what cairn publishes, a table build (a second) behind
	// at most: it held the weight cairn's API gave just before the batch
	// in most batches (a third is generous: 90%+ here).
	if matched*3 < len(samples) {
		t.Errorf("Envoy held the weight cairn published in %d of %d samples; want a third at least", matched, len(samples))
	}
	t.Logf("ramp: %d samples in %s; Envoy held cairn's weight in %d", len(samples), time.Since(start).Round(time.Millisecond), matched)

	// Several batches saw the ramp, and the share rose over it: from
	// under half of a full share (10–50% of 100, 3.5–14% of the traffic)
	// at the first batch to a full share (a quarter) at the last.
	if len(samples) < 4 {
		t.Fatalf("only %d samples over the ramp; want at least 4: %+v", len(samples), samples)
	}
	first, last := samples[0], samples[len(samples)-1]
	if first.envoy[0] > 60 || first.share > 0.2 {
		t.Errorf("first sample %+v: want the new instance at under 60%% of its weight and 20%% of the traffic", first)
	}
	if last.share < 0.2 || last.share-first.share < 0.1 {
		t.Errorf("the new instance's share went from %.3f to %.3f; want it to rise by at least 0.1, to about 0.25", first.share, last.share)
	}
	var rises int
	for i := 1; i < len(samples); i++ {
		if samples[i].envoy[0] < samples[i-1].envoy[0] {
			t.Errorf("Envoy's weight of the new instance fell from %d to %d during slow start", samples[i-1].envoy[0], samples[i].envoy[0])
		}
		if samples[i].share > samples[i-1].share {
			rises++
		}
	}
	t.Logf("the share rose in %d of %d steps: %.3f → %.3f", rises, len(samples)-1, first.share, last.share)

	// At the end all four are at their base weight, in cairn and in
	// Envoy alike.
	full[fresh.ID] = 100
	Eventually(t, 15*time.Second, func() error {
		return sameWeights(ctx, n, e, byAddr, full)
	})
}

// shareOf is id's weight over the sum of weights.
func shareOf(weights map[string]int, id string) float64 {
	var sum int
	for _, w := range weights {
		sum += w
	}
	if sum == 0 {
		return 0
	}
	return float64(weights[id]) / float64(sum)
}

// apiWeights returns the published weights of demo/web's eligible
// instances as node n's API lists them.
func apiWeights(ctx context.Context, n *Node) (map[string]int, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	es, err := n.Client().Endpoints(ctx, demoNS, demoSvc)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, e := range es {
		if e.Eligible {
			out[e.InstanceID] = e.Weight
		}
	}
	return out, nil
}

// envoyWeights returns the weights Envoy holds for the demo cluster's
// hosts, by upstream id (byAddr maps addresses to ids).
func envoyWeights(ctx context.Context, e *Envoy, byAddr map[string]string) (map[string]int, error) {
	hs, err := e.Hosts(ctx, demoCluster)
	if err != nil {
		return nil, err
	}
	out := map[string]int{}
	for _, h := range hs {
		id, ok := byAddr[h.Addr]
		if !ok {
			return nil, fmt.Errorf("Envoy holds a host %s that is no upstream of the test", h.Addr)
		}
		out[id] = h.Weight
	}
	return out, nil
}

// sameWeights passes when cairn publishes want and Envoy holds it.
func sameWeights(ctx context.Context, n *Node, e *Envoy, byAddr map[string]string, want map[string]int) error {
	pub, err := apiWeights(ctx, n)
	if err != nil {
		return err
	}
	if !maps.Equal(pub, want) {
		return fmt.Errorf("cairn publishes weights %v, want %v", pub, want)
	}
	got, err := envoyWeights(ctx, e, byAddr)
	if err != nil {
		return err
	}
	if !maps.Equal(got, want) {
		return fmt.Errorf("Envoy holds weights %v, cairn publishes %v", got, want)
	}
	return nil
}

// assertNoEnvoySlowStart fails the test if the demo cluster Envoy holds
// from cairn turns on Envoy's own slow start (cairn's rising weight and
// Envoy's would compound), or balances other than by round robin.
func assertNoEnvoySlowStart(ctx context.Context, t *testing.T, e *Envoy) {
	t.Helper()
	b, err := e.AdminGet(ctx, "/config_dump?resource=dynamic_active_clusters")
	if err != nil {
		t.Fatal(err)
	}
	dump := string(b)
	if !strings.Contains(dump, `"name": "`+demoCluster+`"`) {
		t.Fatalf("Envoy's active clusters do not include %s:\n%s", demoCluster, dump)
	}
	if strings.Contains(dump, "slow_start_config") {
		t.Errorf("the cluster from cairn sets Envoy's slow_start_config:\n%s", dump)
	}
	if strings.Contains(dump, `"lb_policy"`) && !strings.Contains(dump, `"lb_policy": "ROUND_ROBIN"`) {
		t.Errorf("the cluster from cairn balances other than by round robin:\n%s", dump)
	}
}
