package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestRestartKeepsState: what a single node committed survives kill -9 and
// a restart from the same data dir, with the same incarnations, and a new
// registration afterwards gets a larger incarnation than any before.
func TestRestartKeepsState(t *testing.T) {
	needProcesses(t)
	c := StartCluster(t, 1)
	n := c.Nodes[0]
	cl := n.Client()
	ctx := ctxT(t, time.Minute)

	if _, err := cl.Apply(ctx, []byte(testService)); err != nil {
		t.Fatalf("apply: %v", err)
	}
	incs := map[string]uint64{}
	var maxInc uint64
	for i, id := range []string{"i-1", "i-2", "i-3"} {
		r, err := cl.Register(ctx, testNS, testSvc, registration(id, i))
		if err != nil {
			t.Fatalf("register %s: %v", id, err)
		}
		if !r.Created || r.Incarnation == 0 {
			t.Fatalf("register %s: created=%v incarnation=%d; want a new incarnation", id, r.Created, r.Incarnation)
		}
		incs[id] = r.Incarnation
		maxInc = max(maxInc, r.Incarnation)
	}
	key := func(id string) wire.InstanceKey {
		return wire.InstanceKey{Namespace: testNS, Service: testSvc, ID: id}
	}
	renewed, err := cl.Renew(ctx, key("i-1"), incs["i-1"])
	if err != nil {
		t.Fatalf("renew i-1: %v", err)
	}
	drained, err := cl.Drain(ctx, key("i-2"), incs["i-2"])
	if err != nil {
		t.Fatalf("drain i-2: %v", err)
	}
	if drained.Lifecycle != status.Draining {
		t.Fatalf("drain i-2: lifecycle %q; want %q", drained.Lifecycle, status.Draining)
	}
	svcBefore, err := cl.Service(ctx, testNS, testSvc)
	if err != nil {
		t.Fatal(err)
	}
	before, err := cl.Endpoints(ctx, testNS, testSvc)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 3 {
		t.Fatalf("before the crash: %d endpoints; want 3: %+v", len(before), before)
	}

	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}

	// /readyz says DNS and xDS have a table (perhaps the one kept on
	// disk); the restarted replica may still be applying its log for a
	// moment, so poll until it shows everything.
	var after []wire.Endpoint
	Eventually(t, 10*time.Second, func() error {
		after, err = cl.Endpoints(ctx, testNS, testSvc)
		if err != nil {
			return err
		}
		return sameEndpoints(before, after)
	})
	for _, e := range after {
		switch e.InstanceID {
		case "i-1":
			// The renewal may not have been checkpointed before the kill;
			// the restarted leader's grace still covers it.
			if e.LeaseExpiry.Before(renewed.LeaseDeadline) || e.LeaseExpired {
				t.Errorf("i-1: lease expires at %s after the restart, earlier than the renewed %s", e.LeaseExpiry, renewed.LeaseDeadline)
			}
		case "i-2":
			if e.Lifecycle != status.Draining {
				t.Errorf("i-2: lifecycle %q after the restart; want %q", e.Lifecycle, status.Draining)
			}
		}
	}
	svcAfter, err := cl.Service(ctx, testNS, testSvc)
	if err != nil {
		t.Fatalf("service after the restart: %v", err)
	}
	if svcAfter.Definition.Revision != svcBefore.Definition.Revision || svcAfter.Definition.Policy.DrainWindow != svcBefore.Definition.Policy.DrainWindow {
		t.Errorf("definition after the restart: %+v; before: %+v", svcAfter.Definition, svcBefore.Definition)
	}

	// An identical retry of a registration made before the crash is still
	// recognised: same incarnation, nothing created.
	r, err := cl.Register(ctx, testNS, testSvc, registration("i-3", 2))
	if err != nil {
		t.Fatalf("re-register i-3: %v", err)
	}
	if r.Created || r.Incarnation != incs["i-3"] {
		t.Errorf("re-register i-3 after the restart: created=%v incarnation=%d; want created=false incarnation=%d", r.Created, r.Incarnation, incs["i-3"])
	}
	// The incarnation counter survived too.
	r, err = cl.Register(ctx, testNS, testSvc, registration("i-4", 3))
	if err != nil {
		t.Fatalf("register i-4: %v", err)
	}
	if !r.Created || r.Incarnation <= maxInc {
		t.Errorf("register i-4 after the restart: created=%v incarnation=%d; want a new incarnation > %d", r.Created, r.Incarnation, maxInc)
	}
	// Fencing still holds for the renewed instance.
	if _, err := cl.Renew(ctx, key("i-1"), incs["i-1"]); err != nil {
		t.Errorf("renew i-1 after the restart: %v", err)
	}
}

// sameEndpoints compares what must survive a restart: the set of
// instances, their incarnations, addresses, ports, lifecycle and weight.
func sameEndpoints(want, got []wire.Endpoint) error {
	if len(got) != len(want) {
		return fmt.Errorf("%d endpoints; want %d: %+v", len(got), len(want), got)
	}
	byID := map[string]wire.Endpoint{}
	for _, e := range got {
		byID[e.InstanceID] = e
	}
	for _, w := range want {
		g, ok := byID[w.InstanceID]
		switch {
		case !ok:
			return fmt.Errorf("instance %s is missing", w.InstanceID)
		case g.Incarnation != w.Incarnation:
			return fmt.Errorf("instance %s: incarnation %d; want %d", w.InstanceID, g.Incarnation, w.Incarnation)
		case !slices.Equal(g.Addresses, w.Addresses) || fmt.Sprint(g.Ports) != fmt.Sprint(w.Ports):
			return fmt.Errorf("instance %s: addresses %v ports %v; want %v %v", w.InstanceID, g.Addresses, g.Ports, w.Addresses, w.Ports)
		case g.Lifecycle != w.Lifecycle || g.BaseWeight != w.BaseWeight:
			return fmt.Errorf("instance %s: lifecycle %s weight %d; want %s %d", w.InstanceID, g.Lifecycle, g.BaseWeight, w.Lifecycle, w.BaseWeight)
		}
	}
	return nil
}
