package dnsserver_test

import (
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
)

// TestUnheld: a table that holds only some services (an agent's) asks
// Config.Unheld about the others: a service that may yet come is
// SERVFAIL with EDE 14 (not a cached denial), for its service, port and
// instance names alike, asked in lower case; one that will not is
// NXDOMAIN; a held service is answered without asking.
func TestUnheld(t *testing.T) {
	var mu sync.Mutex
	asked := map[string]int{}
	f := start(t, shopServices(), func(c *dnsserver.Config) {
		c.Unheld = func(ns, svc string) bool {
			mu.Lock()
			defer mu.Unlock()
			asked[svc+"."+ns]++
			return svc != "gone"
		}
	})
	zone := f.zone.Domain()
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{"Cart.shop.svc.", dns.TypeA}, {"_http._tcp.cart.shop.svc.", dns.TypeSRV}, {"i1.cart.SHOP.svc.", dns.TypeA}} {
		r := f.ask("udp", query(q.name+zone, q.qtype, true))
		if r.Rcode != dns.RcodeServerFailure || r.Authoritative {
			t.Errorf("%s: rcode %s AA %v, want SERVFAIL without AA", q.name, dns.RcodeToString[r.Rcode], r.Authoritative)
		}
		if e := ede(r); len(e) != 1 || e[0].InfoCode != dns.ExtendedErrorCodeNotReady {
			t.Errorf("%s: EDE %v, want 14 (Not Ready)", q.name, e)
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
	if asked["cart.shop"] != 3 || asked["gone.shop"] != 1 || asked["web.shop"] != 0 {
		t.Errorf("asked %v; want cart.shop 3 times, gone.shop once, web.shop never", asked)
	}
}
