package statustest_test

import (
	"net/netip"
	"testing"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
)

// TestPublish: a table published here holds what the test described, as
// a reader finds it (by name, through the directory), with the defaults
// applied; an address changed without a new incarnation reaches the
// readers.
func TestPublish(t *testing.T) {
	tb := statustest.New(t, 8)
	pay := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay"},
		Instances: []statustest.Instance{statustest.Ready("p0", "10.0.0.1").In("eu", "eu-1a"), statustest.Withdrawn("p1", "::ffff:10.0.0.2")}}
	if v := tb.Publish(t, pay); v != 1 {
		t.Fatalf("first table: version %d", v)
	}
	check := func(name, addr string, want status.Entry) {
		t.Helper()
		tbl := tb.Publisher.Acquire()
		defer tbl.Release()
		d := tbl.Directory()
		slot, ok := d.SlotOf(name)
		if !ok {
			t.Fatalf("%s: not in the directory", name)
		}
		e := tbl.Entry(int(slot))
		e.Key, e.Service, e.Region, e.Zone = 0, 0, 0, 0
		if e != want {
			t.Errorf("%s: entry %+v, want %+v", name, e, want)
		}
		if got := d.Instance(int(slot)).Addrs; len(got) != 1 || got[0] != netip.MustParseAddr(addr) {
			t.Errorf("%s: addresses %v, want %s", name, got, addr)
		}
	}
	check("p0.pay.shop", "10.0.0.1", status.Entry{Incarnation: 1, Weight: 100, BaseWeight: 100, Verdict: status.Healthy,
		Lifecycle: status.Ready, Flags: status.Eligible})
	check("p1.pay.shop", "10.0.0.2", status.Entry{Incarnation: 1, BaseWeight: 100, Verdict: status.Unhealthy, Lifecycle: status.Ready})
	pay.Instances[1].Addrs = []string{"10.0.0.3"}
	tb.Publish(t, pay)
	check("p1.pay.shop", "10.0.0.3", status.Entry{Incarnation: 1, BaseWeight: 100, Verdict: status.Unhealthy, Lifecycle: status.Ready})
}
