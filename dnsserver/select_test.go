package dnsserver_test

import (
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/status"
)

// weighted is one zone's service of four endpoints with weights 10, 20,
// 30 and 40.
func weighted(limit int) svc {
	s := svc{ns: "shop", name: "w", limit: limit, ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}},
		insts: ready("e1", "e2", "e3", "e4")}
	for i := range s.insts {
		s.insts[i].weight = uint16(10 * (i + 1))
	}
	return s
}

// chiSquare of observed counts against expected proportions.
func chiSquare(obs []int, weights []float64) float64 {
	total, wsum := 0, 0.0
	for i := range obs {
		total += obs[i]
		wsum += weights[i]
	}
	x := 0.0
	for i := range obs {
		exp := float64(total) * weights[i] / wsum
		d := float64(obs[i]) - exp
		x += d * d / exp
	}
	return x
}

// critical value of chi-square with 3 degrees of freedom at p = 0.001: a
// correct sampler fails this once in a thousand seeds; the seed is fixed.
const chi2df3 = 16.27

// With one record per answer, the endpoint chosen is drawn in proportion
// to its weight; with all records, the first is.
func TestWeightDistribution(t *testing.T) {
	const n = 10000
	for _, c := range []struct {
		name  string
		qname string
		qtype uint16
		limit int
	}{
		{"A, one record", "w.shop.svc.cairn.internal.", dns.TypeA, 1},
		{"A, first of all", "w.shop.svc.cairn.internal.", dns.TypeA, 8},
		{"SRV, first record", "_http._tcp.w.shop.svc.cairn.internal.", dns.TypeSRV, 8},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := start(t, []svc{weighted(c.limit)}, nil)
			w := &sink{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
			q := query(c.qname, c.qtype, true)
			obs := make([]int, 4)
			for range n {
				f.srv.ServeDNS(w, q)
				var r dns.Msg
				if err := r.Unpack(w.last); err != nil || len(r.Answer) == 0 {
					t.Fatalf("answer %v: %v", r, err)
				}
				var first string
				switch rr := r.Answer[0].(type) {
				case *dns.A:
					first = rr.A.String()
				case *dns.SRV:
					first = strings.TrimPrefix(strings.SplitN(rr.Target, ".", 2)[0], "e")
					first = "10.0.0." + first
				}
				idx := slices.Index([]string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}, first)
				if idx < 0 {
					t.Fatalf("unexpected first record %v", r.Answer[0])
				}
				obs[idx]++
			}
			x := chiSquare(obs, []float64{10, 20, 30, 40})
			t.Logf("first record counts %v for weights 10:20:30:40, chi-square %.2f", obs, x)
			if x > chi2df3 {
				t.Fatalf("counts %v do not follow the weights 10:20:30:40 (chi-square %.2f > %.2f)", obs, x, chi2df3)
			}
		})
	}
}

// Sampling is without replacement: a limit of 3 of 4 never repeats an
// endpoint, and a heavier endpoint is left out less often.
func TestSamplingWithoutReplacement(t *testing.T) {
	f := start(t, []svc{weighted(3)}, nil)
	w := &sink{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
	q := query("w.shop.svc.cairn.internal.", dns.TypeA, true)
	left := map[string]int{}
	for range 4000 {
		f.srv.ServeDNS(w, q)
		var r dns.Msg
		if err := r.Unpack(w.last); err != nil || len(r.Answer) != 3 {
			t.Fatalf("answer %v: %v; want 3 records", r, err)
		}
		seen := map[string]bool{}
		for _, rr := range r.Answer {
			a := rr.(*dns.A).A.String()
			if seen[a] {
				t.Fatalf("%s twice in one answer: %v", a, r.Answer)
			}
			seen[a] = true
		}
		for _, a := range []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"} {
			if !seen[a] {
				left[a]++
			}
		}
	}
	if !(left["10.0.0.1"] > left["10.0.0.2"] && left["10.0.0.2"] > left["10.0.0.3"] && left["10.0.0.3"] > left["10.0.0.4"]) {
		t.Fatalf("left out %v: the lightest should be left out most", left)
	}
}

