package integration

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// rampSampler follows a zone-a instance's return: the SRV weight a
// caller in zone b gets for it from one node (wire.DefaultWeight × the
// zone's share: a is that caller's tier 1), sampled while it returns.
type rampSampler struct {
	f  *evacFleet
	n  *Node
	id string

	weights []int
}

// sample asks once, records the weight unless the zone is still
// evacuated (priority 3), and returns it (0 while evacuated).
func (r *rampSampler) sample() (int, error) {
	recs, err := r.f.srv(r.n, "b")
	if err != nil {
		return 0, err
	}
	rec, ok := recs[r.id]
	switch {
	case !ok:
		return 0, fmt.Errorf("%s: SRV to a caller in zone b does not list %s: %v", r.n.ID, r.id, recs)
	case rec.prio == 3:
		return 0, nil
	case rec.prio != 1:
		return 0, fmt.Errorf("%s: SRV to a caller in zone b lists %s at priority %d; want 1 (or 3 while evacuated)", r.n.ID, r.id, rec.prio)
	}
	r.weights = append(r.weights, rec.weight)
	return rec.weight, nil
}

// until samples every 50ms until cond accepts the weight, for up to
// timeout.
func (r *rampSampler) until(t *testing.T, timeout time.Duration, what string, cond func(w int) bool) int {
	t.Helper()
	var w int
	err := Poll(timeout, 50*time.Millisecond, func() error {
		var err error
		if w, err = r.sample(); err != nil {
			return err
		}
		if !cond(w) {
			return fmt.Errorf("%s's SRV weight is %d", r.id, w)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("waiting until %s: %v (weights so far %v)", what, err, r.weights)
	}
	return w
}

// final records the weight once the zone is back (the last sample
// taken while waiting for that may predate the last step).
func (r *rampSampler) final(t *testing.T) {
	t.Helper()
	if _, err := r.sample(); err != nil {
		t.Fatal(err)
	}
}

// xdsWeights returns the weights of instance id in the assignments hs,
// those where its zone is evacuated left out.
func (f *evacFleet) xdsWeights(hs []heldCLA, id string) []int {
	var out []int
	for _, h := range hs {
		if e, ok := f.endpoints(h.cla)[id]; ok && !e.evacuated {
			out = append(out, e.weight)
		}
	}
	return out
}

// checkRamp checks a returning zone's weights as seen over its return:
// they never fall, end whole, and took at least three values between
// nothing and whole: in steps, not at once.
func checkRamp(what string, ws []int) error {
	if len(ws) == 0 {
		return fmt.Errorf("%s: no weight seen while the zone returned", what)
	}
	for i := 1; i < len(ws); i++ {
		if ws[i] < ws[i-1] {
			return fmt.Errorf("%s: the weight fell from %d to %d (sample %d): %v", what, ws[i-1], ws[i], i, ws)
		}
	}
	if last := ws[len(ws)-1]; last != wire.DefaultWeight {
		return fmt.Errorf("%s: the last weight is %d; want %d: %v", what, last, wire.DefaultWeight, ws)
	}
	mid := slices.Compact(slices.DeleteFunc(slices.Clone(ws), func(w int) bool { return w <= 0 || w >= wire.DefaultWeight }))
	if len(mid) < 3 {
		return fmt.Errorf("%s: %d values between 0 and %d (%v); want at least 3: %v", what, len(mid), wire.DefaultWeight, mid, ws)
	}
	return nil
}

// shareWeight is the weight an instance of whole weight has at the
// evacuation's share.
func shareWeight(e wire.EvacuationView, window time.Duration) int {
	return int(math.Round(wire.DefaultWeight * e.Share(window)))
}

// TestEvacuationReturnsInSteps: after `cairn evacuate --undo`, zone a's
// share of a service with shift_back 20s rises in steps, measured from a
// zone-b caller's SRV weights and a zone-b xDS subscriber's endpoint
// weights, never falling, over at least 18 s (the tenth step). When one of
// zone a's instances fails its probes midway, `cairn evacuations` says
// paused and the share holds still while it is down; once it passes
// again the return resumes and ends with the zone whole. The audit
// trail records the end, the pause, the resumption and the return.
func TestEvacuationReturnsInSteps(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 1, evacArgs()...)
	ctx := ctxT(t, 2*time.Minute)
	n := c.Nodes[0]
	// 20 s: room for a-1's withdrawal (three failed probes a second
	// apart) to pause the return before it is over, on a loaded machine.
	const window = 20 * time.Second
	f := startEvacFleet(ctx, t, c, "ramp", ", shift_back: 20s", 2, 2, 2)
	sub := f.subscribe(ctx, t, n, "b")
	scope := []string{"--zone", "a", "--service", healthNS + "/" + f.svc}
	runCLI(ctx, t, n, append([]string{"evacuate"}, scope...)...)
	Eventually(t, 5*time.Second, func() error { return errors.Join(f.checkDNS(n, "b", true), f.checkXDS(sub, true)) })

	undoAt := time.Now()
	runCLI(ctx, t, n, append([]string{"evacuate", "--undo"}, scope...)...)
	r := &rampSampler{f: f, n: n, id: "a-0"}
	r.until(t, 10*time.Second, "zone a's share reaches 0.3", func(w int) bool { return w >= 30 })
	// A caller in zone a itself: its zone and the region share SRV
	// priority 0, zone a weighing 1.4 × its share (under 0.72 so far),
	// not alone at priority 0, where a client would send it everything.
	own, err := f.srv(n, "a")
	if err != nil {
		t.Fatal(err)
	}
	var zoneA, all float64
	for id, rec := range own {
		if rec.prio != 0 {
			t.Fatalf("SRV to a caller in the returning zone a: %s at priority %d, want 0 (merged): %v", id, rec.prio, own)
		}
		all += float64(rec.weight)
		if strings.HasPrefix(id, "a-") {
			zoneA += float64(rec.weight)
		}
	}
	if frac := zoneA / all; len(own) != 6 || frac <= 0 || frac >= 1 {
		t.Fatalf("SRV to a caller in the returning zone a: zone a weighs %.2f of priority 0 (%v); want a share", frac, own)
	} else {
		t.Logf("SRV to a caller in zone a at the start of the return: zone a weighs %.2f of priority 0", frac)
	}

	// a-1 fails its probes: the return pauses where its step left it.
	f.setDown(t, "a-1", true)
	paused := waitEvacuation(ctx, t, n, 10*time.Second, func(e wire.EvacuationView) error {
		if e.State != "paused" || !strings.Contains(e.PauseReason, "1 of the zone's ready instances are withdrawn, 0 were") {
			return fmt.Errorf("want paused for a-1")
		}
		return nil
	})
	held := shareWeight(paused, window)
	if held >= wire.DefaultWeight {
		t.Fatalf("paused at share %v: the return was over before a-1 failed", paused.Share(window))
	}
	xdsHeld := func() int { return f.endpoints(sub.held())["a-0"].weight }
	r.until(t, 5*time.Second, fmt.Sprintf("DNS serves the paused share (weight %d)", held), func(w int) bool { return w == held })
	Eventually(t, 5*time.Second, func() error {
		if w := xdsHeld(); w != held {
			return fmt.Errorf("the subscriber in zone b holds a-0 at weight %d; want the paused %d", w, held)
		}
		return nil
	})
	if out := runCLI(ctx, t, n, "evacuations"); !strings.Contains(string(out), "paused: its return pauses") {
		t.Errorf("cairn evacuations while a-1 is down:\n%s\nwant the state paused, with why", out)
	}
	// While a-1 is down (2.5 s: more than two steps of the window) the
	// share holds still, in DNS and xDS.
	pauseFrom := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	for end := pauseFrom.Add(2500 * time.Millisecond); time.Now().Before(end); <-tick.C {
		w, err := r.sample()
		if err != nil {
			t.Fatal(err)
		}
		if w != held || xdsHeld() != held {
			t.Fatalf("while a-1 is down and the return paused, a-0's weight moved: DNS %d, xDS %d; paused at %d", w, xdsHeld(), held)
		}
	}
	tick.Stop()
	for _, h := range sub.since(pauseFrom) {
		if w := f.endpoints(h.cla)["a-0"].weight; w != held {
			t.Fatalf("while the return paused, the subscriber in zone b was sent a-0 at weight %d; paused at %d", w, held)
		}
	}

	// a-1 passes again: the return resumes and ends.
	f.setDown(t, "a-1", false)
	Eventually(t, 40*time.Second, func() error {
		if _, err := r.sample(); err != nil {
			return err
		}
		if evs, err := evacuationsOn(ctx, n); err != nil || len(evs) != 0 {
			return fmt.Errorf("evacuations: %+v (%v); want none once zone a is back", evs, err)
		}
		return errors.Join(f.checkDNS(n, "b", false), f.checkXDS(sub, false))
	})
	took := time.Since(undoAt)
	r.final(t)
	t.Logf("zone a back %s after the undo; DNS weights of a-0 %v", took.Round(time.Millisecond), r.weights)
	if err := checkRamp("DNS SRV to a caller in zone b", r.weights); err != nil {
		t.Error(err)
	}
	xw := f.xdsWeights(sub.since(undoAt), "a-0")
	t.Logf("xDS weights of a-0 sent to the subscriber in zone b: %v", xw)
	if err := checkRamp("xDS to a subscriber in zone b", xw); err != nil {
		t.Error(err)
	}
	if min := time.Duration(0.9 * float64(window)); took < min {
		t.Errorf("zone a was back %s after the undo; a return over shift_back %s takes at least %s", took, window, min)
	}
	trail, err := eventsOn(ctx, n, f.svc)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct {
		kind     wire.EventKind
		from, to string
	}{
		{wire.EventEvacuationEnded, "evacuated", "returning"},
		{wire.EventEvacuationPaused, "returning", "paused"},
		{wire.EventEvacuationPaused, "paused", "returning"},
		{wire.EventEvacuationReturned, "returning", "returned"},
	} {
		if !slices.ContainsFunc(trail, func(e wire.Event) bool { return e.Kind == want.kind && e.From == want.from && e.To == want.to }) {
			t.Errorf("the audit trail of shop/ramp holds no %s %s -> %s:\n%s", want.kind, want.from, want.to, eventLines(trail))
		}
	}
}

// TestEvacuationSurvivesLeaderKill: a zone-wide evacuation of zone a
// (3-node cluster) outlives its leader: once another leads, every live
// node still puts zone a last, the evacuation is the same one, and the
// killed node, restarted, does too. Then, midway through zone a's
// return (shift_back 15s), the leader is killed again: the return goes
// on from where it was on a follower's DNS and xDS, never falling back
// (to 0.1) nor jumping to whole, and ends.
func TestEvacuationSurvivesLeaderKill(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 3, evacArgs()...)
	ctx := ctxT(t, 3*time.Minute)
	const window = 15 * time.Second
	f := startEvacFleet(ctx, t, c, "lk", ", shift_back: 15s", 2, 2, 2)
	onNodes := func(nodes []*Node, aEvacuated bool) error {
		var errs []error
		for _, n := range nodes {
			for _, z := range evacZones {
				errs = append(errs, f.checkDNS(n, z, aEvacuated))
			}
		}
		return errors.Join(errs...)
	}
	leader, err := c.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	scope := []string{"--zone", "a", "--region", evacRegion}
	runCLI(ctx, t, leader, append([]string{"evacuate"}, scope...)...)
	Eventually(t, 5*time.Second, func() error { return onNodes(c.Nodes, true) })
	before := waitEvacuation(ctx, t, leader, 5*time.Second, func(e wire.EvacuationView) error { return nil })

	// Mid-evacuation.
	if err := leader.Kill(); err != nil {
		t.Fatal(err)
	}
	next, err := c.WaitLeader(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitEvacuation(ctx, t, next, 10*time.Second, func(e wire.EvacuationView) error {
		if e.ID != before.ID || e.State != "evacuated" || !e.ExpiresAt.Equal(before.ExpiresAt) {
			return fmt.Errorf("want evacuation %d still evacuated until %s", before.ID, before.ExpiresAt)
		}
		return nil
	})
	// Over a few of the new leader's housekeeping rounds (1 s each), zone
	// a stays last on every live node.
	tick := time.NewTicker(200 * time.Millisecond)
	for end := time.Now().Add(2500 * time.Millisecond); time.Now().Before(end); <-tick.C {
		if err := onNodes(c.Live(), true); err != nil {
			t.Fatalf("after leader %s was killed, %s leads: %v", leader.ID, next.ID, err)
		}
	}
	tick.Stop()
	if err := leader.Restart(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, func() error { return onNodes([]*Node{leader}, true) })

	// Mid-ramp: the return is followed on a follower, which lives.
	lead, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	sub := f.subscribe(ctx, t, follower, "b")
	Eventually(t, 10*time.Second, func() error { return f.checkXDS(sub, true) })
	undoAt := time.Now()
	runCLI(ctx, t, follower, append([]string{"evacuate", "--undo"}, scope...)...)
	r := &rampSampler{f: f, n: follower, id: "a-0"}
	pre := r.until(t, 10*time.Second, "zone a's share reaches 0.3", func(w int) bool { return w >= 30 })
	killAt := time.Now()
	if err := lead.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	// The next step is the new leader's.
	post := r.until(t, 15*time.Second, "the return moves on under the new leader", func(w int) bool { return w != pre })
	t.Logf("killed leader %s at weight %d; the next step, %s later, is at %d", lead.ID, pre, time.Since(killAt).Round(time.Millisecond), post)
	if post <= pre || post >= wire.DefaultWeight {
		t.Errorf("after leader %s was killed at zone a's weight %d, the return went on at %d; want it to carry on between %d and %d",
			lead.ID, pre, post, pre, wire.DefaultWeight)
	}
	Eventually(t, 20*time.Second, func() error {
		if _, err := r.sample(); err != nil {
			return err
		}
		if evs, err := evacuationsOn(ctx, follower); err != nil || len(evs) != 0 {
			return fmt.Errorf("evacuations: %+v (%v); want none once zone a is back", evs, err)
		}
		return errors.Join(onNodes(c.Live(), false), f.checkXDS(sub, false))
	})
	took := time.Since(undoAt)
	r.final(t)
	t.Logf("zone a back %s after the undo; DNS weights of a-0 on %s: %v", took.Round(time.Millisecond), follower.ID, r.weights)
	if min := time.Duration(0.9 * float64(window)); took < min {
		t.Errorf("zone a was back %s after the undo; a return over shift_back %s takes at least %s", took, window, min)
	}
	if err := checkRamp("DNS SRV from "+follower.ID+" to a caller in zone b", r.weights); err != nil {
		t.Error(err)
	}
	xw := f.xdsWeights(sub.since(undoAt), "a-0")
	t.Logf("xDS weights of a-0 sent by %s to the subscriber in zone b: %v", follower.ID, xw)
	if err := checkRamp("xDS from "+follower.ID+" to a subscriber in zone b", xw); err != nil {
		t.Error(err)
	}
}
