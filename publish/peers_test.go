package publish

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// fakePeers is a Peers whose instances the test sets: the real one
// (package peer) is tested against real servers in its own package.
type fakePeers struct {
	mu       sync.Mutex
	gen      uint64
	ins      map[string][]status.Instance
	followed [][]string
	changed  chan struct{}
}

func (f *fakePeers) Follow(s []string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.followed = append(f.followed, slices.Clone(s))
}

func (f *fakePeers) Instances() (uint64, func(ns, svc string) []status.Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ins := f.ins
	return f.gen, func(ns, svc string) []status.Instance { return ins[ns+"/"+svc] }
}

func (f *fakePeers) Changed() <-chan struct{} { return f.changed }

func (f *fakePeers) set(key string, ins ...status.Instance) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := map[string][]status.Instance{}
	for k, v := range f.ins {
		next[k] = v
	}
	next[key] = ins
	f.ins = next
	f.gen++
}

func peerInstance(id, zone string, addr string, inc uint64, flags status.Flags, weight uint16) status.Instance {
	return status.Instance{ID: id, Incarnation: inc, Region: "r2", Zone: zone,
		Info:    &status.InstanceInfo{Addrs: []netip.Addr{netip.MustParseAddr(addr)}, Ports: map[string]uint16{"main": 8080}},
		Verdict: status.Healthy, Lifecycle: status.Ready, Flags: flags, Weight: weight, BaseWeight: 100}
}

// Another region's instances are laid out beside the store's, as they
// came (incarnation, verdict, flags, weight, region), never judged here;
// one whose id an instance of this region has is left out; a new
// generation is laid out again without a store revision, and a service
// the store holds is followed.
func TestPeersInTheTable(t *testing.T) {
	fp := &fakePeers{changed: make(chan struct{}, 1)}
	h := newHarness(t, 0, func(c *Config) { c.Peers = fp })
	svc := tcpService("shop", "cart")
	h.apply(svc)
	local := h.register(reg(svc, "a1", "10.0.0.1"))
	fp.set("shop/cart",
		peerInstance("a1", "r2-a", "10.2.0.9", 3, status.Eligible, 100), // shadowed by this region's a1
		peerInstance("b1", "r2-a", "10.2.0.1", 41, status.Eligible|status.SlowStart, 30),
		peerInstance("b2", "r2-b", "10.2.0.2", 42, 0, 0))
	h.tick(0)
	if got := fp.followed; len(got) == 0 || !slices.Equal(got[len(got)-1], []string{"shop/cart"}) {
		t.Fatalf("followed %v, want [shop/cart]", got)
	}
	h.wantEntry(local, status.Unknown, true)
	peerEntry := func(id string) (status.Entry, *status.InstanceInfo, bool) {
		t.Helper()
		slot, ok := h.n.Slot("shop/cart/" + id)
		if !ok {
			return status.Entry{}, nil, false
		}
		tb := h.pub.Acquire()
		defer tb.Release()
		return tb.Entry(slot), tb.Directory().Instance(slot), true
	}
	tb := h.pub.Acquire()
	r2 := tb.LocalityOf("r2", "r2-a").Region
	tb.Release()
	e, info, ok := peerEntry("b1")
	if !ok || e.Incarnation != 41 || e.Region != r2 || e.Verdict != status.Healthy || e.Weight != 30 ||
		!e.Flags.Has(status.Eligible|status.SlowStart) || info == nil || info.Addrs[0].String() != "10.2.0.1" {
		t.Fatalf("b1: %+v %+v (in table %v), want incarnation 41 in r2, healthy, eligible at weight 30", e, info, ok)
	}
	if e, _, ok := peerEntry("b2"); !ok || e.Flags.Has(status.Eligible) || e.Weight != 0 {
		t.Fatalf("b2: %+v (%v), want in the table, not eligible", e, ok)
	}
	if e := h.entry(local); e.Incarnation != local.Incarnation {
		t.Fatalf("a1 is this region's: %+v", e)
	}
	// The other region's view moves (b1 stale, b2 gone): laid out again
	// at the same store revision.
	rev := h.st.Revision()
	fp.set("shop/cart", peerInstance("b1", "r2-a", "10.2.0.1", 41, status.Eligible|status.PeerStale, 100))
	h.n.publishOutside()
	if h.st.Revision() != rev {
		t.Fatalf("the store moved: %d → %d", rev, h.st.Revision())
	}
	if e, _, ok := peerEntry("b1"); !ok || !e.Flags.Has(status.Eligible|status.PeerStale) || e.Weight != 100 {
		t.Fatalf("b1 after its view moved: %+v (%v), want eligible, stale, weight 100", e, ok)
	}
	if _, _, ok := peerEntry("b2"); ok {
		t.Fatal("b2 is still in the table after its region's view dropped it")
	}
	// A service applied is followed too.
	h.apply(tcpService("shop", "web"))
	h.tick(0)
	if got := fp.followed[len(fp.followed)-1]; !slices.Equal(got, []string{"shop/cart", "shop/web"}) {
		t.Fatalf("followed %v after shop/web was applied, want both", got)
	}
	if e, _, ok := peerEntry("b1"); !ok || !e.Flags.Has(status.PeerStale) {
		t.Fatalf("b1 after a store revision: %+v (%v), want as its view says", e, ok)
	}
}

