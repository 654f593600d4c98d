package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// evacuateBound is issue 30's bound: within 1 s of `cairn evacuate`,
// every DNS answer and every xDS assignment puts the zone last.
const evacuateBound = time.Second

// TestEvacuateZoneShiftsEveryAnswer: `cairn evacuate --zone a` (of one
// service, through a follower of a 3-node cluster) puts zone a last
// within 1 s in every answer of every node — A and SRV to callers in
// each zone, and the assignment of an xDS subscriber in each zone on
// each node: a caller in zone a gets zones b and c first, SRV lists
// a's instances at priority 3, xDS publishes a's locality as the last
// priority, HEALTHY, flagged cairn.evacuated. Nothing was withdrawn:
// every instance is still eligible, healthy and at its whole weight.
// The evacuation is listed with its reason, and the service's audit
// trail records it.
func TestEvacuateZoneShiftsEveryAnswer(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 3, evacArgs()...)
	ctx := ctxT(t, 2*time.Minute)
	f := startEvacFleet(ctx, t, c, "evac", "", 2, 2, 2)
	var subs []*zoneSub
	for _, n := range c.Nodes {
		for _, z := range evacZones {
			subs = append(subs, f.subscribe(ctx, t, n, z))
		}
	}
	// every checks every answer of every node to a caller in each zone.
	every := func(aEvacuated bool) error {
		var errs []error
		for _, n := range c.Nodes {
			for _, z := range evacZones {
				errs = append(errs, f.checkDNS(n, z, aEvacuated))
			}
		}
		for _, s := range subs {
			errs = append(errs, f.checkXDS(s, aEvacuated))
		}
		return errors.Join(errs...)
	}
	// Before: each caller's own zone first.
	Eventually(t, 15*time.Second, func() error { return every(false) })

	_, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const reason = "zone a loses packets"
	out := runCLI(ctx, t, follower, "evacuate", "--zone", "a", "--region", evacRegion,
		"--service", healthNS+"/"+f.svc, "--reason", reason)
	returned := time.Now()
	if !strings.Contains(string(out), "zone a in region r1 of shop/evac: evacuated until") {
		t.Errorf("cairn evacuate printed %q", out)
	}
	if err := Poll(evacuateBound, 10*time.Millisecond, func() error { return every(true) }); err != nil {
		t.Fatalf("%s after `cairn evacuate` returned: %v (load %s)", evacuateBound, err, loadavg())
	}
	t.Logf("every answer of every node put zone a last %s after `cairn evacuate` returned", time.Since(returned).Round(time.Millisecond))

	// Nothing was withdrawn: every node lists every instance eligible and
	// healthy, zone a's evacuated.
	for _, n := range c.Nodes {
		var eps []wire.Endpoint
		cliJSON(ctx, t, n, &eps, "endpoints", healthNS+"/"+f.svc)
		if len(eps) != len(f.ids) {
			t.Errorf("%s: cairn endpoints lists %d endpoints; want %d", n.ID, len(eps), len(f.ids))
		}
		for _, e := range eps {
			want := ""
			if e.Zone == "a" {
				want = "evacuated"
			}
			if err := isHealthyEligible(e); err != nil || e.Evacuation != want {
				t.Errorf("%s: cairn endpoints: %s evacuation=%q; want healthy, eligible and evacuation=%q", n.ID, describe(e), e.Evacuation, want)
			}
		}
	}
	var evs []wire.EvacuationView
	cliJSON(ctx, t, follower, &evs, "evacuations")
	if len(evs) != 1 || evs[0].State != "evacuated" || evs[0].Zone != "a" || evs[0].Region != evacRegion ||
		evs[0].Service != f.svc || evs[0].Reason != reason || evs[0].Forced {
		t.Errorf("cairn evacuations: %+v; want zone a of shop/evac evacuated, not forced, for %q", evs, reason)
	}
	var trail []wire.Event
	cliJSON(ctx, t, follower, &trail, "events", healthNS+"/"+f.svc)
	if !slices.ContainsFunc(trail, func(e wire.Event) bool {
		return e.Kind == wire.EventEvacuated && e.To == "evacuated" && e.Service == f.svc &&
			strings.Contains(e.Reason, "zone a in region r1 of shop/evac started") && strings.Contains(e.Reason, reason)
	}) {
		t.Errorf("cairn events shop/evac records no evacuation of zone a:\n%s", eventLines(trail))
	}
}

