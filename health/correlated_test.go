package health

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestProberCutOffFromAZoneIsSilence: a prober that gets no answer from
// most of its targets in one zone is cut off from that zone, not looking
// at a dead zone: its timeouts there are set aside, those instances go
// unknown and stay in rotation, and an event names the prober. A timeout
// in a zone it otherwise reaches is still evidence; so is a refusal in
// the cut-off zone. When the prober reaches the zone again, an event says
// so and its evidence counts again, with no withdrawal in between.
func TestProberCutOffFromAZoneIsSilence(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	svc.Policy.MinHealthyFraction = new(0.0) // the guard and the shrink cap stay out of the way
	svc.Policy.ShrinkCap = 1
	h.apply(svc)
	var far, near []wire.Instance
	for i, id := range []string{"far0", "far1", "far2", "far3"} {
		r := reg(svc, id, "10.0.1."+string(rune('1'+i)))
		r.Region, r.Zone = "r1", "zb"
		far = append(far, h.register(r))
	}
	for i, id := range []string{"near0", "near1", "near2"} {
		r := reg(svc, id, "10.0.0."+string(rune('1'+i)))
		r.Region, r.Zone = "r1", "za"
		near = append(near, h.register(r))
	}
	h.tick(0)
	self := h.st.NodeID()
	round := func(farRes func(i int) wire.ProbeResult, nearRes func(i int) wire.ProbeResult) {
		t.Helper()
		var rs []wire.ProbeResult
		for i, in := range far {
			r := farRes(i)
			r.Target, r.At = TargetID(in.Key(), in.Incarnation), h.clk.Now()
			rs = append(rs, r)
		}
		for i, in := range near {
			r := nearRes(i)
			r.Target, r.At = TargetID(in.Key(), in.Incarnation), h.clk.Now()
			rs = append(rs, r)
		}
		if rep := h.n.ProbeReport(wire.ProbeReport{Observer: self, Results: rs}); rep.Discarded != 0 {
			t.Fatalf("probe report: %+v, want every result accepted", rep)
		}
		h.tick(2 * time.Second)
	}
	pass := func(int) wire.ProbeResult { return wire.ProbeResult{OK: true} }
	timeout := func(int) wire.ProbeResult { return wire.ProbeResult{Unreachable: true, Error: "timeout"} }
	for range 3 {
		round(pass, pass)
	}
	withdrawals := len(events(h.st.Store, svc.Key(), wire.EventEligibility, ""))

	// Cut off from zone zb; in zone za one instance of three times out
	// (a third: not correlated) and another refuses.
	nearFaults := func(i int) wire.ProbeResult {
		switch i {
		case 1:
			return wire.ProbeResult{Unreachable: true, Error: "timeout"}
		case 2:
			return wire.ProbeResult{Hard: true, Error: "connection refused"}
		}
		return wire.ProbeResult{OK: true}
	}
	farRefusal := func(i int) wire.ProbeResult {
		if i == 3 {
			return wire.ProbeResult{Hard: true, Error: "connection refused"}
		}
		return timeout(i)
	}
	for range 6 {
		round(farRefusal, nearFaults)
	}
	for _, in := range far[:3] {
		if e := h.entry(in); e.Verdict != status.Unknown || !e.Flags.Has(status.Eligible) {
			t.Errorf("%s cut off from its prober: %v eligible=%v, want unknown and in rotation", in.ID, e.Verdict, e.Flags.Has(status.Eligible))
		}
	}
	if e := h.entry(far[3]); e.Flags.Has(status.Eligible) {
		t.Errorf("%s refused in the cut-off zone but is in rotation: a refusal is always evidence", far[3].ID)
	}
	if e := h.entry(near[1]); e.Flags.Has(status.Eligible) {
		t.Errorf("%s timed out in a zone its prober reaches but is in rotation: %v", near[1].ID, e.Verdict)
	}
	if e := h.entry(near[2]); e.Flags.Has(status.Eligible) {
		t.Errorf("%s refused but is in rotation", near[2].ID)
	}
	aside := events(h.st.Store, svc.Key(), wire.EventProbesSetAside, "")
	if len(aside) != 1 || !strings.Contains(aside[0].Reason, "prober "+self) || !strings.Contains(aside[0].Reason, "zone r1/zb") {
		t.Fatalf("set-aside events %+v, want one naming prober %s and zone r1/zb", aside, self)
	}
	if got := h.metric("cairn_health_probes_set_aside"); got != 1 {
		t.Errorf("cairn_health_probes_set_aside = %v, want 1", got)
	}

	// Healed: the zone answers again.
	for range 3 {
		round(pass, pass)
	}
	if got := events(h.st.Store, svc.Key(), wire.EventProbesRestored, ""); len(got) != 1 || !strings.Contains(got[0].Reason, self) {
		t.Fatalf("restored events %+v, want one naming %s", got, self)
	}
	for _, in := range far[:3] {
		if e := h.entry(in); e.Verdict != status.Healthy || !e.Flags.Has(status.Eligible) {
			t.Errorf("%s after healing: %v, want healthy and eligible", in.ID, e.Verdict)
		}
	}
	for _, e := range events(h.st.Store, svc.Key(), wire.EventEligibility, "")[withdrawals:] {
		for _, in := range far[:3] {
			if e.Instance == in.ID && strings.HasPrefix(e.To, "withdrawn") {
				t.Errorf("%s was withdrawn during the cut: %+v", in.ID, e)
			}
		}
	}
}

