package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// TestHealthCheckFasterThanTheRound: a TCP check every 200 ms (the
// validation allows 100 ms) against a listener that accepts brings its
// instance to healthy within a few rounds of the default 1 s evaluation,
// and keeps it there: its results are fresh though each waits out a
// round before the evaluator consumes it.
func TestHealthCheckFasterThanTheRound(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	ctx := ctxT(t, time.Minute)
	const svc = "fast"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 200ms, timeout: 150ms}", "{lease_ttl: 10m}"))
	bs, ids := loopbackFleet(ctx, t, c, svc, "f", 1, nil)
	n := c.Nodes[0]

	start := time.Now()
	e, at := waitEndpoint(ctx, t, n, svc, ids[0], 10*time.Second, isHealthyEligible)
	t.Logf("healthy after %s: %s", at.Sub(start).Round(time.Millisecond), describe(e))

	// Stays healthy: 25 more probes (some 5 s, five rounds) and no
	// change of verdict in the audit trail since.
	probes := bs[0].hits.Load()
	Eventually(t, 20*time.Second, func() error {
		if got := bs[0].hits.Load() - probes; got < 25 {
			return fmt.Errorf("%d probes since the instance turned healthy, want 25", got)
		}
		return nil
	})
	evs, err := eventsOn(ctx, n, svc)
	if err != nil {
		t.Fatal(err)
	}
	healthy := 0
	for _, ev := range evs {
		if ev.Kind != wire.EventEligibility || ev.Instance != ids[0] {
			continue
		}
		if healthy > 0 || strings.HasSuffix(ev.From, "/healthy") {
			t.Errorf("a verdict change after the instance turned healthy; audit trail:\n%s", eventLines(evs))
			break
		}
		if strings.HasSuffix(ev.To, "/healthy") {
			healthy++
		}
	}
	if e, err := endpointOn(ctx, n, svc, ids[0]); err != nil || isHealthyEligible(e) != nil {
		t.Errorf("after 25 more probes: %s (err %v); want eligible and healthy still", describe(e), err)
	}
}
