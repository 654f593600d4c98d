package peer_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/internal/backoff"
	"github.com/cairn-sd/cairn/peer"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// region is another region's xDS server on loopback, serving the
// tables a test publishes.
type region struct {
	tb   *statustest.Table
	addr string
	stop func()
}

func startRegion(t *testing.T) *region {
	t.Helper()
	tb := statustest.New(t, 64)
	srv, err := xdsserver.New(xdsserver.Config{Table: tb.Publisher, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := xdstest.Serve(srv)
	if err != nil {
		t.Fatal(err)
	}
	r := &region{tb: tb, addr: addr, stop: stop}
	t.Cleanup(stop)
	return r
}

var cartInfo = status.ServiceInfo{Namespace: "shop", Name: "cart", Ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}},
	DNSTTL: 5 * time.Second, ARecordLimit: 8, MinHealthyFraction: 0.5, ShrinkCap: 1, ShrinkWindow: time.Second}

// publish publishes shop/cart at rev with instances, each
// "id@region/zone" and ready unless prefixed with "-".
func (r *region) publish(t *testing.T, rev uint64, instances ...string) {
	t.Helper()
	cart := statustest.Service{ServiceInfo: cartInfo}
	for i, spec := range instances {
		id, loc, _ := strings.Cut(spec, "@")
		reg, zone, _ := strings.Cut(loc, "/")
		in := statustest.Ready(id, fmt.Sprintf("10.2.0.%d", i+1))
		if down, ok := strings.CutPrefix(id, "-"); ok {
			in = statustest.Withdrawn(down, in.Addrs...)
		}
		in.Ports = map[string]uint16{"http": 8080}
		cart.Instances = append(cart.Instances, in.In(reg, zone))
	}
	r.tb.PublishAt(t, rev, cart)
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// follow starts Peers following region b at addr, keeping its views in
// dir, and returns it with a stop that waits for Run to return.
func follow(t *testing.T, addr, dir string, clk *clock) (*peer.Peers, func()) {
	t.Helper()
	return followWith(t, addr, dir, clk, prometheus.NewRegistry())
}

func followWith(t *testing.T, addr, dir string, clk *clock, reg *prometheus.Registry) (*peer.Peers, func()) {
	t.Helper()
	p, err := peer.New(peer.Config{Regions: []peer.Region{{Name: "b", Servers: []string{addr}}}, Own: "a", NodeID: "a1",
		Dir: dir, StaleAfter: 2 * time.Second, Backoff: backoff.Config{Min: 20 * time.Millisecond, Max: 50 * time.Millisecond},
		Now: clk.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	p.Follow([]string{"shop/cart"})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return p, stop
}

// got describes the snapshot's shop/cart: "id@region/zone" per instance,
// "-" before one not eligible, "~" after one marked stale.
func got(p *peer.Peers) []string {
	var out []string
	_, of := p.Instances()
	for _, in := range of("shop", "cart") {
		s := in.ID + "@" + in.Region + "/" + in.Zone
		if !in.Flags.Has(status.Eligible) {
			s = "-" + s
		}
		if in.Flags.Has(status.PeerStale) {
			s += "~"
		}
		out = append(out, s)
	}
	return out
}

func waitFor(t *testing.T, p *peer.Peers, want ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		g := got(p)
		if slices.Equal(g, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("snapshot %v, want %v", g, want)
		}
		select {
		case <-p.Changed():
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// A region's view is taken for its own instances only (not the
// instances it holds of a third region, or of this one), as it says
// they are; past stale-after without a stream they are kept, marked
// stale; kept on disk, they are there at a restart with the region
// still gone; the region back, they are fresh again and never older.
func TestFollowRegion(t *testing.T) {
	clk := &clock{now: time.Unix(1_700_000_000, 0)}
	b := startRegion(t)
	b.publish(t, 10, "b1@b/b-1", "-b2@b/b-2", "a9@a/a-1", "c1@c/c-1", "x1@/")
	dir := t.TempDir()
	p, stop := follow(t, b.addr, dir, clk)
	waitFor(t, p, "b1@b/b-1", "-b2@b/b-2", "x1@b/")
	st := p.Status()
	if len(st) != 1 || !st[0].Connected || st[0].Stale || st[0].Revision != 10 || st[0].Instances != 3 {
		t.Fatalf("status %+v, want b connected, fresh, at revision 10 with 3 instances", st)
	}
	// Cut off: the view is kept, and marked stale once older than
	// stale-after.
	b.stop()
	for deadline := time.Now().Add(10 * time.Second); p.Status()[0].Connected; {
		if time.Now().After(deadline) {
			t.Fatal("still connected to b 10s after its server stopped")
		}
		time.Sleep(10 * time.Millisecond) // polled: the agent's stream ending has no signal of its own
	}
	clk.add(3 * time.Second)
	waitFor(t, p, "b1@b/b-1~", "-b2@b/b-2~", "x1@b/~")
	stop()
	// Restarted with the region still gone: the view kept on disk.
	p2, stop2 := follow(t, b.addr, dir, clk)
	if g := got(p2); !slices.Equal(g, []string{"b1@b/b-1~", "-b2@b/b-2~", "x1@b/~"}) {
		t.Fatalf("restarted from disk: %v, want b's last view, stale", g)
	}
	stop2()
	// The region back with an older table (a server restored from
	// its disk): nothing older is taken; then a newer one is.
	b2 := startRegion(t)
	b2.publish(t, 9, "b3@b/b-1")
	reg := prometheus.NewRegistry()
	p3, _ := followWith(t, b2.addr, dir, clk, reg)
	for deadline := time.Now().Add(10 * time.Second); nacks(t, reg) == 0; {
		if time.Now().After(deadline) {
			t.Fatal("the view at revision 9 was not refused within 10s")
		}
		time.Sleep(10 * time.Millisecond) // polled: a refusal has no signal of its own
	}
	if g := got(p3); !slices.Equal(g, []string{"b1@b/b-1~", "-b2@b/b-2~", "x1@b/~"}) {
		t.Fatalf("after b's older table: %v, want the view kept at revision 10", g)
	}
	b2.publish(t, 11, "b1@b/b-1", "b4@b/b-3")
	waitFor(t, p3, "b1@b/b-1", "b4@b/b-3")
}

// Bad regions are refused with the rule they break, before anything
// runs.
func TestRegionsChecked(t *testing.T) {
	for _, tt := range []struct {
		regions []peer.Region
		want    string
	}{
		{[]peer.Region{{Name: "B", Servers: []string{"x:1"}}}, "DNS label"},
		{[]peer.Region{{Name: "a", Servers: []string{"x:1"}}}, "own region"},
		{[]peer.Region{{Name: "b", Servers: []string{"x:1"}}, {Name: "b", Servers: []string{"y:1"}}}, "named twice"},
		{[]peer.Region{{Name: "b"}}, "at least one server"},
	} {
		_, err := peer.New(peer.Config{Regions: tt.regions, Own: "a"})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want an error saying %q", tt.regions, err, tt.want)
		}
	}
}

// nacks is the region's agent's count of refused responses.
func nacks(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "cairn_agent_nacks_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