func topologyServices() []svc {
	s := svc{ns: "shop", name: "geo", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}
	add := func(id, addr, region, zone string, eligible bool) {
		i := inst{id: id, addrs: []string{addr}, region: region, zone: zone, eligible: eligible, lifecycle: status.Ready, verdict: status.Healthy}
		if !eligible {
			i.verdict = status.Unhealthy
		}
		s.insts = append(s.insts, i)
	}
	add("a1", "10.0.1.1", "eu", "eu-a", true)
	add("a2", "10.0.1.2", "eu", "eu-a", true)
	add("b1", "10.0.2.1", "eu", "eu-b", true)
	add("c1", "10.0.3.1", "us", "us-c", true)
	return []svc{s}
}

func answerAddrs(r *dns.Msg) []string {
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	slices.Sort(out)
	return out
}

// The caller's place: trusted ECS, else its source address in the
// subnets, else the server's own.
func TestTopology(t *testing.T) {
	const name = "geo.shop.svc.cairn.internal."
	f := start(t, topologyServices(), func(c *dnsserver.Config) {
		c.Own = dnsserver.Place{Region: "us", Zone: "us-c"}
		c.Subnets = []dnsserver.Subnet{
			{Prefix: netip.MustParsePrefix("192.0.2.0/24"), Place: dnsserver.Place{Region: "eu", Zone: "eu-b"}},
			{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Place: dnsserver.Place{Region: "eu", Zone: "eu-a"}},
		}
		c.ECSTrusted = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	})
	// No ECS, source 127.0.0.1 in no subnet: the server's own zone us-c.
	if got := answerAddrs(f.ask("udp", query(name, dns.TypeA, true))); !slices.Equal(got, []string{"10.0.3.1"}) {
		t.Fatalf("own place: %v, want us-c's c1", got)
	}
	ecsQuery := func(addr string, bits uint8) *dns.Msg {
		q := query(name, dns.TypeA, true)
		o := q.IsEdns0()
		o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: bits,
			Address: net.ParseIP(addr).To4()})
		return q
	}
	r := f.ask("udp", ecsQuery("198.51.100.7", 24))
	if got := answerAddrs(r); !slices.Equal(got, []string{"10.0.1.1", "10.0.1.2"}) {
		t.Fatalf("ECS in eu-a: %v, want a1 and a2", got)
	}
	var ecs *dns.EDNS0_SUBNET
	for _, op := range r.IsEdns0().Option {
		if e, ok := op.(*dns.EDNS0_SUBNET); ok {
			ecs = e
		}
	}
	if ecs == nil || ecs.SourceNetmask != 24 || ecs.SourceScope != 24 || ecs.Family != 1 || !ecs.Address.Equal(net.ParseIP("198.51.100.0")) {
		t.Fatalf("ECS echo %v, want family 1, 198.51.100.0/24, scope 24", ecs)
	}
	if got := answerAddrs(f.ask("udp", ecsQuery("192.0.2.9", 24))); !slices.Equal(got, []string{"10.0.2.1"}) {
		t.Fatalf("ECS in eu-b: %v, want b1", got)
	}
}

