package agent_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/agent"
	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/internal/backoff"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
	"github.com/cairn-sd/cairn/zones"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// server is a real xDS server on loopback, serving the tables a test
// publishes.
type server struct {
	tb   *statustest.Table
	pub  *status.Publisher
	addr string
	stop func()
}

func startServer(t *testing.T) *server {
	t.Helper()
	return startServerWith(t, nil)
}

// startServerWith is startServer with edit, if set, changing the
// server's Config first.
func startServerWith(t *testing.T, edit func(*xdsserver.Config)) *server {
	t.Helper()
	tb := statustest.New(t, 64)
	pub := tb.Publisher
	cfg := xdsserver.Config{Table: pub, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := xdsserver.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := xdstest.Serve(srv)
	if err != nil {
		t.Fatal(err)
	}
	s := &server{tb: tb, pub: pub, addr: addr, stop: stop}
	t.Cleanup(s.stop)
	return s
}

// publish builds the server's next table at store revision rev: service
// shop/cart (port http) with n instances i0..i<n-1>, the first up
// eligible.
func (s *server) publish(t *testing.T, rev uint64, n, up int) {
	t.Helper()
	cart := statustest.Service{ServiceInfo: cartInfo}
	cart.MinHealthyFraction = -1
	for i := range n {
		in := statustest.Withdrawn(fmt.Sprintf("i%d", i), fmt.Sprintf("10.0.0.%d", i+1))
		if i < up {
			in = statustest.Ready(in.ID, in.Addrs...)
		}
		in.Ports = map[string]uint16{"http": 8080}
		cart.Instances = append(cart.Instances, in.In("eu", "eu-1a"))
	}
	s.tb.PublishAt(t, rev, cart)
}

// cartInfo is shop/cart as the servers' tables hold it.
var cartInfo = status.ServiceInfo{Namespace: "shop", Name: "cart", Ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}},
	DNSTTL: 5 * time.Second, ARecordLimit: 8, MinHealthyFraction: 0.5, ShrinkCap: 0.33, ShrinkWindow: 10 * time.Second}

// publishNone builds the server's next table at store revision rev
// without shop/cart: a server that has not caught up with its definition
// (or not yet rebuilt since it was defined), or one it was deleted from.
func (s *server) publishNone(t *testing.T, rev uint64) {
	t.Helper()
	s.tb.PublishAt(t, rev)
}

type fixture struct {
	t     *testing.T
	pub   *status.Publisher
	a     *agent.Agent
	clock *clock
	reg   *prometheus.Registry
	stop  func()
}

// metric returns the value of the agent's metric name (one series).
func (f *fixture) metric(name string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	f.t.Fatalf("no metric %s", name)
	return 0
}

// clock is the agent's injected clock.
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

// startAgent runs an agent of the servers given, keeping its views at
// path, subscribed to shop/cart.
func startAgent(t *testing.T, path string, servers ...string) *fixture {
	t.Helper()
	return startAgentWith(t, nil, path, servers...)
}

