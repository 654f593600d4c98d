package publish

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// shiftOf: the largest shift of the evacuations covering an instance,
// from its service's shift_back window.
func TestShiftOf(t *testing.T) {
	window := wire.Duration(100 * time.Second)
	cs := Service{Key: wire.ServiceKey{Namespace: "shop", Name: "cart"},
		Def: wire.Service{Policy: wire.Policy{ShiftBack: &window}},
		Instances: []Instance{
			{Key: "a1", Loc: &Locality{"r1", "a"}},
			{Key: "b1", Loc: &Locality{"r1", "b"}},
			{Key: "c1", Loc: &Locality{"r2", "c"}},
			{Key: "x1", Loc: &Locality{"r2", "a"}},
		}}
	ended := time.Unix(1000, 0)
	evs := []wire.Evacuation{
		// Zone b of every service, returning for 35 s of 100: 0.4.
		{ID: 1, Zone: "b", EndedAt: ended, Returned: wire.Duration(35 * time.Second)},
		// Zone a of region r1, this service: evacuated.
		{ID: 2, Region: "r1", Zone: "a", Namespace: "shop", Service: "cart"},
		// Zone b again, of this service, returning at 0.1: the larger
		// shift wins.
		{ID: 3, Zone: "b", Namespace: "shop", Service: "cart", EndedAt: ended},
		// Zone c of another service: not this one's.
		{ID: 4, Zone: "c", Namespace: "shop", Service: "web"},
	}
	shiftOf(&cs, evs)
	want := map[string]uint8{"a1": status.ShiftAll, "b1": 90, "c1": 0, "x1": 0}
	for _, in := range cs.Instances {
		if in.Shift != want[in.Key] {
			t.Errorf("%s: shift %d, want %d", in.Key, in.Shift, want[in.Key])
		}
	}
}

// zoneAEvacuated registers shop/cart's a1 (zone a) and b1 (zone b),
// publishes them, and evacuates zone a: the table does not have it yet.
func zoneAEvacuated(t *testing.T) (*harness, []wire.Instance) {
	t.Helper()
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	h.apply(svc)
	var fleet []wire.Instance
	for i, z := range []string{"a", "b"} {
		r := reg(svc, z+"1", fmt.Sprintf("10.0.0.%d", i+1))
		r.Region, r.Zone = "r1", z
		fleet = append(fleet, h.register(r))
	}
	h.tick(0)
	if _, err := h.st.Evacuate(t.Context(), "admin", wire.EvacuateRequest{Zone: "a", Force: true}); err != nil {
		t.Fatal(err)
	}
	return h, fleet
}

// TestShiftPublishedOnCommit: an evacuation is in the table as soon as
// the store has applied it and the loop has taken the signal, before
// any round: its zone's instances shifted whole, the others not. With
// the table current, the signal builds nothing more.
func TestShiftPublishedOnCommit(t *testing.T) {
	h, fleet := zoneAEvacuated(t)
	select {
	case <-h.st.Shifted():
	default:
		t.Fatal("the store did not signal the evacuation")
	}
	h.n.publishShift()
	if e := h.entry(fleet[0]); !e.Evacuated() || !e.Flags.Has(status.Eligible) {
		t.Errorf("a1 after the evacuation, before any round: %+v; want evacuated and eligible", e)
	}
	if e := h.entry(fleet[1]); e.Shift != 0 {
		t.Errorf("b1 after the evacuation of zone a: shift %d, want 0", e.Shift)
	}
	v := h.pub.Acquire()
	before := v.Version()
	v.Release()
	h.n.publishShift()
	v = h.pub.Acquire()
	after := v.Version()
	v.Release()
	if after != before {
		t.Errorf("with the table current, publishShift built table version %d over %d", after, before)
	}
}

// TestReturnWaitsForTheRound: an evacuation is signalled and published
// at once; its end (the zone starts to return, an admission) is not
// signalled, and reaches the table at the node's next round, so that the
// servers' fan-outs of a return's step do not all fall together.
func TestReturnWaitsForTheRound(t *testing.T) {
	h, fleet := zoneAEvacuated(t)
	<-h.st.Shifted() // signalled: TestShiftPublishedOnCommit
	h.n.publishShift()
	before := h.st.ShiftRevision()
	if _, err := h.st.Evacuate(t.Context(), "admin", wire.EvacuateRequest{Zone: "a", Undo: true}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.st.Shifted():
		t.Error("the store signalled the end of an evacuation: a return's step would be published by every node at once")
	default:
	}
	if after := h.st.ShiftRevision(); after <= before {
		t.Errorf("ShiftRevision after the undo: %d, want past %d", after, before)
	}
	if e := h.entry(fleet[0]); !e.Evacuated() {
		t.Errorf("a1 after the undo, before the round: %+v; want still evacuated", e)
	}
	h.tick(time.Second)
	if e := h.entry(fleet[0]); !e.Returning() {
		t.Errorf("a1 after the undo and a round: %+v; want returning", e)
	}
}

// TestShiftPublishedAfterAWithdrawalCopy: a withdrawal published on
// commit after the evacuation stamps a copy of the table with a newer
// revision; the shift is still built at once, not at the next round.
func TestShiftPublishedAfterAWithdrawalCopy(t *testing.T) {
	h := newHarness(t, 0, nil)
	svc := tcpService("shop", "cart")
	svc.Policy.MaxUnavailable = "100%" // not a test of budgets
	h.apply(svc)
	var fleet []wire.Instance
	for i, z := range []string{"a", "b", "b"} {
		r := reg(svc, fmt.Sprintf("%s%d", z, i), fmt.Sprintf("10.0.0.%d", i+1))
		r.Region, r.Zone = "r1", z
		fleet = append(fleet, h.register(r))
	}
	h.tick(0)
	if _, err := h.st.Evacuate(t.Context(), "admin", wire.EvacuateRequest{Zone: "a", Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.st.Drain(t.Context(), "admin", fleet[2].Key(), fleet[2].Incarnation); err != nil {
		t.Fatal(err)
	}
	<-h.st.Withdrawn()
	h.n.publishWithdrawals(t.Context())
	if e := h.entry(fleet[0]); e.Evacuated() {
		t.Fatal("the withdrawal copy carried the shift: this test no longer tests the copy")
	}
	h.n.publishShift()
	if e := h.entry(fleet[0]); !e.Evacuated() {
		t.Fatalf("a0 after the evacuation and a withdrawal copy, before any round: %+v; want evacuated", e)
	}
}