// ECS from a source that is not trusted is not used: echoed with scope 0
// (RFC 7871 §7.2.1), the answer the server's own place's.
func TestUntrustedECS(t *testing.T) {
	const name = "geo.shop.svc.cairn.internal."
	f := start(t, topologyServices(), func(c *dnsserver.Config) {
		c.Own = dnsserver.Place{Region: "us", Zone: "us-c"}
		c.Subnets = []dnsserver.Subnet{{Prefix: netip.MustParsePrefix("198.51.100.0/24"), Place: dnsserver.Place{Region: "eu", Zone: "eu-a"}}}
	})
	q := query(name, dns.TypeA, true)
	o := q.IsEdns0()
	o.Option = append(o.Option, &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: net.ParseIP("198.51.100.7").To4()})
	r := f.ask("udp", q)
	if got := answerAddrs(r); !slices.Equal(got, []string{"10.0.3.1"}) {
		t.Fatalf("untrusted ECS: %v, want the server's own place", got)
	}
	ops := r.IsEdns0().Option
	if len(ops) != 1 {
		t.Fatalf("untrusted ECS: options %v, want the ECS echoed", ops)
	}
	if e, ok := ops[0].(*dns.EDNS0_SUBNET); !ok || e.SourceScope != 0 || e.SourceNetmask != 24 || !e.Address.Equal(net.ParseIP("198.51.100.0")) {
		t.Fatalf("untrusted ECS echoed as %v, want 198.51.100.0/24 scope 0", ops[0])
	}
}

// A zone below the overprovisioned fraction spills its callers into the
// region; a region below it into the other regions.
func TestSpill(t *testing.T) {
	const name = "geo.shop.svc.cairn.internal."
	svcs := topologyServices()
	svcs[0].insts[1].eligible = false // eu-a: a1 of a1, a2 eligible → 0.5 × 1.4 < 1
	f := start(t, svcs, func(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "eu", Zone: "eu-a"} })
	if got := answerAddrs(f.ask("udp", query(name, dns.TypeA, true))); !slices.Equal(got, []string{"10.0.1.1", "10.0.2.1"}) {
		t.Fatalf("eu-a half down: %v, want a1 and the region's b1", got)
	}
	// SRV lists every eligible endpoint with its tier as priority.
	r := f.ask("udp", query("_http._tcp."+name, dns.TypeSRV, true))
	prio := map[string]uint16{}
	for _, rr := range r.Answer {
		s := rr.(*dns.SRV)
		prio[strings.SplitN(s.Target, ".", 2)[0]] = s.Priority
	}
	if want := map[string]uint16{"a1": 0, "b1": 1, "c1": 2}; len(prio) != 3 || prio["a1"] != 0 || prio["b1"] != 1 || prio["c1"] != 2 {
		t.Fatalf("SRV priorities %v, want %v", prio, want)
	}
}

// zoneOf makes n ready instances in one zone, the first eligible ones of
// them healthy.
func zoneOf(prefix, region, zone string, n, eligible int) []inst {
	var out []inst
	for i := range n {
		in := inst{id: fmt.Sprintf("%s%d", prefix, i), addrs: []string{fmt.Sprintf("10.%d.%d.%d", len(prefix), i/200, i%200+1)},
			region: region, zone: zone, lifecycle: status.Ready, verdict: status.Unhealthy}
		if i < eligible {
			in.eligible, in.verdict = true, status.Healthy
		}
		out = append(out, in)
	}
	return out
}

func firstRecordZones(t *testing.T, f *fixture, name string, n int, zoneOfAddr func(string) string) map[string]int {
	t.Helper()
	w := &sink{remote: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5353}}
	q := query(name, dns.TypeA, true)
	out := map[string]int{}
	for range n {
		f.srv.ServeDNS(w, q)
		var r dns.Msg
		if err := r.Unpack(w.last); err != nil || len(r.Answer) == 0 {
			t.Fatalf("answer %v: %v", r, err)
		}
		out[zoneOfAddr(r.Answer[0].(*dns.A).A.String())]++
	}
	return out
}

