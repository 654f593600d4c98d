package health

import (
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestCheckFasterThanTheRound: a check at 200 ms, every result passing,
// is healthy, round after round, though its freshness (3 × 200 ms) is
// shorter than the round's hold-back (1 s) that every result waits out
// before the evaluator consumes it; and when its prober falls silent it
// turns unknown within a few rounds, not never.
func TestCheckFasterThanTheRound(t *testing.T) {
	const (
		interval = 200 * time.Millisecond
		batch    = 500 * time.Millisecond // cmd's: half the round
		tick     = 100 * time.Millisecond
	)
	h := newHarness(t, nil, 0, nil)
	if got := h.n.pub.Interval(); got != time.Second {
		t.Fatalf("the round's interval is %v, want the default 1s this test is about", got)
	}
	svc := tcpService("shop", "fast")
	svc.Check.Interval, svc.Check.Timeout = wire.Duration(interval), wire.Duration(150*time.Millisecond)
	h.apply(svc)
	a := h.register(reg(svc, "a", "10.0.0.1"))
	h.tick(0) // the table holds a: results about it are taken from now on

	// One second as the server runs it: the prober takes a result every
	// 200 ms, its batch carries the latest every 500 ms, and the round
	// runs at the end.
	start := h.clk.Now()
	var latest time.Time
	second := func(probing bool) {
		for range time.Second / tick {
			h.clk.Advance(tick)
			since := h.clk.Now().Sub(start)
			if probing && since%interval == 0 {
				latest = h.clk.Now()
			}
			if since%batch == 0 && !latest.IsZero() {
				h.n.ProbeReport(wire.ProbeReport{Observer: "n1", Results: []wire.ProbeResult{
					{Target: TargetID(a.Key(), a.Incarnation), At: latest, OK: true}}})
			}
		}
		h.n.Tick(t.Context())
	}
	for round := 1; round <= 10; round++ {
		second(true)
		if round < 2 {
			continue // the first results wait out the hold-back
		}
		if e := h.entry(a); e.Verdict != status.Healthy || !e.Flags.Has(status.Eligible) {
			t.Fatalf("round %d of passing probes every %v: table entry %v (flags %v), committed %+v; want healthy and eligible",
				round, interval, e.Verdict, e.Flags, h.instance(a).Health)
		}
	}
	if evs := events(h.st.Store, svc.Key(), wire.EventEligibility, a.ID); len(evs) != 2 ||
		evs[0].To != "eligible/unknown" || evs[1].To != "eligible/healthy" {
		t.Errorf("eligibility events %+v, want the first verdict (unknown) and one change to healthy, no flapping", evs)
	}

	// The prober falls silent: three rounds of freshness, then unknown.
	for round := 1; round <= 5; round++ {
		second(false)
		if e := h.entry(a); round >= 4 && e.Verdict != status.Unknown {
			t.Fatalf("round %d of silence: verdict %v, want unknown", round, e.Verdict)
		}
	}
	h.wantEntry(a, status.Unknown, true)
}