// TestSetAsideCountsTheZone: the least number of instances for a
// correlated silence is the zone's, not one prober's share of it.
func TestSetAsideCountsTheZone(t *testing.T) {
	for _, c := range []struct {
		r    reach
		want bool
	}{
		{reach{total: 1, soft: 1, zone: 3}, true},  // one prober's one target of three: set aside
		{reach{total: 1, soft: 1, zone: 1}, false}, // one instance in the zone: its own timeout
		{reach{total: 4, soft: 2, zone: 4}, false}, // half: not more than the fraction
		{reach{total: 4, soft: 3, zone: 4}, true},
	} {
		if got := setAside(c.r, 0.5); got != c.want {
			t.Errorf("setAside(%+v, 0.5) = %v, want %v", c.r, got, c.want)
		}
	}
}

// TestFirstTimeoutsOfACutAreSetAsideToo: a prober cut off from a zone
// learns it one target at a time, as each target's next probe times out
// within its interval; the timeouts that came before its reach fell
// under the fraction are part of the same correlated silence and are set
// aside with the rest, rather than consumed as failures first. Consumed,
// each one is fresh evidence for a freshness window (the instance stays
// "healthy" on a failed probe instead of going unknown), and it counts
// in the run of failures that withdraws (experiment 6: after the heal,
// it withdrew instances at the region's full size).
func TestFirstTimeoutsOfACutAreSetAsideToo(t *testing.T) {
	h := newHarness(t, nil, 0, nil)
	svc := tcpService("shop", "cart")
	svc.Check = &wire.Check{Type: "tcp", Interval: wire.Duration(10 * time.Second), Timeout: wire.Duration(time.Second)}
	svc.Policy.MinHealthyFraction = new(0.0)
	svc.Policy.ShrinkCap = 1
	h.apply(svc)
	var far, near []wire.Instance
	for i := range 4 {
		r := reg(svc, fmt.Sprintf("far%d", i), fmt.Sprintf("10.0.1.%d", i+1))
		r.Region, r.Zone = "r1", "zb"
		far = append(far, h.register(r))
		r = reg(svc, fmt.Sprintf("near%d", i), fmt.Sprintf("10.0.0.%d", i+1))
		r.Region, r.Zone = "r1", "za"
		near = append(near, h.register(r))
	}
	h.tick(0)
	self := h.st.NodeID()
	// Each instance is probed every 10 s, instance i at second i of
	// the interval; the zone zb is cut off from second 60 on.
	const cut = 60
	var lastOK time.Time
	for s := range cut + 25 {
		var rs []wire.ProbeResult
		for i := range 4 {
			if s%10 != i {
				continue
			}
			ok := wire.ProbeResult{OK: true, Target: TargetID(near[i].Key(), near[i].Incarnation), At: h.clk.Now()}
			rs = append(rs, ok)
			r := wire.ProbeResult{OK: true, Target: TargetID(far[i].Key(), far[i].Incarnation), At: h.clk.Now()}
			if s >= cut {
				r.OK, r.Unreachable, r.Error = false, true, "timeout"
			} else if i == 0 {
				lastOK = h.clk.Now()
			}
			rs = append(rs, r)
		}
		if len(rs) > 0 {
			if rep := h.n.ProbeReport(wire.ProbeReport{Observer: self, Results: rs}); rep.Discarded != 0 {
				t.Fatalf("probe report: %+v, want every result accepted", rep)
			}
		}
		h.tick(time.Second)
	}
	// far0's last pass is more than the freshness window (3 × 10 s)
	// and a round old: silence.
	if age := h.clk.Now().Sub(lastOK); age < 32*time.Second {
		t.Fatalf("far0's last pass is %s old; the test wants it past the freshness window", age)
	}
	e := h.entry(far[0])
	if e.Verdict != status.Unknown || !e.Flags.Has(status.Eligible) {
		t.Errorf("far0, cut off from its prober, %s after its last pass: %v eligible=%v; want unknown and in rotation (its first timeout, before the cut was plain, set aside with the rest)",
			h.clk.Now().Sub(lastOK), e.Verdict, e.Flags.Has(status.Eligible))
	}
}