// A half-healthy zone keeps 0.5 × 1.4 = 70% of its callers' load and
// spills 30% to its region, even when it has more candidates than the
// record limit.
func TestSpillShareWithManyCandidates(t *testing.T) {
	s := svc{ns: "shop", name: "many", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}
	s.insts = append(zoneOf("a", "eu", "eu-a", 20, 10), zoneOf("bb", "eu", "eu-b", 20, 20)...)
	f := start(t, []svc{s}, func(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "eu", Zone: "eu-a"} })
	got := firstRecordZones(t, f, "many.shop.svc.cairn.internal.", 4000, func(a string) string {
		if strings.HasPrefix(a, "10.1.") {
			return "eu-a"
		}
		return "eu-b"
	})
	share := float64(got["eu-b"]) / 4000
	t.Logf("first records by zone %v: %.3f spilled", got, share)
	if share < 0.26 || share > 0.34 {
		t.Fatalf("%.3f of first records spilled to eu-b, want about 0.30", share)
	}
}

// Under the guard, healthy endpoints come first: an answer cut to the
// record limit still holds the healthy one.
func TestGuardListsHealthyFirst(t *testing.T) {
	s := svc{ns: "shop", name: "sick", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}
	s.insts = append(zoneOf("a", "eu", "eu-a", 10, 0), zoneOf("bb", "eu", "eu-b", 1, 1)...)
	f := start(t, []svc{s}, func(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "eu", Zone: "eu-a"} })
	r := f.ask("udp", query("sick.shop.svc.cairn.internal.", dns.TypeA, true))
	if len(r.Answer) != 8 || r.Answer[0].(*dns.A).A.String() != "10.2.0.1" || len(ede(r)) != 1 {
		t.Fatalf("%v; want 8 records, the healthy 10.2.0.1 first, and EDE 0", r)
	}
}

// Instances the evaluator serves only under its own guard are not
// healthy to the tiers: their zone spills.
func TestEvaluatorGuardedZoneSpills(t *testing.T) {
	s := svc{ns: "shop", name: "g", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}
	a := zoneOf("a", "eu", "eu-a", 4, 0)
	for i := range a {
		a[i].eligible, a[i].flags = true, status.HealthDisregarded
	}
	s.insts = append(a, zoneOf("bb", "eu", "eu-b", 2, 2)...)
	f := start(t, []svc{s}, func(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "eu", Zone: "eu-a"} })
	r := f.ask("udp", query("g.shop.svc.cairn.internal.", dns.TypeA, true))
	// eu-a has 0 healthy: spill into eu-b; together 2 healthy of 6 is
	// below 0.5, so all six are served, the healthy two first.
	if len(r.Answer) != 6 || !strings.HasPrefix(r.Answer[0].(*dns.A).A.String(), "10.2.") ||
		!strings.HasPrefix(r.Answer[1].(*dns.A).A.String(), "10.2.") || len(ede(r)) != 1 {
		t.Fatalf("%v; want the two healthy eu-b endpoints first of six, with EDE 0", r)
	}
}

// The EDE of an answer under the guard never costs the answer: room is
// kept for it before the records are written.
func TestDisregardedSRVFits(t *testing.T) {
	s := svc{ns: "shop", name: "big", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}
	s.insts = zoneOf("a", "", "", 20, 2)
	f := start(t, []svc{s}, nil)
	r := f.ask("udp", query("_http._tcp.big.shop.svc.cairn.internal.", dns.TypeSRV, true))
	if r.Truncated || len(r.Answer) != 20 || len(ede(r)) != 1 {
		t.Fatalf("TC=%v, %d answers, EDE %v; want all 20 with EDE 0", r.Truncated, len(r.Answer), ede(r))
	}
	// Without EDNS, 8 SRV records fit 512 bytes: nothing is reserved for
	// an OPT that will not be sent.
	s.insts = zoneOf("a", "", "", 8, 8)
	f.publish([]svc{s})
	r = f.ask("udp", query("_http._tcp.big.shop.svc.cairn.internal.", dns.TypeSRV, false))
	if r.Truncated || len(r.Answer) != 8 {
		t.Fatalf("no EDNS: TC=%v with %d answers; want 8", r.Truncated, len(r.Answer))
	}
}

