package dnsserver_test

import (
	"encoding/binary"
	"testing"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
)

// revisionOf returns the revision option's value in r, and whether it
// has one.
func revisionOf(t *testing.T, r *dns.Msg) (uint64, bool) {
	t.Helper()
	o := r.IsEdns0()
	if o == nil {
		return 0, false
	}
	for _, op := range o.Option {
		if l, ok := op.(*dns.EDNS0_LOCAL); ok && l.Code == dnsserver.RevisionOption {
			if len(l.Data) != 8 {
				t.Fatalf("revision option of %d bytes", len(l.Data))
			}
			return binary.BigEndian.Uint64(l.Data), true
		}
	}
	return 0, false
}

func withRevision(q *dns.Msg) *dns.Msg {
	o := q.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_LOCAL{Code: dnsserver.RevisionOption})
	return q
}

// A query carrying the revision option is answered with the store
// revision of the table (or, with Config.Revision, of the service's
// view), over UDP's own path and miekg/dns's; a query without it gets
// none.
func TestRevisionOption(t *testing.T) {
	f := start(t, shopServices(), own)
	f.publish(shopServices()) // the table of store revision 2
	f.publish(shopServices()) // and of 3
	const name = "web.shop.svc.cairn.internal."
	for _, net := range []string{"udp", "tcp"} {
		r := f.ask(net, withRevision(query(name, dns.TypeA, true)))
		if rev, ok := revisionOf(t, r); !ok || rev != 3 {
			t.Errorf("%s: revision %d %v, want the table's, 3", net, rev, ok)
		}
		if len(r.Answer) == 0 {
			t.Errorf("%s: no answer beside the revision", net)
		}
		if _, ok := revisionOf(t, f.ask(net, query(name, dns.TypeA, true))); ok {
			t.Errorf("%s: a revision nobody asked for", net)
		}
		if rev, ok := revisionOf(t, f.ask(net, withRevision(query("nope.shop.svc.cairn.internal.", dns.TypeA, true)))); !ok || rev != 3 {
			t.Errorf("%s: NXDOMAIN's revision %d %v", net, rev, ok)
		}
	}

	views := start(t, shopServices(), func(c *dnsserver.Config) {
		own(c)
		c.Revision = func(ns, svc string) (uint64, bool) { return 7, ns == "shop" && svc == "web" }
	})
	if rev, ok := revisionOf(t, views.ask("udp", withRevision(query(name, dns.TypeA, true)))); !ok || rev != 7 {
		t.Errorf("with a view's revision: %d %v, want 7", rev, ok)
	}
}
