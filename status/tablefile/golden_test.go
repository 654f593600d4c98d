package tablefile

import (
	"bytes"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/golden"

	"github.com/cairn-sd/cairn/status"
)

// goldenSnapshot is a table with an entry of every verdict, every
// lifecycle and every flag, and the views an agent keeps with it.
func goldenSnapshot(t *testing.T) *Snapshot {
	t.Helper()
	pub, err := status.New(status.Config{Capacity: 8})
	if err != nil {
		t.Fatal(err)
	}
	d := &status.Directory{Revision: 42, Services: []status.ServiceInfo{{},
		{Namespace: "shop", Name: "cart", DNSTTL: 5 * time.Second, ARecordLimit: 8, MinHealthyFraction: 0.5,
			MaxEjectionPercent: 10, ShrinkCap: 0.33, ShrinkWindow: 10 * time.Second,
			Ports: []status.Port{{Name: "http", Number: 8080, Protocol: "tcp"}, {Name: "dns", Number: 53, Protocol: "udp"}}}},
		Instances: make([]*status.InstanceInfo, 8)}
	entries := []status.Entry{
		{Verdict: status.Unknown, Lifecycle: status.Starting},
		{Verdict: status.Healthy, Lifecycle: status.Ready, Flags: status.Eligible | status.SlowStart, Weight: 40},
		{Verdict: status.Degraded, Lifecycle: status.Ready, Flags: status.Eligible | status.DependencyDegraded | status.OutcomeDegraded, Weight: 25},
		{Verdict: status.Unhealthy, Lifecycle: status.Ready, Flags: status.Eligible | status.HealthDisregarded | status.WithdrawalDeferred, Weight: 100},
		{Verdict: status.Quarantined, Lifecycle: status.Draining, Flags: status.LeaseExpired},
		{Verdict: status.Unknown, Lifecycle: status.Terminated, Flags: 0x80},
	}
	_, err = pub.Build(func(b *status.Builder) error {
		es := b.Entries()
		clear(es)
		for i, e := range entries {
			id := string(rune('a' + i))
			e.Key, e.Incarnation, e.Service = status.KeyHash("shop/cart/"+id), uint64(1<<60+i), 1
			e.BaseWeight, e.Region, e.Zone = 100, 1, uint16(2+i%2)
			es[i+1] = e
			d.Instances[i+1] = &status.InstanceInfo{ID: id, Incarnation: e.Incarnation,
				Addrs: []netip.Addr{netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")}, Ports: map[string]uint16{"http": 8080}}
		}
		d.Index(func(slot int) uint32 { return es[slot].Service }, nil)
		b.SetStoreRevision(42)
		b.SetServices(status.NewNames("shop/cart"))
		b.SetLocalities(status.NewNames("r1", "za", "zb"))
		b.SetDirectory(d)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tbl := pub.Acquire()
	defer tbl.Release()
	s := Take(tbl, t0, t0.Add(time.Second))
	s.Views = []View{{Name: "cart.shop", Revision: 41, Version: "v41", Received: t0, Refreshed: t0.Add(time.Second)}}
	return s
}

// TestGoldenFile pins the bytes of the table file, a server's and an
// agent's kept views alike: a node reads the file its previous version
// wrote.
func TestGoldenFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "table.cairn")
	if err := Save(path, goldenSnapshot(t)); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := golden.Check(t, "table.golden", got)
	s, err := Load(filepath.Join("testdata", "table.golden"))
	if err != nil {
		t.Fatal(err)
	}
	again := filepath.Join(dir, "again.cairn")
	if err := Save(again, s); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(again); !bytes.Equal(b, want) {
		t.Errorf("the golden file loads and saves back as\n%s", b)
	}
}
