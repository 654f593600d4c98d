package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

// TestGracefulStopHandsOver: SIGTERM to the leader of a 3-node cluster
// exits cleanly, and the renewal it acknowledged just before is on the new
// leader as a recorded deadline at least as late (replicated by the
// handoff; the new leader's grace, which rewrites every live lease to one
// TTL from its takeover, may only move it later).
func TestGracefulStopHandsOver(t *testing.T) {
	needProcesses(t)
	c := StartCluster(t, 3)
	ctx := ctxT(t, time.Minute)
	old, err := c.Leader()
	if err != nil {
		t.Fatal(err)
	}
	cl := old.Client()
	if _, err := cl.Apply(ctx, []byte(testService)); err != nil {
		t.Fatal(err)
	}
	r, err := cl.Register(ctx, testNS, testSvc, registration("i-1", 1))
	if err != nil {
		t.Fatal(err)
	}
	key := wire.InstanceKey{Namespace: testNS, Service: testSvc, ID: "i-1"}
	renewed, err := cl.Renew(ctx, key, r.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Stop(); err != nil {
		t.Fatalf("SIGTERM to the leader: %v", err)
	}
	var leader *Node
	Eventually(t, 10*time.Second, func() error {
		l, err := c.Leader()
		if err != nil {
			return err
		}
		if l == old {
			return fmt.Errorf("%s is still named leader", l.ID)
		}
		leader = l
		return nil
	})
	Eventually(t, 5*time.Second, func() error {
		es, err := leader.Client().Endpoints(ctx, testNS, testSvc)
		if err != nil {
			return err
		}
		// At least the renewal's deadline: the new leader's grace may
		// move it later (one TTL from its takeover), never earlier.
		if len(es) != 1 || es[0].LeaseDeadline.Before(renewed.LeaseDeadline) {
			return fmt.Errorf("new leader %s records %+v; want at least the deadline %s renewed on %s", leader.ID, es, renewed.LeaseDeadline, old.ID)
		}
		return nil
	})
}
