package xdsserver

import (
	"testing"

	"github.com/cairn-sd/cairn/status/statustest"
)

// TestWithdrawalOnCommitKeepsDefinitions: a withdrawal published on
// commit is the current table with the same directory; the hub takes the
// assignment's change and wakes its watcher without looking at the
// services' definitions again, and a table with a new directory whose
// definition changed still rebuilds the service's cluster.
func TestWithdrawalOnCommitKeepsDefinitions(t *testing.T) {
	tb := statustest.New(t, 64)
	svcs := benchServices(2, 2)
	tb.Publish(t, svcs...)
	m, _ := newMetrics(nil)
	h := newHub(tb.Publisher, m)
	sig := newSignal()
	mem, err := h.join(place{}, sig, false)
	if err != nil {
		t.Fatal(err)
	}
	const eds, cds = "s000.bench:grpc", "s000.bench:grpc"
	h.watch(mem, endpointIdx, false, []string{eds}, nil)
	h.watch(mem, clusterIdx, false, []string{cds}, nil)
	clusters := h.clusters
	cluster := clusters[cds].version

	cur := tb.Publisher.Acquire()
	slot, dir := int(cur.Members(1)[0]), cur.Directory()
	cur.Release()
	flipOnCommit(t, tb.Publisher, slot)
	if cur := tb.Publisher.Acquire(); cur.Directory() != dir {
		cur.Release()
		t.Fatal("the withdrawal's table has another directory: the test does not test the same-directory path")
	} else {
		cur.Release()
	}
	h.refresh()
	select {
	case <-sig.ch:
	default:
		t.Fatal("the assignment's watcher was not woken by the withdrawal")
	}
	if got := len(h.view(mem).res[endpointIdx][eds].rotation); got != 1 {
		t.Fatalf("after the withdrawal %s has %d endpoints in rotation, want 1", eds, got)
	}
	if w := h.take(mem, clusterIdx); len(w.names) != 0 || w.all {
		t.Errorf("the withdrawal marked clusters changed: %v", w)
	}
	if h.view(mem).res[clusterIdx][cds].version != cluster {
		t.Errorf("the withdrawal changed the cluster %s", cds)
	}

	// A new definition comes with a new directory: the cluster is built again.
	svcs[0].MaxEjectionPercent = 30
	tb.Publish(t, svcs...)
	h.refresh()
	if h.view(mem).res[clusterIdx][cds].version == cluster {
		t.Errorf("a changed definition in a new directory left the cluster %s as it was", cds)
	}
}
