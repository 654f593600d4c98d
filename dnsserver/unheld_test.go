package dnsserver_test

import (
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/status"
)

// TestUnheld: a table that holds only some services (an agent's) asks
// Config.Unheld about the others. A query for one that comes while it
// waits is answered from the table it came in; one that does not come
// within UnheldWait is SERVFAIL with EDE 14 (not a cached denial), for
// its service, port and instance names alike, over UDP and TCP; one
// that will not come is NXDOMAIN at once; a held service is answered
// without asking.
func TestUnheld(t *testing.T) {
	const wait = 100 * time.Millisecond
	var mu sync.Mutex
	asked := map[string]int{}
	never := make(chan struct{}) // a view that does not come
	cartAsked := make(chan struct{}, 8)
	cartCame := make(chan struct{})
	f := start(t, shopServices(), func(c *dnsserver.Config) {
		c.UnheldWait = wait
		c.Unheld = func(ns, svc string) <-chan struct{} {
			mu.Lock()
			defer mu.Unlock()
			asked[svc+"."+ns]++
			switch svc {
			case "gone":
				return nil
			case "cart":
				cartAsked <- struct{}{}
				return cartCame
			}
			return never
		}
	})
	zone := f.zone.Domain()

	// cart comes while its first query waits.
	cart := svc{ns: "shop", name: "cart", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}, insts: ready("c1")}
	go func() {
		<-cartAsked
		f.publish(append(shopServices(), cart))
		close(cartCame)
	}()
	if r := f.ask("udp", query("cart.shop.svc."+zone, dns.TypeA, true)); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Errorf("a service that came while its query waited: rcode %s, %d answers; want its address", dns.RcodeToString[r.Rcode], len(r.Answer))
	}

	for _, q := range []struct {
		net, name string
		qtype     uint16
	}{{"udp", "Late.shop.svc.", dns.TypeA}, {"udp", "_http._tcp.late.shop.svc.", dns.TypeSRV}, {"udp", "i1.late.SHOP.svc.", dns.TypeA},
		{"tcp", "late.shop.svc.", dns.TypeA}} {
		begin := time.Now()
		r := f.ask(q.net, query(q.name+zone, q.qtype, true))
		if r.Rcode != dns.RcodeServerFailure || r.Authoritative {
			t.Errorf("%s %s: rcode %s AA %v, want SERVFAIL without AA", q.net, q.name, dns.RcodeToString[r.Rcode], r.Authoritative)
		}
		if e := ede(r); len(e) != 1 || e[0].InfoCode != dns.ExtendedErrorCodeNotReady {
			t.Errorf("%s %s: EDE %v, want 14 (Not Ready)", q.net, q.name, e)
		}
		if d := time.Since(begin); d < wait {
			t.Errorf("%s %s: answered after %v, before the wait of %v", q.net, q.name, d, wait)
		}
	}
	if r := f.ask("udp", query("gone.shop.svc."+zone, dns.TypeA, true)); r.Rcode != dns.RcodeNameError {
		t.Errorf("a service that will not come: rcode %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	if r := f.ask("udp", query("web.shop.svc."+zone, dns.TypeA, true)); r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		t.Errorf("a held service: rcode %s, %d answers", dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	if r := f.ask("udp", query("nope.web.shop.svc."+zone, dns.TypeA, true)); r.Rcode != dns.RcodeNameError {
		t.Errorf("a missing instance of a held service: rcode %s, want NXDOMAIN", dns.RcodeToString[r.Rcode])
	}
	mu.Lock()
	defer mu.Unlock()
	// Each waiting query asks twice: when it comes, and when it has
	// waited (SERVFAIL only if the service is still unheld then).
	if asked["cart.shop"] != 1 || asked["late.shop"] != 8 || asked["gone.shop"] != 1 || asked["web.shop"] != 0 {
		t.Errorf("asked %v; want cart.shop once, late.shop 8 times, gone.shop once, web.shop never", asked)
	}
}
