package history

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable clock for the publisher and the history.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

var t0 = time.Date(2026, 12, 6, 14, 2, 17, 0, time.UTC)

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = t
}

// rig is a table, a history recording it, and their clock.
type rig struct {
	clock *clock
	tb    *statustest.Table
	h     *History
}

func newRig(t *testing.T, capacity int, cfg Config) *rig {
	t.Helper()
	c := &clock{t: t0}
	pub, err := status.New(status.Config{Capacity: capacity, Now: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Table, cfg.Now = pub, c.Now
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &rig{clock: c, tb: &statustest.Table{Publisher: pub, Writer: status.NewWriter(pub, status.WriterConfig{})}, h: h}
}

// publish publishes services at time at and records the table.
func (r *rig) publish(t *testing.T, at time.Time, services ...statustest.Service) {
	t.Helper()
	r.clock.Set(at)
	r.tb.Publish(t, services...)
	tab := r.tb.Publisher.Acquire()
	defer tab.Release()
	r.h.Record(tab)
}

func svc(ns, name string, ins ...statustest.Instance) statustest.Service {
	return statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: ns, Name: name,
		Ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}, Instances: ins}
}

func drained(in statustest.Instance) statustest.Instance {
	in.Lifecycle, in.Flags, in.Weight = status.Draining, 0, 0
	return in
}

// eligible lists the ids of a point's eligible members.
func eligible(p *Point) []string {
	var out []string
	for _, m := range p.Members {
		if m.Entry.Flags.Has(status.Eligible) {
			out = append(out, m.Instance.ID)
		}
	}
	return out
}

func at(t *testing.T, h *History, ns, name string, when time.Time) *Point {
	t.Helper()
	p, err := h.At(ns, name, when)
	if err != nil {
		t.Fatalf("At(%s/%s, %s): %v", ns, name, when, err)
	}
	return p
}