// TestEvacuateRefusedWithoutCapacity: zone a holds two of the four
// instances of a service whose minimum healthy fraction is the default
// 0.5, so two eligible instances must stay outside it. With b-0's
// listener closed (withdrawn by its probes) only c-0 would, and
// `cairn evacuate` exits non-zero with an error naming how many would
// be left and how many are needed (before b-0 closed, the disruption
// budget refused it); nothing changes, and the refusal is
// in the audit trail. --force is accepted, noted in the evacuation and
// its event; a caller in zone a is then served from the evacuated zone
// again (the rest cannot carry it: the tier rules spill), and its
// answer says so.
func TestEvacuateRefusedWithoutCapacity(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 1, evacArgs()...)
	ctx := ctxT(t, 2*time.Minute)
	n := c.Nodes[0]
	f := startEvacFleet(ctx, t, c, "lean", "", 2, 1, 1)
	args := []string{"evacuate", "--zone", "a", "--service", healthNS + "/" + f.svc}
	// With every instance healthy, b-0 and c-0 could carry it, but the
	// evacuation is a voluntary disruption of two of four instances, past
	// the default budget (25% of 4 rounds up to 1): refused too.
	const past = "its 2 available instance(s) in the zone would make 2 unavailable, past its disruption budget max_unavailable 25% (the default) = 1 of 4 instances"
	if stdout, stderr, code := cairnCLI(ctx, t, n, args...); code != 1 || !strings.Contains(stderr, past) || !strings.Contains(stderr, "--force") {
		t.Fatalf("cairn %s: exit %d, stdout %q, stderr %q; want exit 1 and an error saying %q and naming --force",
			strings.Join(args, " "), code, stdout, stderr, past)
	}
	f.setDown(t, "b-0", true)
	withdrawnVerdict(ctx, t, n, f.svc, "b-0")
	Eventually(t, 10*time.Second, func() error { return f.checkDNS(n, "a", false) })

	stdout, stderr, code := cairnCLI(ctx, t, n, args...)
	const short = "shop/lean would keep 1 eligible instance(s) outside the zone and needs 2"
	if code != 1 || !strings.Contains(stderr, short) || !strings.Contains(stderr, "--force") {
		t.Fatalf("cairn %s: exit %d, stdout %q, stderr %q; want exit 1 and an error saying %q and naming --force",
			strings.Join(args, " "), code, stdout, stderr, short)
	}
	if evs, err := evacuationsOn(ctx, n); err != nil || len(evs) != 0 {
		t.Fatalf("after the refusal, evacuations: %+v (%v); want none", evs, err)
	}
	if err := f.checkDNS(n, "a", false); err != nil {
		t.Fatalf("after the refusal: %v", err)
	}
	trail, err := eventsOn(ctx, n, f.svc)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(trail, func(e wire.Event) bool {
		return e.Kind == wire.EventRefused && strings.Contains(e.Reason, short)
	}) {
		t.Errorf("the audit trail of shop/lean holds no refusal saying %q:\n%s", short, eventLines(trail))
	}

	const reason = "drill"
	out := runCLI(ctx, t, n, append(args, "--force", "--reason", reason)...)
	if !strings.Contains(string(out), "past the capacity check or a disruption budget") {
		t.Errorf("cairn evacuate --force printed %q; want it to say the capacity check was passed over", out)
	}
	evs, err := evacuationsOn(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if len(evs) != 1 || !evs[0].Forced || evs[0].State != "evacuated" || evs[0].Reason != reason {
		t.Fatalf("evacuations after --force: %+v; want zone a of shop/lean evacuated, forced", evs)
	}
	waitEvent(ctx, t, n, f.svc, 0, "forced evacuation", func(e wire.Event) bool {
		return e.Kind == wire.EventEvacuated && strings.Contains(e.Reason, "forced past the capacity check") &&
			strings.Contains(e.Reason, short)
	})
	// Zone b and c, c-0 alone healthy, cannot carry a caller in zone a:
	// it spills into the evacuated zone, flagged.
	Eventually(t, 5*time.Second, func() error {
		recs, err := f.srv(n, "a")
		if err != nil {
			return err
		}
		if recs["a-0"].prio != 3 || recs["a-1"].prio != 3 || recs["c-0"].prio != 1 {
			return fmt.Errorf("SRV to a caller in zone a: %v; want a-0 and a-1 at priority 3, c-0 at 1", recs)
		}
		ids, ede, err := f.a(n, "a")
		if err != nil {
			return err
		}
		if !slices.Equal(ids, []string{"a-0", "a-1", "c-0"}) || !slices.ContainsFunc(ede, func(s string) bool {
			return strings.HasPrefix(s, "evacuated-zone:")
		}) {
			return fmt.Errorf("A to a caller in zone a: %v, EDE %q; want a-0, a-1 and c-0, and EDE evacuated-zone", ids, ede)
		}
		return nil
	})
}

// waitEvacuation polls n until it lists exactly one evacuation and want
// accepts it, and returns it.
func waitEvacuation(ctx context.Context, t *testing.T, n *Node, timeout time.Duration, want func(wire.EvacuationView) error) wire.EvacuationView {
	t.Helper()
	var got wire.EvacuationView
	Eventually(t, timeout, func() error {
		evs, err := evacuationsOn(ctx, n)
		if err != nil {
			return err
		}
		if len(evs) != 1 {
			return fmt.Errorf("%s lists evacuations %+v; want one", n.ID, evs)
		}
		if err := want(evs[0]); err != nil {
			return fmt.Errorf("%s: evacuation %+v: %v", n.ID, evs[0], err)
		}
		got = evs[0]
		return nil
	})
	return got
}
