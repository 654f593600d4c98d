package replay_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/history"
	"github.com/cairn-sd/cairn/replay"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/zones"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Date(2026, 12, 6, 14, 2, 17, 0, time.UTC)

// node is a table, its history, and a DNS server serving it on loopback,
// on one settable clock.
type node struct {
	mu   sync.Mutex
	now  time.Time
	sync time.Time
	tb   *statustest.Table
	h    *history.History
	dns  *dnsserver.Server
	addr string
	r    *replay.Replayer
}

func (n *node) clock() time.Time    { n.mu.Lock(); defer n.mu.Unlock(); return n.now }
func (n *node) lastSync() time.Time { n.mu.Lock(); defer n.mu.Unlock(); return n.sync }

// set moves the clock to at; the node stays in sync unless stale.
func (n *node) set(at time.Time, stale bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.now = at
	if !stale {
		n.sync = at
	}
}

func newNode(t *testing.T, events func(ns, svc string) []wire.Event) *node {
	t.Helper()
	n := &node{now: t0, sync: t0}
	pub, err := status.New(status.Config{Capacity: 32, Now: n.clock})
	if err != nil {
		t.Fatal(err)
	}
	n.tb = &statustest.Table{Publisher: pub, Writer: status.NewWriter(pub, status.WriterConfig{})}
	if n.h, err = history.New(history.Config{Table: pub, Now: n.clock, Synced: n.lastSync}); err != nil {
		t.Fatal(err)
	}
	zone, err := zones.New(zones.Config{Domain: "cairn.internal.",
		NSAddrs: map[string][]netip.Addr{"ns.cairn.internal.": {netip.MustParseAddr("127.0.0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	n.dns, err = dnsserver.New(dnsserver.Config{Zone: zone, Table: pub, Addr: "127.0.0.1:0", Now: n.clock, LastSync: n.lastSync,
		Own: dnsserver.Place{Region: "r1", Zone: "z1"}, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.dns.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- n.dns.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	udp, _ := n.dns.Addrs()
	n.addr = udp.String()
	if n.r, err = replay.New(replay.Config{History: n.h, DNS: n.dns, Events: events, Region: "r1", Zone: "z1"}); err != nil {
		t.Fatal(err)
	}
	return n
}

// publish publishes services at time at and records the table.
func (n *node) publish(t *testing.T, at time.Time, stale bool, services ...statustest.Service) {
	t.Helper()
	n.set(at, stale)
	n.tb.Publish(t, services...)
	tab := n.tb.Publisher.Acquire()
	defer tab.Release()
	n.h.Record(tab)
}

// dig asks the running server over UDP, and returns the answer's
// records as replay writes them, sorted.
func (n *node) dig(t *testing.T, name string, qtype uint16) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.SetEdns0(1232, false)
	resp, err := dns.Exchange(m, n.addr)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, rr := range resp.Answer {
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	slices.Sort(out)
	return out
}

// assignment is the xDS assignment a subscriber at r1/z1 is sent from
// the current table: its version's digest.
func (n *node) assignment(t *testing.T, port string) string {
	t.Helper()
	tab := n.tb.Publisher.Acquire()
	defer tab.Release()
	id, _ := tab.Services().ID("shop/pay")
	_, digest, err := xdsserver.Assignment(tab, id, port, tab.LocalityOf("r1", "z1"))
	if err != nil {
		t.Fatal(err)
	}
	return digest
}

func pay(ins ...statustest.Instance) statustest.Service {
	return statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay", DNSTTL: 30 * time.Second, ARecordLimit: 8,
		MinHealthyFraction: -1, Ports: []status.Port{{Name: "http", Number: 8080, Protocol: "tcp"}}}, Instances: ins}
}

func inst(id, addr, zone string) statustest.Instance {
	in := statustest.Ready(id, addr).In("r1", zone)
	in.Ports = map[string]uint16{"http": 8080}
	return in
}

func drained(in statustest.Instance) statustest.Instance {
	in.Lifecycle, in.Flags, in.Weight = status.Draining, 0, 0
	return in
}

func failed(in statustest.Instance) statustest.Instance {
	in.Verdict, in.Flags, in.Weight = status.Unhealthy, 0, 0
	return in
}

const (
	host = "pay.shop.svc.cairn.internal."
	srv  = "_http._tcp.pay.shop.svc.cairn.internal."
)

// The test at the package: register, drain one at T, fail
// another's probe at T+10 s; the replays at T−1 s, T+1 s and T+11 s
// are what dig and a subscriber were given then.
func TestReplayIsWhatWasAnswered(t *testing.T) {
	T := t0.Add(time.Minute)
	probe := wire.Event{Seq: 9, At: T.Add(10 * time.Second), Kind: wire.EventEligibility, Namespace: "shop", Service: "pay",
		Instance: "b", Incarnation: 1, From: "healthy eligible", To: "unhealthy withdrawn", Reason: "probe failed",
		Evidence: &wire.Evidence{Class: "probe", Observer: "n2", At: T.Add(9 * time.Second)}, Actor: "evaluator"}
	n := newNode(t, func(ns, svc string) []wire.Event {
		if ns != "shop" || svc != "pay" {
			return nil
		}
		return []wire.Event{probe}
	})
	a, b, c := inst("a", "10.0.0.1", "z1"), inst("b", "10.0.0.2", "z1"), inst("c", "10.0.0.3", "z2")

	type seen struct {
		at       time.Time
		a, srv   []string
		eds      string
		eligible string
	}
	var dug []seen
	look := func(at time.Time, eligible string) {
		n.set(at, false)
		dug = append(dug, seen{at: at, a: n.dig(t, host, dns.TypeA), srv: n.dig(t, srv, dns.TypeSRV), eds: n.assignment(t, "http"),
			eligible: eligible})
	}
	n.publish(t, t0, false, pay(a, b, c))
	look(T.Add(-time.Second), "[a b c]")
	n.publish(t, T, false, pay(drained(a), b, c))
	look(T.Add(time.Second), "[b c]")
	n.publish(t, T.Add(10*time.Second), false, pay(drained(a), failed(b), c))
	look(T.Add(11*time.Second), "[c]")

	for _, d := range dug {
		got, err := n.r.Replay(wire.ReplayQuery{Namespace: "shop", Service: "pay", At: d.at})
		if err != nil {
			t.Fatal(err)
		}
		var in []string
		for _, ep := range got.Endpoints {
			if ep.Eligible {
				in = append(in, ep.InstanceID)
			}
		}
		when := d.at.Sub(T)
		if fmt.Sprint(in) != d.eligible {
			t.Errorf("at T%+v: eligible %v, want %s", when, in, d.eligible)
		}
		if a := sorted(got.DNS[0].Answer); !slices.Equal(a, d.a) {
			t.Errorf("at T%+v: replayed A %q, dig had %q", when, a, d.a)
		}
		if s := sorted(got.DNS[2].Answer); got.DNS[2].Type != "SRV" || !slices.Equal(s, d.srv) {
			t.Errorf("at T%+v: replayed SRV %q, dig had %q", when, s, d.srv)
		}
		if _, digest := xdsserver.ParseVersion(got.XDS[0].Version); digest != d.eds {
			t.Errorf("at T%+v: replayed assignment %s, the subscriber's %s", when, got.XDS[0].Version, d.eds)
		}
		if got.Freshness != "fresh" || len(got.DNS[0].EDE) != 0 {
			t.Errorf("at T%+v: freshness %s, EDE %v", when, got.Freshness, got.DNS[0].EDE)
		}
	}

	got, err := n.r.Replay(wire.ReplayQuery{Namespace: "shop", Service: "pay", At: T.Add(11 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	b1 := got.Endpoints[1]
	if b1.InstanceID != "b" || b1.Transition == nil || b1.Transition.Evidence.Class != "probe" || b1.Transition.Evidence.Observer != "n2" ||
		b1.EvidenceAgeSeconds == nil || *b1.EvidenceAgeSeconds != 2 {
		t.Errorf("b at T+11s: %+v, want the probe transition, observer n2, evidence 2 s old", b1)
	}
	if len(got.Changes) != 2 || got.Changes[0].InstanceID != "a" || got.Changes[0].After.Lifecycle != status.Draining ||
		got.Changes[1].InstanceID != "b" || got.Changes[1].Before.Verdict != status.Healthy || got.Changes[1].After.Verdict != status.Unhealthy {
		t.Errorf("changes in the minute before T+11s: %+v, want a drained, b failed", got.Changes)
	}
	if len(got.Events) != 1 {
		t.Errorf("events in the minute before T+11s: %+v", got.Events)
	}
	timeline, err := n.r.Replay(wire.ReplayQuery{Namespace: "shop", Service: "pay", At: T, Instance: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if len(timeline.Changes) != 2 || timeline.Changes[0].Before != nil || timeline.Changes[1].After.Lifecycle != status.Draining {
		t.Errorf("a's timeline around T: %+v", timeline.Changes)
	}
}

// A replay of a time the node was stale answers as it did: EDE 3, TTLs
// capped.
func TestReplayStale(t *testing.T) {
	n := newNode(t, nil)
	a := inst("a", "10.0.0.1", "z1")
	n.publish(t, t0, false, pay(a))
	at := t0.Add(time.Minute)
	n.publish(t, at, true, pay(a)) // the same entries, built while the store is a minute old
	dug := n.dig(t, host, dns.TypeA)
	got, err := n.r.Replay(wire.ReplayQuery{Namespace: "shop", Service: "pay", At: at})
	if err != nil {
		t.Fatal(err)
	}
	if got.Freshness != "stale" || len(got.DNS[0].EDE) == 0 || !strings.HasPrefix(got.DNS[0].EDE[0], "3:") {
		t.Errorf("replay at a stale time: %s, EDE %v", got.Freshness, got.DNS[0].EDE)
	}
	if a := sorted(got.DNS[0].Answer); !slices.Equal(a, dug) {
		t.Errorf("replayed %q, dig had %q", a, dug)
	}
	if got.TableVersion != 1 {
		t.Errorf("table version %d: the table of t0 is in force (the later one changed nothing)", got.TableVersion)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// The timeline counts each zone's eligible endpoints from the history's
// start, and marks each withdrawal and admission.
func TestTimeline(t *testing.T) {
	n := newNode(t, nil)
	a, b, c := inst("a", "10.0.0.1", "z1"), inst("b", "10.0.0.2", "z1"), inst("c", "10.0.0.3", "z2")
	T := t0.Add(time.Minute)
	n.publish(t, t0, false, pay(a, b, c))
	n.publish(t, T, false, pay(drained(a), b, c))
	n.publish(t, T.Add(10*time.Second), false, pay(drained(a), failed(b), c))
	n.publish(t, T.Add(20*time.Second), false, pay(drained(a), b, c))
	h, err := n.r.Timeline("shop", "pay", t0.Add(-time.Hour), T.Add(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if !h.From.Equal(t0) {
		t.Errorf("from %s, want the history's start %s", h.From, t0)
	}
	got := fmt.Sprint(h.Zones)
	want := fmt.Sprintf("[{r1 z1 [{%s 2} {%s 1} {%s 0} {%s 1}]} {r1 z2 [{%s 1}]}]", t0, T, T.Add(10*time.Second), T.Add(20*time.Second), t0)
	if got != want {
		t.Errorf("zones\n%s\nwant\n%s", got, want)
	}
	var marks []string
	for _, m := range h.Marks {
		marks = append(marks, m.Kind+" "+m.Instance)
	}
	if fmt.Sprint(marks) != "[withdrawal a withdrawal b admission b]" {
		t.Errorf("marks %v", marks)
	}
}