// The sequence at the history: registered, one drained at T,
// another failed at T+10 s.
func TestReplayDrainThenFail(t *testing.T) {
	r := newRig(t, 16, Config{})
	a, b, c := statustest.Ready("a", "10.0.0.1").In("r1", "z1"), statustest.Ready("b", "10.0.0.2").In("r1", "z2"),
		statustest.Ready("c", "10.0.0.3").In("r1", "z1")
	T := t0.Add(time.Minute)
	r.publish(t, t0, svc("shop", "pay", a, b, c))
	for s := t0.Add(time.Second); s.Before(T); s = s.Add(time.Second) {
		r.publish(t, s, svc("shop", "pay", a, b, c)) // nothing changes: nothing recorded
	}
	r.publish(t, T, svc("shop", "pay", drained(a), b, c))
	r.publish(t, T.Add(10*time.Second), svc("shop", "pay", drained(a), statustest.Withdrawn("b", "10.0.0.2").In("r1", "z2"), c))

	for _, tc := range []struct {
		when time.Time
		want string
	}{
		{T.Add(-time.Second), "[a b c]"},
		{T.Add(time.Second), "[b c]"},
		{T.Add(11 * time.Second), "[c]"},
	} {
		p := at(t, r.h, "shop", "pay", tc.when)
		if got := fmt.Sprint(eligible(p)); got != tc.want {
			t.Errorf("eligible at %s: %s, want %s", tc.when.Sub(T), got, tc.want)
		}
		if len(p.Members) != 3 || p.Members[1].Zone != "z2" || p.Members[1].Instance.Addrs[0].String() != "10.0.0.2" {
			t.Errorf("at %s: members %+v", tc.when.Sub(T), p.Members)
		}
	}
	if p := at(t, r.h, "shop", "pay", T.Add(time.Second)); !p.At.Equal(T) || p.Members[0].Entry.Lifecycle != status.Draining {
		t.Errorf("at T+1s: built %s, a %s; want the table of T, draining", p.At, p.Members[0].Entry.Lifecycle)
	}
	if n := r.h.services["shop/pay"].steps; n != 3 {
		t.Errorf("%d steps recorded, want 3: unchanged tables are not steps", n)
	}
	if _, err := r.h.At("shop", "pay", t0.Add(-time.Second)); !errors.As(err, new(*TooOldError)) {
		t.Errorf("before the history: %v, want a TooOldError", err)
	}
	if _, err := r.h.At("shop", "nope", T); !errors.Is(err, ErrUnknown) {
		t.Errorf("unknown service: %v", err)
	}

	ch, err := r.h.Changes("shop", "pay", T.Add(-time.Minute), T.Add(11*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if len(ch) != 2 || ch[0].After.Instance.ID != "a" || ch[0].Before.Entry.Lifecycle != status.Ready ||
		ch[1].After.Instance.ID != "b" || ch[1].After.Entry.Verdict != status.Unhealthy {
		t.Errorf("changes in the minute before T+11s: %+v", ch)
	}
}

// A slot that moves to another service leaves the first.
func TestSlotChangesService(t *testing.T) {
	r := newRig(t, 4, Config{})
	r.publish(t, t0, svc("shop", "pay", statustest.Ready("a", "10.0.0.1")))
	r.publish(t, t0.Add(time.Second), svc("shop", "pay"), svc("shop", "cart", statustest.Ready("x", "10.0.0.9")))
	if p := at(t, r.h, "shop", "pay", t0.Add(2*time.Second)); len(p.Members) != 0 {
		t.Errorf("pay after a left: %+v", p.Members)
	}
	if p := at(t, r.h, "shop", "cart", t0.Add(2*time.Second)); fmt.Sprint(eligible(p)) != "[x]" {
		t.Errorf("cart: %v", eligible(p))
	}
}

// Past the window and the service's newest Changes steps, steps fold
// into the base: the state is the same, the history starts later.
func TestWindowFolds(t *testing.T) {
	r := newRig(t, 8, Config{Window: time.Hour, Changes: 2})
	a := statustest.Ready("a", "10.0.0.1")
	for i := range 10 {
		a.Weight = uint16(10 + i)
		r.publish(t, t0.Add(time.Duration(i)*time.Minute), svc("shop", "pay", a))
	}
	// Two hours on: only the newest 2 steps are kept.
	a.Weight = 99
	end := t0.Add(2 * time.Hour)
	r.publish(t, end, svc("shop", "pay", a))
	s := r.h.services["shop/pay"]
	if n := len(s.log.live()); n != 2 {
		t.Fatalf("%d steps kept, want 2", n)
	}
	if p := at(t, r.h, "shop", "pay", t0.Add(9*time.Minute)); p.Members[0].Entry.Weight != 19 || p.Members[0].Instance == nil {
		t.Errorf("at the last folded step: %+v", p.Members)
	}
	var old *TooOldError
	if _, err := r.h.At("shop", "pay", t0.Add(8*time.Minute-time.Second)); !errors.As(err, &old) || !old.Since.Equal(t0.Add(8*time.Minute)) {
		t.Errorf("before the base: %v, want the history to start at the last step let go (+8m)", err)
	}
	if p := at(t, r.h, "shop", "pay", end); p.Members[0].Entry.Weight != 99 {
		t.Errorf("now: weight %d", p.Members[0].Entry.Weight)
	}
}

// A namespace that churns past Bytes loses its own steps, never a quiet
// one's (the test at the history: 100,000 changes).
func TestNoisyNamespaceKeepsToItself(t *testing.T) {
	r := newRig(t, 8, Config{Bytes: 20_000})
	quiet := statustest.Ready("q", "10.0.1.1")
	noisy := statustest.Ready("n", "10.0.2.1")
	step := 0
	next := func() time.Time { step++; return t0.Add(time.Duration(step) * time.Millisecond) }
	for i := range 50 {
		quiet.Weight = uint16(1 + i)
		r.publish(t, next(), svc("quiet", "db", quiet), svc("noisy", "web", noisy))
	}
	for i := range 100_000 {
		noisy.Weight = uint16(1 + i%1000)
		r.publish(t, next(), svc("quiet", "db", quiet), svc("noisy", "web", noisy))
	}
	if n := r.h.services["quiet/db"].steps; n != 50 {
		t.Errorf("quiet/db keeps %d steps, want its 50", n)
	}
	if r.h.held > 20_000 {
		t.Errorf("%d bytes held, past Bytes", r.h.held)
	}
	if p := at(t, r.h, "quiet", "db", t0.Add(2*time.Millisecond)); p.Members[0].Entry.Weight != 2 {
		t.Errorf("quiet/db at its second step: weight %d", p.Members[0].Entry.Weight)
	}
}

func TestAtRevision(t *testing.T) {
	r := newRig(t, 8, Config{})
	a := statustest.Ready("a", "10.0.0.1")
	r.tb.PublishAt(t, 4) // an empty table before
	r.clock.Set(t0)
	r.tb.PublishAt(t, 5, svc("shop", "pay", a))
	r.record()
	a.Weight = 50
	r.clock.Set(t0.Add(time.Second))
	r.tb.PublishAt(t, 7, svc("shop", "pay", a))
	r.record()
	a.Weight = 60
	r.clock.Set(t0.Add(2 * time.Second))
	r.tb.PublishAt(t, 7, svc("shop", "pay", a))
	r.record()

	ps, err := r.h.AtRevision("shop", "pay", 7)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint16
	for _, p := range ps {
		got = append(got, p.Members[0].Entry.Weight)
	}
	if fmt.Sprint(got) != "[100 50 60]" {
		t.Errorf("states at revision 7: weights %v, want [100 50 60]", got)
	}
	if ps, _ := r.h.AtRevision("shop", "pay", 6); len(ps) != 1 || ps[0].Members[0].Entry.Weight != 100 || ps[0].Revision != 5 {
		t.Errorf("revision 6 (no table of its own): %+v", ps)
	}
	if _, err := r.h.AtRevision("shop", "pay", 4); err == nil {
		t.Error("revision 4, before the service's history: no error")
	}
}

func (r *rig) record() {
	tab := r.tb.Publisher.Acquire()
	defer tab.Release()
	r.h.Record(tab)
}

func TestFreshnessTimeline(t *testing.T) {
	var synced time.Time
	var mu sync.Mutex
	r := newRig(t, 4, Config{StaleAfter: 5 * time.Second, MaxStale: time.Minute,
		Synced: func() time.Time { mu.Lock(); defer mu.Unlock(); return synced }})
	setSynced := func(at time.Time) { mu.Lock(); synced = at; mu.Unlock() }
	a := statustest.Ready("a", "10.0.0.1")
	for i := range 100 {
		now := t0.Add(time.Duration(i) * time.Second)
		if i < 10 || i >= 90 {
			setSynced(now)
		}
		r.clock.Set(now)
		r.h.mu.Lock()
		r.h.noteFreshness(now)
		r.h.mu.Unlock()
		if i == 0 {
			r.publish(t, now, svc("shop", "pay", a))
		}
	}
	for _, tc := range []struct {
		s    int
		want Freshness
	}{{5, Fresh}, {14, Fresh}, {15, Stale}, {69, Stale}, {70, Expired}, {95, Fresh}} {
		p := at(t, r.h, "shop", "pay", t0.Add(time.Duration(tc.s)*time.Second))
		if p.Freshness != tc.want {
			t.Errorf("at +%ds: %s, want %s", tc.s, p.Freshness, tc.want)
		}
		if tc.want != Fresh && !p.Synced.Equal(t0.Add(9*time.Second)) {
			t.Errorf("at +%ds: synced %s, want +9s", tc.s, p.Synced.Sub(t0))
		}
	}
}

// A Point's table is one the readers read: the service, its members,
// their localities and the places asked about.
func TestPointTable(t *testing.T) {
	r := newRig(t, 16, Config{})
	r.publish(t, t0, svc("shop", "pay", statustest.Ready("a", "10.0.0.1").In("r1", "z1"),
		statustest.Withdrawn("b", "10.0.0.2").In("r1", "z2")), svc("shop", "cart", statustest.Ready("x", "10.0.0.9").In("r2", "z9")))
	p := at(t, r.h, "shop", "pay", t0)
	pub, err := p.Table("r3", "z3")
	if err != nil {
		t.Fatal(err)
	}
	tab := pub.Acquire()
	defer tab.Release()
	id, ok := tab.Services().ID("shop/pay")
	if !ok || tab.StoreRevision() != p.Revision {
		t.Fatalf("service id %d %v, revision %d", id, ok, tab.StoreRevision())
	}
	ms := tab.Members(id)
	if len(ms) != 2 {
		t.Fatalf("members %v", ms)
	}
	if e := tab.Entry(int(ms[1])); tab.Locality(e.Zone) != "z2" || e.Flags.Has(status.Eligible) {
		t.Errorf("b: %+v in %s", e, tab.Locality(e.Zone))
	}
	if loc := tab.LocalityOf("r3", "z3"); loc.Zone == 0 {
		t.Error("the place asked about is not in the table's localities")
	}
	if slot, ok := tab.Directory().SlotOf("a.pay.shop"); !ok || tab.Directory().Instance(int(slot)).ID != "a" {
		t.Errorf("a.pay.shop: slot %d %v", slot, ok)
	}
}

// Run records what is published, and stops with its context.
func TestRunFollowsTheTable(t *testing.T) {
	r := newRig(t, 4, Config{Tick: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- r.h.Run(ctx) }()
	r.clock.Set(t0)
	r.tb.Publish(t, svc("shop", "pay", statustest.Ready("a", "10.0.0.1")))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := r.h.At("shop", "pay", t0); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("Run did not record the table in 10 s")
		}
		time.Sleep(time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A step that changes a service in slots apart (another's between) is
// one step of it, and letting it go keeps the counts straight.
func TestInterleavedServicesCountOnce(t *testing.T) {
	r := newRig(t, 8, Config{Window: time.Minute, Changes: 1})
	a, b, c := statustest.Ready("a", "10.0.0.1"), statustest.Ready("b", "10.0.0.2"), statustest.Ready("c", "10.0.0.3")
	r.publish(t, t0, svc("shop", "pay", a), svc("shop", "cart", b))
	r.publish(t, t0.Add(time.Second), svc("shop", "pay", a, c), svc("shop", "cart", b)) // c after b's slot
	a.Weight, b.Weight, c.Weight = 50, 50, 50
	r.publish(t, t0.Add(2*time.Second), svc("shop", "pay", a, c), svc("shop", "cart", b))
	if pay, cart := r.h.services["shop/pay"].steps, r.h.services["shop/cart"].steps; pay != 3 || cart != 2 {
		t.Fatalf("steps: pay %d, cart %d; want 3 and 2", pay, cart)
	}
	c.Weight = 60
	r.publish(t, t0.Add(time.Hour), svc("shop", "pay", a, c), svc("shop", "cart", b)) // the three before let go
	if pay, cart := r.h.services["shop/pay"].steps, r.h.services["shop/cart"].steps; pay != 1 || cart != 0 {
		t.Errorf("after the window: steps pay %d, cart %d; want 1 and 0", pay, cart)
	}
	if p := at(t, r.h, "shop", "pay", t0.Add(2*time.Second)); len(p.Members) != 2 || p.Members[1].Entry.Weight != 50 {
		t.Errorf("pay from its base: %+v", p.Members)
	}
}
