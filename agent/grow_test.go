package agent_test

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/agent"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// TestAgentTableGrowsWithItsViews: an agent whose table starts at 16
// slots holds 40 services of 8 instances (the table doubled to 512),
// answers each over DNS with its 8 addresses, then, the views shrunk
// to one instance each, answers that one, and grown again to 12 each,
// answers 8 of the 12 (the A record limit) and serves all 12 over SRV
// — in the slots freed by the shrink, without growing further; and
// restarted from its file, with no server, serves all of them at once.
func TestAgentTableGrowsWithItsViews(t *testing.T) {
	const services = 40
	tb := statustest.New(t, 1024)
	srv, err := xdsserver.New(xdsserver.Config{Table: tb.Publisher, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := xdstest.Serve(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	name := func(s int) string { return fmt.Sprintf("s%02d", s) }
	publish := func(rev uint64, per int) {
		t.Helper()
		var all []statustest.Service
		for s := range services {
			svc := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: name(s),
				Ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}, DNSTTL: 5 * time.Second, ARecordLimit: 8,
				MinHealthyFraction: -1, ShrinkCap: 1, ShrinkWindow: 10 * time.Second}}
			for i := range per {
				in := statustest.Ready(fmt.Sprintf("i%d", i), fmt.Sprintf("10.%d.0.%d", s, i+1))
				in.Ports = map[string]uint16{"http": 8080}
				svc.Instances = append(svc.Instances, in.In("eu", "eu-1a"))
			}
			all = append(all, svc)
		}
		tb.PublishAt(t, rev, all...)
	}
	var subs []string
	for s := range services {
		subs = append(subs, "shop/"+name(s))
	}
	publish(100, 8)
	pub, err := status.New(status.Config{Capacity: 4096, Initial: 16})
	if err != nil {
		t.Fatal(err)
	}
	// The real clock: the DNS server judges staleness by it.
	path := filepath.Join(t.TempDir(), "views.cairn")
	f := startAgentWith(t, func(c *agent.Config) { c.Services, c.Table, c.Now = subs, pub, nil }, path, addr)
	f.pub = pub
	dnsAddr := serveDNS(t, f.a, pub, "eu", "eu-1a")
	// answers polls, per service, until the agent's DNS server gives
	// want A records and per SRV records at rev.
	answers := func(rev uint64, want, per int) {
		t.Helper()
		f.waitFor(fmt.Sprintf("%d instances a service at revision %d", per, rev), func() bool {
			tbl := pub.Acquire()
			if tbl == nil {
				return false
			}
			r := tbl.StoreRevision()
			tbl.Release()
			if r != rev {
				return false
			}
			for s := range services {
				host := name(s) + ".shop.svc.cairn.internal."
				if len(ask(t, dnsAddr, host, dns.TypeA)) != want || len(ask(t, dnsAddr, "_http._tcp."+host, dns.TypeSRV)) != per {
					return false
				}
			}
			return true
		})
	}
	answers(100, 8, 8)
	if got := pub.Size(); got != 512 {
		t.Fatalf("table of %d slots for 320 instances; want 512 (16 doubled)", got)
	}
	publish(101, 1)
	answers(101, 1, 1)
	publish(102, 12)
	answers(102, 8, 12)
	if got := pub.Size(); got != 512 {
		t.Fatalf("table of %d slots for 480 instances after 40; want 512 still", got)
	}
	// Each address is its own instance's: nothing moved into another's
	// slot wrongly.
	for s := range services {
		for _, rr := range ask(t, dnsAddr, "i11."+name(s)+".shop.svc.cairn.internal.", dns.TypeA) {
			if a := rr.(*dns.A).A.String(); a != fmt.Sprintf("10.%d.0.12", s) {
				t.Errorf("i11 of %s: %s", name(s), a)
			}
		}
	}

	// Restarted from its file, no server answering, into tables of 16
	// slots again: every instance is served at once.
	f.waitFor("the file at revision 102", func() bool {
		kept, err := tablefile.Load(path)
		return err == nil && kept != nil && kept.Revision == 102 && len(kept.Entries) == services*12
	})
	f.stop()
	stop()
	pub2, err := status.New(status.Config{Capacity: 4096, Initial: 16})
	if err != nil {
		t.Fatal(err)
	}
	startAgentWith(t, func(c *agent.Config) { c.Services, c.Table = subs, pub2 }, path, addr)
	tbl := pub2.Acquire()
	defer tbl.Release()
	for s := range services {
		id, ok := tbl.Directory().ServiceID(name(s) + ".shop")
		if n := len(tbl.Members(id)); !ok || n != 12 {
			t.Fatalf("%s from disk: %d members (%v), want 12", name(s), n, ok)
		}
	}
	if tbl.Capacity() != 512 || tbl.StoreRevision() != 102 {
		t.Errorf("from disk: a table of %d slots at revision %d, want 512 at 102", tbl.Capacity(), tbl.StoreRevision())
	}
}

// ask returns the answers to a query for name of type qt at addr.
func ask(t *testing.T, addr, name string, qt uint16) []dns.RR {
	t.Helper()
	q := new(dns.Msg)
	q.SetQuestion(name, qt)
	q.SetEdns0(4096, false)
	r, _, err := (&dns.Client{Timeout: 5 * time.Second}).Exchange(q, addr)
	if err != nil {
		t.Fatal(err)
	}
	return r.Answer
}

// TestAgentTakesALargeFirstResponse: the first response to an agent
// subscribed to 2,500 services of 8 carries all 20,000 instances in one
// message, past gRPC's default 4 MiB; the agent takes it and holds
// every view.
func TestAgentTakesALargeFirstResponse(t *testing.T) {
	if testing.Short() {
		t.Skip("20,000 instances")
	}
	const services, per = 2500, 8
	tb := statustest.New(t, services*per)
	srv, err := xdsserver.New(xdsserver.Config{Table: tb.Publisher, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	addr, stop, err := xdstest.Serve(srv)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	var all []statustest.Service
	var subs []string
	for s := range services {
		svc := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: fmt.Sprintf("s%04d", s),
			Ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}}
		for i := range per {
			in := statustest.Ready(fmt.Sprintf("instance-%d", i), fmt.Sprintf("10.%d.%d.%d", s/250, s%250, i+1))
			in.Ports = map[string]uint16{"http": 8080}
			svc.Instances = append(svc.Instances, in.In("eu", "eu-1a"))
		}
		all = append(all, svc)
		subs = append(subs, "shop/"+svc.Name)
	}
	tb.PublishAt(t, 7, all...)
	pub, err := status.New(status.Config{Capacity: 1 << 16, Initial: 256})
	if err != nil {
		t.Fatal(err)
	}
	// Under -race the server takes seconds to encode 2,500 views: the
	// agent waits for them, and the test a minute.
	startAgentWith(t, func(c *agent.Config) { c.Services, c.Table, c.Path, c.AnswerTimeout = subs, pub, "", time.Minute }, "", addr)
	held := func() int {
		tbl := pub.Acquire()
		if tbl == nil {
			return 0
		}
		defer tbl.Release()
		n := 0
		for s := range services {
			id, _ := tbl.Directory().ServiceID(fmt.Sprintf("s%04d.shop", s))
			n += len(tbl.Members(id))
		}
		return n
	}
	for deadline := time.Now().Add(time.Minute); held() != services*per; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the agent holds %d instances, want %d", held(), services*per)
		}
	}
}