// An evacuated zone is last for every caller: its own callers get the
// region, SRV lists it at the last priority, nothing is withdrawn; with
// nothing else left, the answer spills into it and says so.
func TestEvacuatedZone(t *testing.T) {
	const name = "geo.shop.svc.cairn.internal."
	svcs := topologyServices()
	svcs[0].insts[0].shift, svcs[0].insts[1].shift = status.ShiftAll, status.ShiftAll // eu-a
	f := start(t, svcs, func(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "eu", Zone: "eu-a"} })
	r := f.ask("udp", query(name, dns.TypeA, true))
	if got := answerAddrs(r); !slices.Equal(got, []string{"10.0.2.1"}) || len(ede(r)) != 0 {
		t.Fatalf("eu-a evacuated, caller in eu-a: %v (EDE %v), want the region's b1 alone", got, ede(r))
	}
	r = f.ask("udp", query("_http._tcp."+name, dns.TypeSRV, true))
	prio := map[string]uint16{}
	for _, rr := range r.Answer {
		s := rr.(*dns.SRV)
		prio[strings.SplitN(s.Target, ".", 2)[0]] = s.Priority
	}
	if len(prio) != 4 || prio["b1"] != 1 || prio["c1"] != 2 || prio["a1"] != status.TierEvacuated || prio["a2"] != status.TierEvacuated {
		t.Fatalf("SRV priorities %v, want b1 1, c1 2, a1 and a2 last (%d)", prio, status.TierEvacuated)
	}
	// The rest withdrawn: the caller spills into the evacuated zone,
	// flagged.
	svcs[0].insts[2].eligible, svcs[0].insts[2].verdict = false, status.Unhealthy
	svcs[0].insts[3].eligible, svcs[0].insts[3].verdict = false, status.Unhealthy
	svcs[0].minFrac = 0.1
	f.publish(svcs)
	r = f.ask("udp", query(name, dns.TypeA, true))
	eds := ede(r)
	if got := answerAddrs(r); !slices.Equal(got, []string{"10.0.1.1", "10.0.1.2"}) || len(eds) != 1 ||
		!strings.HasPrefix(eds[0].ExtraText, "evacuated-zone") {
		t.Fatalf("nothing else left: %v (EDE %v), want a1 and a2 with EDE 0 evacuated-zone", got, eds)
	}
}

// A zone returning from an evacuation takes back its share: a caller
// in it sends 1.4 × share of its load there, the rest to the region,
// and SRV weights carry the share.
func TestReturningZoneShare(t *testing.T) {
	s := svc{ns: "shop", name: "back", ports: []status.Port{{Name: "http", Number: 80, Protocol: "tcp"}}}
	s.insts = append(zoneOf("a", "eu", "eu-a", 4, 4), zoneOf("bb", "eu", "eu-b", 4, 4)...)
	for i := range 4 {
		s.insts[i].shift = 70 // a share of 0.3
	}
	f := start(t, []svc{s}, func(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "eu", Zone: "eu-a"} })
	got := firstRecordZones(t, f, "back.shop.svc.cairn.internal.", 4000, func(a string) string {
		if strings.HasPrefix(a, "10.1.") {
			return "eu-a"
		}
		return "eu-b"
	})
	share := float64(got["eu-a"]) / 4000
	if share < 0.38 || share > 0.46 {
		t.Fatalf("%.3f of first records in the returning zone, want about 1.4 × 0.3 = 0.42", share)
	}
	// SRV: the caller's zone and the region share priority 0, the
	// weights carrying each one's share (a client takes priority 0
	// whole, so the zone alone there would take back all its callers).
	r := f.ask("udp", query("_http._tcp.back.shop.svc.cairn.internal.", dns.TypeSRV, true))
	var zoneW, allW float64
	for _, rr := range r.Answer {
		srv := rr.(*dns.SRV)
		if srv.Priority != 0 {
			t.Fatalf("%s at priority %d, want 0 (merged)", srv.Target, srv.Priority)
		}
		allW += float64(srv.Weight)
		if strings.HasPrefix(srv.Target, "a") {
			zoneW += float64(srv.Weight)
		}
	}
	if len(r.Answer) != 8 || math.Abs(zoneW/allW-0.42) > 0.001 {
		t.Fatalf("SRV: %d records, the returning zone weighing %.3f; want 8, 0.42", len(r.Answer), zoneW/allW)
	}
	// A caller in eu-b has its own zone whole: tiers as priorities, the
	// returning zone's weights at its share.
	g := start(t, []svc{s}, func(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "eu", Zone: "eu-b"} })
	for _, rr := range g.ask("udp", query("_http._tcp.back.shop.svc.cairn.internal.", dns.TypeSRV, true)).Answer {
		srv := rr.(*dns.SRV)
		prio, want := uint16(0), uint16(100)
		if strings.HasPrefix(srv.Target, "a") {
			prio, want = 1, 30
		}
		if srv.Priority != prio || srv.Weight != want {
			t.Errorf("caller in eu-b: %s priority %d weight %d, want %d %d", srv.Target, srv.Priority, srv.Weight, prio, want)
		}
	}
}