// startAgentWith is startAgent with edit, if set, changing the agent's
// Config first.
func startAgentWith(t *testing.T, edit func(*agent.Config), path string, servers ...string) *fixture {
	t.Helper()
	pub, err := status.New(status.Config{Capacity: 64})
	if err != nil {
		t.Fatal(err)
	}
	c := &clock{now: time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)}
	reg := prometheus.NewRegistry()
	cfg := agent.Config{Servers: servers, Services: []string{"shop/cart"}, NodeID: "agent-test", Region: "eu", Zone: "eu-1a",
		Path: path, Table: pub, Backoff: backoff.Config{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		SaveInterval: time.Millisecond, Now: c.Now, Registerer: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if edit != nil {
		edit(&cfg)
	}
	a, err := agent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	var once sync.Once
	f := &fixture{t: t, pub: pub, a: a, clock: c, reg: reg, stop: func() { once.Do(func() { cancel(); <-done }) }}
	t.Cleanup(f.stop)
	return f
}

// eligible counts shop/cart's instances in rotation in the agent's
// table, and returns the table's store revision.
func (f *fixture) eligible() (n int, rev uint64) {
	t := f.pub.Acquire()
	if t == nil {
		return -1, 0
	}
	defer t.Release()
	id, ok := t.Directory().ServiceID("cart.shop")
	if !ok {
		return -1, t.StoreRevision()
	}
	for _, slot := range t.Members(id) {
		if t.Entry(int(slot)).Flags.Has(status.Eligible) {
			n++
		}
	}
	return n, t.StoreRevision()
}

// waitFor polls cond until it holds, or fails the test after 10 s.
func (f *fixture) waitFor(what string, cond func() bool) {
	f.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			n, rev := f.eligible()
			f.t.Fatalf("timed out waiting for %s (eligible %d at revision %d; status %+v)", what, n, rev, f.a.Status(5*time.Second))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (f *fixture) has(n int, rev uint64) func() bool {
	return func() bool { m, r := f.eligible(); return m == n && r == rev }
}

// TestAgentFollowsAndFailsOver: the agent holds the view its server
// publishes, follows its changes, and when the server goes, fails over
// to the next one; a server behind (an older revision) sends nothing
// older than the view the agent holds (it holds it back), the agent
// keeps that view, not connected, until the server catches up.
func TestAgentFollowsAndFailsOver(t *testing.T) {
	s1, s2 := startServer(t), startServer(t)
	s1.publish(t, 100, 4, 4)
	s2.publish(t, 90, 4, 1) // behind: an older view
	f := startAgent(t, filepath.Join(t.TempDir(), "views.cairn"), s1.addr, s2.addr)
	f.waitFor("the first view", f.has(4, 100))
	s1.publish(t, 101, 4, 3)
	f.waitFor("a withdrawal", f.has(3, 101))

	applied := f.metric("cairn_agent_responses_applied_total")
	s1.stop()
	// s2 serves revision 90: it answers, and sends nothing older.
	f.waitFor("the answer of the server behind", func() bool { return f.metric("cairn_agent_responses_applied_total") > applied })
	if n, rev := f.eligible(); n != 3 || rev != 101 {
		t.Fatalf("after failing over to a server behind: %d eligible at revision %d, want the 3 at 101 held", n, rev)
	}
	if st := f.a.Status(5 * time.Second); st.Connected || st.Server != s2.addr || f.metric("cairn_agent_nacks_total") != 0 {
		t.Fatalf("on a server behind: %+v, %v refused; want on %s, not connected, nothing refused", st, f.metric("cairn_agent_nacks_total"), s2.addr)
	}
	s2.publish(t, 102, 4, 4)
	f.waitFor("the caught-up server's view", f.has(4, 102))
}

// TestAgentRefusesARemovalFromBehind: a server whose table is older than
// the view held — one behind, or one that has not built a table since
// the service was defined — would say the service does not exist. That
// word is as old as its table: the server holds it back (the agent
// names the version it holds), as it holds back its older view that
// comes next, and the agent keeps every instance it holds, rather than
// letting a third of them go under the shrink cap. Once the server's
// table is past the view held, its word that the service does not exist
// is sent and taken (under the cap).
func TestAgentRefusesARemovalFromBehind(t *testing.T) {
	s1, s2 := startServer(t), startServer(t)
	s1.publish(t, 100, 3, 3)
	s2.publishNone(t, 6)
	f := startAgent(t, filepath.Join(t.TempDir(), "views.cairn"), s1.addr, s2.addr)
	f.waitFor("the first view", f.has(3, 100))

	applied := f.metric("cairn_agent_responses_applied_total")
	s1.stop()
	f.waitFor("the answer of the server behind", func() bool { return f.metric("cairn_agent_responses_applied_total") > applied })
	if n, rev := f.eligible(); n != 3 || rev != 100 {
		t.Fatalf("after a removal from a table at revision 6: %d eligible at revision %d, want the 3 at 100 held", n, rev)
	}
	if st := f.a.Status(5 * time.Second); st.Connected || len(st.Views) != 1 || st.Views[0].Deferred != 0 || st.Views[0].Revision != 100 {
		t.Fatalf("after a removal from a table at revision 6: %+v; want not connected, the view at 100 with nothing deferred", st)
	}
	s2.publish(t, 90, 3, 2) // the service comes, older than the view held: held back
	if n, rev := f.eligible(); n != 3 || rev != 100 || f.metric("cairn_agent_nacks_total") != 0 {
		t.Fatalf("after the older view: %d eligible at revision %d, %v refused; want the 3 at 100 held, nothing refused",
			n, rev, f.metric("cairn_agent_nacks_total"))
	}

	s2.publishNone(t, 101) // caught up, and the service is gone
	f.waitFor("the removal, capped", func() bool { n, _ := f.eligible(); return n == 2 })
}

// TestAgentStartsFromDisk: an agent restarted with its servers down
// publishes the views it kept before any server answers, says they are
// restored and stale, and keeps serving them through a long outage (its
// clock moved on two hours), its status reporting their age; once a
// server answers, they are fresh again.
func TestAgentStartsFromDisk(t *testing.T) {
	s1 := startServer(t)
	s1.publish(t, 100, 4, 3)
	path := filepath.Join(t.TempDir(), "views.cairn")
	f := startAgent(t, path, s1.addr)
	f.waitFor("the first view", f.has(3, 100))
	f.waitFor("the view on disk", func() bool { _, err := os.Stat(path); return err == nil })
	f.stop()
	s1.stop()

	dead := s1.addr // nothing listens there now
	g := startAgent(t, path, dead)
	if n, rev := g.eligible(); n != 3 || rev != 100 {
		t.Fatalf("restarted from disk: %d eligible at revision %d, want 3 at 100 at once", n, rev)
	}
	if !g.a.Restored() {
		t.Error("a start from disk is not reported restored")
	}
	g.clock.add(2 * time.Hour)
	st := g.a.Status(5 * time.Second)
	if len(st.Views) != 1 || !st.Views[0].Stale || st.Views[0].AgeSeconds < 7200 || st.Connected {
		t.Fatalf("two hours into the outage: %+v", st)
	}
	if n, _ := g.eligible(); n != 3 {
		t.Errorf("two hours into the outage: %d eligible, want the 3 kept", n)
	}
	if g.a.LastSync().After(g.clock.Now().Add(-2 * time.Hour)) {
		t.Errorf("LastSync %v moved during the outage", g.a.LastSync())
	}
}

// TestAgentCorruptFile: a views file that fails its checks is reported
// and set aside: the agent starts from the previous copy when that is
// whole, else from nothing, and takes its views from a server again.
func TestAgentCorruptFile(t *testing.T) {
	s1 := startServer(t)
	s1.publish(t, 100, 4, 4)
	path := filepath.Join(t.TempDir(), "views.cairn")
	f := startAgent(t, path, s1.addr)
	f.waitFor("the first view", f.has(4, 100))
	// Changes until the previous copy holds a view too (writes may
	// coalesce, so the copy before the last may be the table from
	// before any view came).
	rev := uint64(101)
	for ; ; rev++ {
		if rev > 110 {
			t.Fatal("ten views written, and the previous copy never held one")
		}
		up := 3 + int((rev+1)%2) // 3, 4, 3, …: every table a change
		s1.publish(t, rev, 4, up)
		f.waitFor("the next view", f.has(up, rev))
		f.waitFor("the next view on disk", func() bool {
			s, err := tablefile.Load(path)
			return err == nil && s != nil && len(s.Views) == 1 && s.Views[0].Revision == rev
		})
		if s, err := tablefile.Load(path + tablefile.PreviousSuffix); err == nil && s != nil && len(s.Views) == 1 {
			break
		}
	}
	last := rev
	f.stop()

	flip := func(p string) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		b[len(b)-10] ^= 0xff
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	flip(path)
	g := startAgent(t, path, s1.addr)
	if g.a.LoadError() == nil {
		t.Error("a corrupt file was not reported")
	}
	if n, rev := g.eligible(); n < 3 || rev < 100 || rev > last {
		t.Errorf("from the previous copy: %d eligible at revision %d; want a view kept", n, rev)
	}
	up := 3 + int((last+1)%2)
	g.waitFor("the server's view after the previous copy", g.has(up, last))
	g.stop()

	flip(path)
	flip(path + ".prev")
	h := startAgent(t, path, s1.addr)
	if h.a.LoadError() == nil {
		t.Error("two corrupt files were not reported")
	}
	h.waitFor("the view from the server", h.has(up, last))
	if h.metric("cairn_agent_file_load_errors_total") < 1 {
		t.Error("the load error was not counted")
	}
}

// TestAgentCapsADrop: a server that publishes a 90% drop in one step
// (a bug, a bad deploy) reaches the agent's answers no faster than the
// shrink cap: a third of the base goes at once, the next third only
// when the agent's clock has moved a window on.
func TestAgentCapsADrop(t *testing.T) {
	s1 := startServer(t)
	s1.publish(t, 100, 20, 20)
	f := startAgent(t, filepath.Join(t.TempDir(), "views.cairn"), s1.addr)
	f.waitFor("the first view", f.has(20, 100))
	s1.publish(t, 101, 20, 2)
	f.waitFor("the drop, capped", f.has(14, 101))
	if st := f.a.Status(5 * time.Second); st.Views[0].Deferred != 12 {
		t.Errorf("deferred %d, want 12", st.Views[0].Deferred)
	}
	f.clock.add(11 * time.Second)
	f.waitFor("the next window", f.has(10, 101)) // the agent's 1 s tick
}

// TestAgentAnswersFromItsPlace: the agent's DNS server (dnsserver, over
// the agent's table) ranks tiers from the agent's own place, as the
// server's does for a caller there: an agent in eu-1a answers the
// eu-1a instances, one in eu-1b the eu-1b ones; and a query for a
// service it has not subscribed to waits for the view and is answered.
func TestAgentAnswersFromItsPlace(t *testing.T) {
	s1 := startServer(t)
	// Four instances, two in eu-1a (10.0.0.1-2), two in eu-1b (10.0.0.3-4).
	cart := statustest.Service{ServiceInfo: cartInfo}
	for i := range 4 {
		in := statustest.Ready(fmt.Sprintf("i%d", i), fmt.Sprintf("10.0.0.%d", i+1)).In("eu", []string{"eu-1a", "eu-1b"}[i/2])
		in.Ports = map[string]uint16{"http": 8080}
		cart.Instances = append(cart.Instances, in)
	}
	s1.tb.PublishAt(t, 7, cart)
	for zone, want := range map[string][]string{"eu-1a": {"10.0.0.1", "10.0.0.2"}, "eu-1b": {"10.0.0.3", "10.0.0.4"}} {
		t.Run(zone, func(t *testing.T) {
			addr := runPlacedAgent(t, s1, zone)

			// Not subscribed yet: the first query waits for the view.
			rcode, got := askCartA(t, addr)
			if rcode != dns.RcodeSuccess || !slices.Equal(got, want) {
				t.Errorf("agent in %s: rcode %s, answers %v; want %v", zone, dns.RcodeToString[rcode], got, want)
			}
		})
	}
}

// askCartA asks the DNS server at addr for cart.shop's A records and
// returns the rcode and the addresses, sorted.
func askCartA(t *testing.T, addr string) (int, []string) {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion("cart.shop.svc.cairn.internal.", dns.TypeA)
	q.SetEdns0(1232, false)
	r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(q, addr)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, rr := range r.Answer {
		got = append(got, rr.(*dns.A).A.String())
	}
	slices.Sort(got)
	return r.Rcode, got
}

// runPlacedAgent runs, until the test ends, an agent of s1 in zone of
// region eu with a DNS server of its table, and returns that server's
// address.
func runPlacedAgent(t *testing.T, s1 *server, zone string) string {
	t.Helper()
	pub, err := status.New(status.Config{Capacity: 64})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{Servers: []string{s1.addr}, NodeID: "agent-" + zone, Region: "eu", Zone: zone, Table: pub,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveDNS(t, a, pub, "eu", zone)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return addr
}

// serveDNS runs a DNS server of the agent's table, placed at region and
// zone, until the test ends, and returns its address.
func serveDNS(t *testing.T, a *agent.Agent, pub *status.Publisher, region, zone string) string {
	t.Helper()
	z, err := zones.New(zones.Config{Domain: "cairn.internal.", NSAddrs: map[string][]netip.Addr{"ns.cairn.internal.": {netip.MustParseAddr("127.0.0.1")}}})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := dnsserver.New(dnsserver.Config{Zone: z, Table: pub, Addr: "127.0.0.1:0", Own: dnsserver.Place{Region: region, Zone: zone},
		LastSync: a.LastSync, Restored: a.Restored, Unheld: a.Unheld, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = ds.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-ds.Ready():
	case <-time.After(10 * time.Second):
		t.Fatal("the DNS server did not start")
	}
	u, _ := ds.Addrs()
	return u.String()
}

// TestAgentStatusLists: GET /v1/agent/status lists views and absent
// names as JSON arrays, empty ones included (never null), and a name
// the server says does not exist is listed absent.
func TestAgentStatusLists(t *testing.T) {
	s := startServer(t)
	s.publish(t, 100, 4, 4)
	f := startAgentWith(t, func(c *agent.Config) { c.Services = nil }, "", s.addr)
	get := func() map[string]json.RawMessage {
		t.Helper()
		rec := httptest.NewRecorder()
		f.a.Handler(nil).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/agent/status", nil))
		var st map[string]json.RawMessage
		if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
			t.Fatalf("GET /v1/agent/status: %d %q: %v", rec.Code, rec.Body, err)
		}
		return st
	}
	f.waitFor("a server's answer", func() bool { return f.a.Status(time.Second).Connected })
	if st := get(); string(st["views"]) != "[]" || string(st["absent"]) != "[]" {
		t.Errorf("status of an agent asked for nothing: views %s, absent %s; want [] and []", st["views"], st["absent"])
	}
	// A name asked about that the server does not have.
	if f.a.Unheld("shop", "nope") == nil {
		t.Fatal("Unheld(shop, nope) = nil (will not come) before any server said anything of it")
	}
	f.waitFor("nope.shop absent", func() bool { return len(f.a.Status(time.Second).Absent) == 1 })
	if st := get(); string(st["absent"]) != `["nope.shop"]` {
		t.Errorf("status: absent %s; want [\"nope.shop\"]", st["absent"])
	}
}

// TestAgentForgetsAbsentNames: a flood of names the server says do not
// exist never fills the agent's subscriptions: each is unsubscribed once
// the server has said so, answered NXDOMAIN (nil) for AbsentTTL, then
// asked again; with MaxViews at 2, a real service asked after five junk
// names is still subscribed and comes. The zone's serial (the table's
// store revision) never goes back when a view goes.
func TestAgentForgetsAbsentNames(t *testing.T) {
	s := startServer(t)
	s.publish(t, 100, 2, 2)
	f := startAgentWith(t, func(c *agent.Config) { c.Services, c.MaxViews, c.AbsentTTL = nil, 2, time.Minute }, "", s.addr)
	f.waitFor("a server's answer", func() bool { return f.a.Status(time.Second).Connected })

	wait := func(ch <-chan struct{}, what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the server's word never came", what)
		}
	}
	for i := range 5 {
		name := fmt.Sprintf("junk%d", i)
		ch := f.a.Unheld("shop", name)
		if ch == nil {
			t.Fatalf("%s: nil before the server said anything", name)
		}
		wait(ch, name)
		if f.a.Unheld("shop", name) != nil {
			t.Fatalf("%s: the server said it does not exist, yet it is not NXDOMAIN", name)
		}
	}
	ch := f.a.Unheld("shop", "cart")
	if ch == nil {
		t.Fatal("cart: nil")
	}
	wait(ch, "cart")
	f.waitFor("cart's view", f.has(2, 100))

	// Past AbsentTTL a junk name is asked about again.
	f.clock.add(2 * time.Minute)
	if f.a.Unheld("shop", "junk0") == nil {
		t.Error("junk0 past AbsentTTL: still NXDOMAIN without asking")
	}

	// cart goes (a table without it): the serial stays.
	s.publishNone(t, 101)
	// Removed with two in rotation: one goes at once, the view (and the
	// other) a window later, as the cap lets it.
	f.waitFor("cart shrinking", func() bool { n, _ := f.eligible(); return n == 1 })
	f.clock.add(11 * time.Second)
	f.waitFor("cart gone", func() bool { n, _ := f.eligible(); return n == -1 })
	if _, rev := f.eligible(); rev != 100 {
		t.Errorf("after the last view went, the serial is %d; want 100 kept", rev)
	}
}

// TestAgentLeavesASilentServer: a server that accepts the connection and
// never answers (a hung process, a proxy that swallows the stream) is
// left after AnswerTimeout for the next one in the list.
func TestAgentLeavesASilentServer(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	done := make(chan struct{})
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() { defer conns.Done(); <-done; c.Close() }() // accepted, never read
		}
	}()
	t.Cleanup(func() { silent.Close(); close(done); conns.Wait() })
	s := startServer(t)
	s.publish(t, 100, 3, 3)
	f := startAgentWith(t, func(c *agent.Config) { c.AnswerTimeout = 200 * time.Millisecond }, "", silent.Addr().String(), s.addr)
	f.waitFor("the view from the second server", f.has(3, 100))
}

