package dnsserver_test

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/zones"
)

// inst is one instance of a fixture service.
type inst struct {
	id           string
	addrs        []string
	region, zone string
	weight       uint16 // published; 0 with eligible=false
	base         uint16
	eligible     bool
	verdict      status.Verdict
	lifecycle    status.Lifecycle
	flags        status.Flags
	ports        map[string]uint16
	shift        uint8 // status.Entry.Shift
}

// svc is one fixture service.
type svc struct {
	ns, name string
	ports    []status.Port
	ttl      time.Duration
	limit    int
	minFrac  float64
	insts    []inst
}

// fixture is a real status table built from svcs, a zone and a running
// DNS server on loopback.
type fixture struct {
	t     testing.TB
	tb    *statustest.Table
	pub   *status.Publisher
	srv   *dnsserver.Server
	addr  string
	mu    sync.Mutex
	sync  time.Time // LastSync
	now   time.Time
	reg   *prometheus.Registry
	zone  *zones.Zone
	cfg   dnsserver.Config
	rnd   *rand.Rand
	rndMu sync.Mutex
}

func (f *fixture) lastSync() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.sync }
func (f *fixture) clock() time.Time    { f.mu.Lock(); defer f.mu.Unlock(); return f.now }

// advance moves the server's clock (Config.Now) d on; the store view
// stays as old as it was.
func (f *fixture) advance(d time.Duration) {
	f.mu.Lock()
	f.now, f.sync = f.now.Add(d), f.sync.Add(d)
	f.mu.Unlock()
}

// age makes the node's store view d old.
func (f *fixture) age(d time.Duration) { f.mu.Lock(); f.sync = f.now.Add(-d); f.mu.Unlock() }

func newZone(t testing.TB, static string) *zones.Zone {
	t.Helper()
	z, err := zones.New(zones.Config{
		Domain:  "cairn.internal.",
		NSAddrs: map[string][]netip.Addr{"ns.cairn.internal.": {netip.MustParseAddr("192.0.2.53")}},
		Static:  strings.NewReader(static),
	})
	if err != nil {
		t.Fatal(err)
	}
	return z
}

// start runs a server over svcs; tweak may change its Config.
func start(t testing.TB, svcs []svc, tweak func(*dnsserver.Config)) *fixture {
	t.Helper()
	slots := 256
	for _, s := range svcs {
		slots = max(slots, 2*len(s.insts))
	}
	tb := statustest.New(t, slots)
	pub := tb.Publisher
	now := fixtureNow
	f := &fixture{t: t, tb: tb, pub: pub, now: now, sync: now, reg: prometheus.NewRegistry(),
		zone: newZone(t, "www 300 A 192.0.2.80\nwww 300 TXT \"hello\"\na.b.deep 300 A 192.0.2.81\n"),
		rnd:  rand.New(rand.NewPCG(1, 2))}
	f.publish(svcs)
	f.cfg = dnsserver.Config{Zone: f.zone, Table: pub, Addr: "127.0.0.1:0", LastSync: f.lastSync, Now: f.clock,
		Rand:       func() float64 { f.rndMu.Lock(); defer f.rndMu.Unlock(); return f.rnd.Float64() },
		Registerer: f.reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if tweak != nil {
		tweak(&f.cfg)
	}
	var err error
	f.srv, err = dnsserver.New(f.cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-f.srv.Ready():
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the DNS server did not start")
	}
	u, _ := f.srv.Addrs()
	f.addr = u.String()
	return f
}

// publish builds and publishes a table (and its directory) from svcs.
func (f *fixture) publish(svcs []svc) {
	f.t.Helper()
	var services []statustest.Service
	for _, s := range svcs {
		info := status.ServiceInfo{Namespace: s.ns, Name: s.name, Ports: s.ports, DNSTTL: s.ttl, ARecordLimit: s.limit,
			MinHealthyFraction: s.minFrac}
		if info.DNSTTL == 0 {
			info.DNSTTL = 5 * time.Second
		}
		if info.ARecordLimit == 0 {
			info.ARecordLimit = 8
		}
		if info.MinHealthyFraction == 0 {
			info.MinHealthyFraction = 0.5
		}
		svc := statustest.Service{ServiceInfo: info}
		for _, i := range s.insts {
			in := statustest.Instance{ID: i.id, Incarnation: 7, Addrs: i.addrs, Ports: i.ports, Region: i.region, Zone: i.zone,
				Verdict: i.verdict, Lifecycle: i.lifecycle, Flags: i.flags, BaseWeight: i.base,
				Shift: i.shift}
			if in.BaseWeight == 0 {
				in.BaseWeight = 100
			}
			if i.eligible {
				in.Flags |= status.Eligible
				in.Weight = i.weight
				if in.Weight == 0 {
					in.Weight = in.BaseWeight
				}
			}
			svc.Instances = append(svc.Instances, in)
		}
		services = append(services, svc)
	}
	f.tb.Publish(f.t, services...)
}

// ask sends q over net ("udp" or "tcp") and returns the answer.
func (f *fixture) ask(net string, q *dns.Msg) *dns.Msg {
	f.t.Helper()
	c := &dns.Client{Net: net, Timeout: 5 * time.Second, UDPSize: 65535}
	r, _, err := c.Exchange(q, f.addr)
	if err != nil {
		f.t.Fatalf("%s %v: %v", net, q.Question, err)
	}
	return r
}

// query builds a query with EDNS0 (udp size 1232) unless noEDNS.
func query(name string, qtype uint16, edns bool) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	m.RecursionDesired = true
	if edns {
		m.SetEdns0(1232, false)
	}
	return m
}

func ready(ids ...string) []inst {
	var out []inst
	for i, id := range ids {
		out = append(out, inst{id: id, addrs: []string{"10.0.0." + string(rune('1'+i))}, eligible: true,
			verdict: status.Healthy, lifecycle: status.Ready})
	}
	return out
}

func ede(r *dns.Msg) []*dns.EDNS0_EDE {
	o := r.IsEdns0()
	if o == nil {
		return nil
	}
	var out []*dns.EDNS0_EDE
	for _, op := range o.Option {
		if e, ok := op.(*dns.EDNS0_EDE); ok {
			out = append(out, e)
		}
	}
	return out
}