// fakeSignal is a Signal whose failovers the test sets (package
// failover reads real files and URLs in its own tests).
type fakeSignal struct {
	mu  sync.Mutex
	fos []wire.Evacuation
}

func (f *fakeSignal) Failovers(now time.Time) []wire.Evacuation {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.fos)
	for i := range out {
		if !out[i].EndedAt.IsZero() {
			out[i].Returned = wire.Duration(now.Sub(out[i].EndedAt))
		}
	}
	return out
}

func (f *fakeSignal) Changed() <-chan struct{} { return nil }

// The out-of-band signal's failovers shift the region's own instances
// at each build, without the store: in force, all of it; ended, what
// its share has not taken back, moving on with the clock. Other
// regions' instances are untouched.
func TestSignalledFailover(t *testing.T) {
	sig := &fakeSignal{}
	h := newHarness(t, 0, func(c *Config) { c.Signal = sig })
	svc := tcpService("shop", "cart")
	window := wire.Duration(100 * time.Second)
	svc.Policy.ShiftBack = &window
	a1, x1 := h.inTwoRegions(svc)
	rev := h.st.Revision()
	sig.mu.Lock()
	sig.fos = []wire.Evacuation{{Region: "r1", To: "r2"}}
	sig.mu.Unlock()
	h.n.publishOutside()
	if e := h.entry(a1); !e.Evacuated() {
		t.Fatalf("a1 with r1 failed over: %+v, want evacuated", e)
	}
	if e := h.entry(x1); e.Shift != 0 {
		t.Fatalf("x1 of r2: shift %d, want 0", e.Shift)
	}
	sig.mu.Lock()
	sig.fos[0].EndedAt = h.clk.Now()
	sig.mu.Unlock()
	h.tick(35 * time.Second)
	if e := h.entry(a1); e.Shift != 60 {
		t.Fatalf("a1 35s into a 100s return: shift %d, want 60", e.Shift)
	}
	if h.st.Revision() != rev {
		t.Fatalf("the store moved: %d → %d", rev, h.st.Revision())
	}
}

// inTwoRegions applies svc with a1 in region r1 and x1 in r2, and
// publishes them.
func (h *harness) inTwoRegions(svc wire.Service) (a1, x1 wire.Instance) {
	h.t.Helper()
	h.apply(svc)
	r := reg(svc, "a1", "10.0.0.1")
	r.Region, r.Zone = "r1", "z"
	a1 = h.register(r)
	r = reg(svc, "x1", "10.0.0.2")
	r.Region, r.Zone = "r2", "z"
	x1 = h.register(r)
	h.tick(0)
	return a1, x1
}