// TestAgentEvacuatedZone: the server's view carries an evacuation; an
// agent in the evacuated zone answers from the other zone, as the
// server's DNS would, and follows the zone as it returns.
func TestAgentEvacuatedZone(t *testing.T) {
	s1 := startServer(t)
	cart := statustest.Service{ServiceInfo: cartInfo}
	for i := range 4 {
		in := statustest.Ready(fmt.Sprintf("i%d", i), fmt.Sprintf("10.0.0.%d", i+1)).In("eu", []string{"eu-1a", "eu-1b"}[i/2])
		in.Ports = map[string]uint16{"http": 8080}
		if i < 2 {
			in.Shift = status.ShiftAll
		}
		cart.Instances = append(cart.Instances, in)
	}
	s1.tb.PublishAt(t, 7, cart)
	addr := runPlacedAgent(t, s1, "eu-1a")
	ask := func() []string { _, got := askCartA(t, addr); return got }
	if got := ask(); !slices.Equal(got, []string{"10.0.0.3", "10.0.0.4"}) {
		t.Fatalf("agent in the evacuated eu-1a: %v, want eu-1b's", got)
	}
	// Back whole: its own zone again.
	for i := range 2 {
		cart.Instances[i].Shift = 0
	}
	s1.tb.PublishAt(t, 8, cart)
	deadline := time.Now().Add(10 * time.Second)
	for got := ask(); !slices.Equal(got, []string{"10.0.0.1", "10.0.0.2"}); got = ask() {
		if time.Now().After(deadline) {
			t.Fatalf("agent after the return: %v, want eu-1a's", got)
		}
		time.Sleep(20 * time.Millisecond) // a poll with a deadline
	}
}