// Another region's endpoints from a stale view of it (status.PeerStale)
// are served as the view last said, never dropped; an answer that holds
// one is a stale answer (EDE 3, TTLs capped at 30 s), and one that does
// not is fresh.
func TestPeerStaleEndpoints(t *testing.T) {
	const name = "geo.shop.svc.cairn.internal."
	svcs := topologyServices()
	svcs[0].ttl = time.Minute
	svcs[0].insts[3].flags = status.PeerStale // c1, region us
	f := start(t, svcs, func(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "eu", Zone: "eu-a"} })
	r := f.ask("udp", query(name, dns.TypeA, true))
	if got := answerAddrs(r); !slices.Equal(got, []string{"10.0.1.1", "10.0.1.2"}) || len(ede(r)) != 0 || r.Answer[0].Header().Ttl != 60 {
		t.Fatalf("caller in eu-a: %v (EDE %v, TTL %d), want a1 and a2, fresh, TTL 60", got, ede(r), r.Answer[0].Header().Ttl)
	}
	r = f.ask("udp", query("_http._tcp."+name, dns.TypeSRV, true))
	eds := ede(r)
	if len(r.Answer) != 4 || len(eds) != 1 || eds[0].InfoCode != dns.ExtendedErrorCodeStaleAnswer || eds[0].ExtraText == "" {
		t.Fatalf("SRV: %d records, EDE %v; want all 4 (c1 kept) with one EDE 3", len(r.Answer), eds)
	}
	for _, rr := range append(r.Answer, r.Extra...) {
		if _, opt := rr.(*dns.OPT); !opt && rr.Header().Ttl > 30 {
			t.Fatalf("stale SRV answer has TTL %d in %v, want at most 30", rr.Header().Ttl, rr)
		}
	}
	r = f.ask("udp", query("c1."+name, dns.TypeA, true))
	if eds := ede(r); len(r.Answer) != 1 || len(eds) != 1 || eds[0].InfoCode != dns.ExtendedErrorCodeStaleAnswer {
		t.Fatalf("c1's own name: %v, EDE %v; want its address, EDE 3", r.Answer, eds)
	}
	// A caller in us gets c1 first, stale; a node stale itself says so
	// once.
	f2 := start(t, svcs, func(c *dnsserver.Config) { c.Own = dnsserver.Place{Region: "us", Zone: "us-c"} })
	f2.age(time.Minute)
	r = f2.ask("udp", query(name, dns.TypeA, true))
	if got, eds := answerAddrs(r), ede(r); !slices.Equal(got, []string{"10.0.3.1"}) || len(eds) != 1 || eds[0].InfoCode != dns.ExtendedErrorCodeStaleAnswer {
		t.Fatalf("caller in us, node stale: %v (EDE %v), want c1 with one EDE 3", got, eds)
	}
}
