package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/cmd"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/wire"
)

// The region tests (issue 34) run two regions, a and b, each a cluster
// of three servers of its own in a network namespace of netlab (a's on
// sd1 at 10.199.0.1, b's on sd2 at 10.199.0.2), over TLS with one CA,
// each following the other's views (--peer-region). The link between
// the regions is sd1↔sd2: cut with iptables inside the two hosts, the
// test's namespace still reaching both. DNS callers ask from addresses
// of the test's namespace that each server's --subnet places in a
// region: regionCaller("a") in a's zone a-1, regionCaller("b") in b's
// zone b-1.

const (
	regionAdmin = "admin-regions-0123456789abcdef"
	// regionStale is the servers' --stale-after: short, so that the
	// cut's staleness shows soon after the cut is found.
	regionStale = 2 * time.Second
	regionSvc   = "web"
)

// regionCaller is the address a DNS caller in region r asks from.
func regionCaller(r string) string {
	return map[string]string{"a": LabNet + ".101", "b": LabNet + ".102"}[r]
}

// regionDefinition is shop/web in each region: no check (in rotation
// when ready), no slow start (whole weights), a ten-second shift_back.
const regionDefinition = `namespace: shop
name: web
ports: [{name: http, number: 8080, protocol: tcp}]
capability: {readiness: none}
policy: {dns_ttl: 60s, slow_start: 0s, lease_ttl: 1h, shift_back: 10s}
`

// regions is the two regions.
type regions struct {
	lab    *Netlab
	a, b   *Cluster
	byName map[string]*Cluster
	// ids are each region's instances of shop/web; addr their
	// addresses.
	ids  map[string][]string
	addr map[string]string
	// signal is every server's --failover-signal file.
	signal string
	// inc is each instance's incarnation, as its own region gave it.
	inc map[string]uint64
}

// startRegions starts both regions, each with three instances of
// shop/web (a-0…a-2 at 10.1.0.x, b-0…b-2 at 10.2.0.x), and waits until
// every server of each answers for all six.
func startRegions(t *testing.T) *regions {
	t.Helper()
	lab := NeedNetlab(t)
	for _, r := range []string{"a", "b"} {
		lab.Alias(regionCaller(r))
	}
	tls, err := NewTLS(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rs := &regions{lab: lab, ids: map[string][]string{}, addr: map[string]string{}, inc: map[string]uint64{}, signal: filepath.Join(t.TempDir(), "failover.yaml")}
	prepare := func(name string, host int, other **Cluster, otherName string) *Cluster {
		var hosts []Host
		for range 3 {
			hosts = append(hosts, Host{Netns: LabHost(host), Addr: LabAddr(host)})
		}
		return PrepareCluster(t, Config{Nodes: 3, Hosts: hosts, Name: name, SharedTLS: tls, Token: regionAdmin,
			Args: []string{"--acl-bootstrap-token", regionAdmin, "--peer-token", regionAdmin, "--region", name,
				"--stale-after", regionStale.String(), "--failover-signal", rs.signal,
				"--subnet", regionCaller("a") + "/32=a/a-1", "--subnet", regionCaller("b") + "/32=b/b-1"},
			NodeArgs: func(i int) []string {
				var addrs []string
				for _, n := range (*other).Nodes {
					addrs = append(addrs, n.GRPCAddr)
				}
				return []string{"--zone", fmt.Sprintf("%s-%d", name, i), "--peer-region", otherName + "=" + strings.Join(addrs, ",")}
			}})
	}
	rs.a = prepare("a", 1, &rs.b, "b")
	rs.b = prepare("b", 2, &rs.a, "a")
	rs.byName = map[string]*Cluster{"a": rs.a, "b": rs.b}
	for _, c := range []*Cluster{rs.a, rs.b} {
		if err := c.Start(); err != nil {
			t.Fatalf("starting region %s: %v", c.cfg.Name, err)
		}
	}
	ctx := ctxT(t, 2*time.Minute)
	for name, c := range rs.byName {
		applyDefinition(ctx, t, c, regionDefinition)
		for i := range 3 {
			id, ip := fmt.Sprintf("%s-%d", name, i), fmt.Sprintf("10.%d.0.%d", map[string]int{"a": 1, "b": 2}[name], i+1)
			reg := registerLoopback(ctx, t, c, regionSvc, id, 8080, func(r *wire.Registration) {
				r.Addresses, r.Region, r.Zone = []string{ip}, name, name+"-1"
			})
			rs.inc[id] = reg.Incarnation
			rs.ids[name] = append(rs.ids[name], id)
			rs.addr[id] = ip
		}
	}
	all := append(slices.Clone(rs.ids["a"]), rs.ids["b"]...)
	slices.Sort(all)
	for _, n := range rs.nodes() {
		Eventually(t, 30*time.Second, func() error {
			got, err := rs.srv(n, "a")
			if err != nil {
				return err
			}
			if ids := got.ids(); !slices.Equal(ids, all) || got.stale {
				return fmt.Errorf("%s answers %v (stale %v), want %v fresh", n.ID, got, got.stale, all)
			}
			return nil
		})
	}
	return rs
}

// nodes is every server of both regions.
func (rs *regions) nodes() []*Node { return append(slices.Clone(rs.a.Nodes), rs.b.Nodes...) }

// answer is a DNS answer as the region tests read it.
type answer struct {
	// prio and weight are each SRV target's, by instance id; addrs the
	// A records' instances, sorted.
	prio, weight map[string]int
	addrs        []string
	stale        bool // EDE 3
}

func (a answer) ids() []string {
	var out []string
	for id := range a.prio {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func (a answer) String() string {
	if a.prio == nil {
		return fmt.Sprint(a.addrs)
	}
	var parts []string
	for _, id := range a.ids() {
		parts = append(parts, fmt.Sprintf("%s:%d/%d", id, a.prio[id], a.weight[id]))
	}
	return strings.Join(parts, " ")
}

// ask asks n about shop/web (qtype A or SRV) as a caller in region from.
func (rs *regions) ask(n *Node, from string, qtype uint16) (answer, error) {
	name := regionSvc + ".shop.svc." + dnsZone
	if qtype == dns.TypeSRV {
		name = "_http._tcp." + name
	}
	r, err := askFrom(n, regionCaller(from), "region "+from, name, qtype)
	if err != nil {
		return answer{}, err
	}
	var a answer
	if o := r.IsEdns0(); o != nil {
		for _, op := range o.Option {
			if e, ok := op.(*dns.EDNS0_EDE); ok && e.InfoCode == dns.ExtendedErrorCodeStaleAnswer {
				a.stale = true
			}
		}
	}
	for _, rr := range r.Answer {
		switch rr := rr.(type) {
		case *dns.SRV:
			if a.prio == nil {
				a.prio, a.weight = map[string]int{}, map[string]int{}
			}
			id, _, _ := strings.Cut(rr.Target, ".")
			a.prio[id], a.weight[id] = int(rr.Priority), int(rr.Weight)
		case *dns.A:
			a.addrs = append(a.addrs, rs.idOf(rr.A.String()))
		}
	}
	sort.Strings(a.addrs)
	return a, nil
}

func (rs *regions) srv(n *Node, from string) (answer, error) { return rs.ask(n, from, dns.TypeSRV) }

func (rs *regions) idOf(ip string) string {
	for id, a := range rs.addr {
		if a == ip {
			return id
		}
	}
	return "?" + ip
}

// peerView is n's view of the other region, as GET /v1/regions says.
func peerView(ctx context.Context, n *Node) (wire.PeerRegion, error) {
	out, err := n.Client().Regions(ctx)
	if err != nil {
		return wire.PeerRegion{}, fmt.Errorf("%s: %w", n.ID, err)
	}
	if len(out.Peers) != 1 {
		return wire.PeerRegion{}, fmt.Errorf("%s follows %d regions, want 1", n.ID, len(out.Peers))
	}
	return out.Peers[0], nil
}

// TestRegions runs issue 34's tests on one pair of regions, in turn:
// each phase leaves them as the next expects (the failover phase drains
// two of b's instances, the cut phase registers b-3, the last kills
// b). TestRegionFailoverSignal has a pair of its own.
func TestRegions(t *testing.T) {
	rs := startRegions(t)
	for _, phase := range []struct {
		name string
		run  func(*testing.T, *regions)
	}{
		{"AnswerEachOther", regionsAnswerEachOther},
		{"Failover", regionFailover},
		{"CutApart", regionsCutApart},
		{"Gone", regionGone},
	} {
		if !t.Run(phase.name, func(t *testing.T) { phase.run(t, rs) }) {
			return // the next phases start from what this one leaves
		}
	}
}

// regionsAnswerEachOther: each region answers its own instances and the
// other's, tiers by the caller's region: a caller in a gets a's at tier
// 0 and b's at tier 2, whichever region's server it asks, and its A
// records from its own region alone.
func regionsAnswerEachOther(t *testing.T, rs *regions) {
	for _, n := range rs.nodes() {
		for _, from := range []string{"a", "b"} {
			other := map[string]string{"a": "b", "b": "a"}[from]
			got, err := rs.srv(n, from)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range rs.ids[from] {
				if got.prio[id] != 0 {
					t.Errorf("%s to a caller in %s: %s at priority %d, want 0 (%v)", n.ID, from, id, got.prio[id], got)
				}
			}
			for _, id := range rs.ids[other] {
				if got.prio[id] != 2 {
					t.Errorf("%s to a caller in %s: %s at priority %d, want 2, another region (%v)", n.ID, from, id, got.prio[id], got)
				}
			}
			a, err := rs.ask(n, from, dns.TypeA)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(a.addrs, rs.ids[from]) {
				t.Errorf("%s: A to a caller in %s: %v, want %v", n.ID, from, a.addrs, rs.ids[from])
			}
		}
	}
	// An instance seen through the other region keeps its identity:
	// the incarnation its own region gave it, its region and zone; the
	// view it came in is the other region's, at its revision.
	ctx := ctxT(t, time.Minute)
	for _, n := range rs.nodes() {
		eps, err := n.Client().Endpoints(ctx, healthNS, regionSvc)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range eps {
			if e.Incarnation != rs.inc[e.InstanceID] || e.Region != e.InstanceID[:1] || e.Zone != e.Region+"-1" {
				t.Errorf("%s shows %s#%d in %s/%s, want #%d in its own region", n.ID, e.InstanceID, e.Incarnation, e.Region, e.Zone, rs.inc[e.InstanceID])
			}
			if e.Region != n.c.cfg.Name && (len(e.Reasons) == 0 || !strings.Contains(e.Reasons[0], "region "+e.Region+"'s")) {
				t.Errorf("%s shows %s without saying whose it is: %v", n.ID, e.InstanceID, e.Reasons)
			}
		}
		p, err := peerView(ctx, n)
		if err != nil || !p.Connected || p.Stale || p.Instances != 3 || p.Revision == 0 {
			t.Errorf("%s's view of the other region: %+v (%v), want connected, fresh, 3 instances at a revision", n.ID, p, err)
		}
	}
}

// revisions checks that no node's view of the other region went back
// since last, and records where each is.
type revisions map[string]uint64

func (rv revisions) check(ctx context.Context, rs *regions) error {
	for _, n := range rs.nodes() {
		p, err := peerView(ctx, n)
		if err != nil {
			return err
		}
		if p.Revision < rv[n.ID] {
			return fmt.Errorf("%s's view of region %s went back: revision %d after %d", n.ID, p.Region, p.Revision, rv[n.ID])
		}
		rv[n.ID] = p.Revision
	}
	return nil
}

// regionsCutApart: the link between the regions cut (iptables in both
// hosts), each region keeps answering its own instances fresh and the
// other's as they were, stale (EDE 3), nothing dropped, and an instance
// the other region registers meanwhile unseen; healed, every server's
// view of the other is fresh again with it, and no view went back.
func regionsCutApart(t *testing.T, rs *regions) {
	ctx := ctxT(t, 3*time.Minute)
	rv := revisions{}
	if err := rv.check(ctx, rs); err != nil {
		t.Fatal(err)
	}
	before, err := rs.srv(rs.a.Nodes[0], "a")
	if err != nil {
		t.Fatal(err)
	}
	base := before.ids()
	withB3 := append(slices.Clone(base), "b-3")
	slices.Sort(withB3)
	t.Log("cutting sd1 (region a) and sd2 (region b) apart")
	rs.lab.Isolate(1, 2)
	rs.lab.Isolate(2, 1)
	cut := time.Now()
	// b registers b-3 while cut off: a does not hear of it.
	reg := registerLoopback(ctx, t, rs.b, regionSvc, "b-3", 8080, func(r *wire.Registration) {
		r.Addresses, r.Region, r.Zone = []string{"10.2.0.4"}, "b", "b-1"
	})
	rs.ids["b"], rs.addr["b-3"], rs.inc["b-3"] = append(rs.ids["b"], "b-3"), "10.2.0.4", reg.Incarnation
	// Each region: its own fresh, the other's stale, nothing dropped.
	// The cut is found by the peers' keepalive pings (10 s, 5 s to
	// answer), and stale-after later the other's instances are stale.
	Eventually(t, 45*time.Second, func() error {
		for _, n := range rs.nodes() {
			own := n.c.cfg.Name
			got, err := rs.srv(n, own)
			if err != nil {
				return err
			}
			want := base
			if own == "b" {
				want = withB3
			}
			if ids := got.ids(); !slices.Equal(ids, want) && !(own == "b" && slices.Equal(ids, base)) {
				t.Fatalf("%s, cut off, answers %v, want %v: nothing of the other region dropped", n.ID, got, want)
			}
			if !got.stale || !slices.Equal(got.ids(), want) {
				return fmt.Errorf("%s: SRV %v (stale %v), want %v, stale", n.ID, got, got.stale, want)
			}
			a, err := rs.ask(n, own, dns.TypeA)
			if err != nil {
				return err
			}
			if a.stale || len(a.addrs) == 0 || a.addrs[0][:1] != own {
				t.Fatalf("%s: A to its own region's caller %v (stale %v), want its own region's, fresh", n.ID, a.addrs, a.stale)
			}
		}
		return rv.check(ctx, rs)
	})
	t.Logf("every server answered the other region stale %s after the cut", time.Since(cut).Round(time.Millisecond))
	for _, n := range rs.nodes() {
		if p, err := peerView(ctx, n); err != nil || !p.Stale || p.Connected {
			t.Fatalf("%s's view of the other region while cut: %+v (%v), want stale, not connected", n.ID, p, err)
		}
	}
	t.Log("healing the link")
	rs.lab.Heal(1)
	rs.lab.Heal(2)
	Eventually(t, 30*time.Second, func() error {
		for _, n := range rs.nodes() {
			got, err := rs.srv(n, n.c.cfg.Name)
			if err != nil {
				return err
			}
			if ids := got.ids(); !slices.Equal(ids, withB3) || got.stale {
				return fmt.Errorf("%s answers %v (stale %v), want %v fresh", n.ID, got, got.stale, withB3)
			}
		}
		return rv.check(ctx, rs)
	})
	if err := rv.check(ctx, rs); err != nil {
		t.Fatal(err)
	}
}

// drainIn drains instance id of shop/web in region c, past its
// disruption budget (a test's set-up, not what it tests).
func drainIn(ctx context.Context, t *testing.T, c *Cluster, id string) {
	t.Helper()
	onAnyNode(t, c, "drain "+id, func(n *Node) error {
		eps, err := n.Client().Endpoints(ctx, healthNS, regionSvc)
		if err != nil {
			return err
		}
		i := slices.IndexFunc(eps, func(e wire.Endpoint) bool { return e.InstanceID == id })
		if i < 0 {
			return fmt.Errorf("%s has no %s", n.ID, id)
		}
		_, err = n.Client().ForceDrain(ctx, wire.InstanceKey{Namespace: healthNS, Service: regionSvc, ID: id}, eps[i].Incarnation)
		return err
	})
}

// regionFailoverBound is issue 34's: callers in the region failing over get
// the other region first within 1 s.
const regionFailoverBound = time.Second

// regionFailover: `cairn region failover --from a --to b` of shop/web,
// asked of a's server: within 1 s every a server gives a caller in a
// b's instances first (A records b's alone, SRV b's at 2 and a's last);
// undone, a's own come back over the 10 s shift_back, sharing a's
// callers with b while they return; asked of b's, it is refused (a
// region fails over its own callers); with b short of eligible
// instances, refused and audited.
func regionFailover(t *testing.T, rs *regions) {
	ctx := ctxT(t, 3*time.Minute)
	firstB := func(n *Node) error {
		a, err := rs.ask(n, "a", dns.TypeA)
		if err != nil {
			return err
		}
		if !slices.Equal(a.addrs, rs.ids["b"]) {
			return fmt.Errorf("%s: A to a caller in a: %v, want b's %v", n.ID, a.addrs, rs.ids["b"])
		}
		s, err := rs.srv(n, "a")
		if err != nil {
			return err
		}
		for _, id := range rs.ids["b"] {
			if s.prio[id] != 2 {
				return fmt.Errorf("%s: SRV %v, want b's at 2", n.ID, s)
			}
		}
		for _, id := range rs.ids["a"] {
			if s.prio[id] != 3 {
				return fmt.Errorf("%s: SRV %v, want a's last (3)", n.ID, s)
			}
		}
		return nil
	}
	printed := runCLI(ctx, t, rs.a.Nodes[1], "region", "failover", "--from", "a", "--to", "b", "--service", "shop/"+regionSvc, "--reason", "a is on fire")
	returned := time.Now()
	if !strings.Contains(string(printed), "region a (failover to b) of shop/web: in force until") || !strings.Contains(string(printed), "capacity: region b can carry") {
		t.Errorf("cairn region failover printed %q", printed)
	}
	if err := Poll(regionFailoverBound, 10*time.Millisecond, func() error {
		for _, n := range rs.a.Nodes {
			if err := firstB(n); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%s after `cairn region failover` returned: %v (load %s)", regionFailoverBound, err, loadavg())
	}
	t.Logf("every a server gave a's callers b first %s after the failover returned", time.Since(returned).Round(time.Millisecond))
	// Undone: a's own return, sharing a's callers with b at first.
	runCLI(ctx, t, rs.a.Nodes[0], "region", "failover", "--from", "a", "--to", "b", "--service", "shop/"+regionSvc, "--undo")
	sawShare := false
	Eventually(t, 30*time.Second, func() error {
		s, err := rs.srv(rs.a.Nodes[2], "a")
		if err != nil {
			return err
		}
		if s.prio["a-0"] == s.prio["b-0"] && s.weight["a-0"] < s.weight["b-0"] {
			sawShare = true // returning: one priority, a's share below b's
		}
		for _, id := range rs.ids["a"] {
			if s.prio[id] != 0 {
				return fmt.Errorf("SRV to a caller in a %v, want a's back at 0", s)
			}
		}
		for _, id := range rs.ids["b"] {
			if s.prio[id] != 2 {
				return fmt.Errorf("SRV to a caller in a %v, want b's back at 2", s)
			}
		}
		return nil
	})
	if !sawShare {
		t.Error("a's instances came back without a return: never one priority with b at a lower share")
	}
	// Only a region fails over its own callers.
	if out, err := runCLIResult(ctx, t, rs.b.Nodes[0], "region", "failover", "--from", "a", "--to", "b"); err == nil ||
		!strings.Contains(out, `this server is in region "b"`) {
		t.Fatalf("failover of a asked of b's server: %s (%v), want refused", out, err)
	}
	// b short: two of its three drained, a's three ready need two.
	drainIn(ctx, t, rs.b, "b-0")
	drainIn(ctx, t, rs.b, "b-1")
	Eventually(t, 30*time.Second, func() error {
		for _, n := range rs.a.Nodes {
			s, err := rs.srv(n, "a")
			if err != nil {
				return err
			}
			for _, id := range []string{"b-0", "b-1"} {
				if _, ok := s.prio[id]; ok {
					return fmt.Errorf("%s still serves %s: %v", n.ID, id, s)
				}
			}
		}
		return nil
	})
	out, err := runCLIResult(ctx, t, rs.a.Nodes[0], "region", "failover", "--from", "a", "--to", "b", "--service", "shop/"+regionSvc)
	if err == nil || !strings.Contains(out, "region b has 1 eligible instance(s) and needs 2") || !strings.Contains(out, "insufficient_capacity") {
		t.Fatalf("failover to a b of one: %s (%v), want refused for capacity", out, err)
	}
	evs, err := rs.a.Nodes[0].Client().Events(ctx, healthNS, regionSvc, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs, func(e wire.Event) bool {
		return e.Kind == wire.EventRefused && strings.Contains(e.Reason, "region b has 1")
	}) {
		t.Error("the refused failover is not in a's audit trail")
	}
	for _, n := range rs.a.Nodes {
		if s, err := rs.srv(n, "a"); err != nil || s.prio["a-0"] != 0 {
			t.Errorf("%s after the refused failover: %v (%v), want a's own first", n.ID, s, err)
		}
	}
}

// regionGone: every server of b killed, a keeps answering b's instances
// as b last said, stale, never dropped, and so does an a server
// restarted while b is gone (its view of b kept on disk).
func regionGone(t *testing.T, rs *regions) {
	ctx := ctxT(t, 3*time.Minute)
	before, err := rs.srv(rs.a.Nodes[0], "a")
	if err != nil {
		t.Fatal(err)
	}
	all := before.ids()
	inB := 0
	for _, id := range all {
		if id[:1] == "b" {
			inB++
		}
	}
	for _, n := range rs.b.Nodes {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	// check asks n; strict, an answer without one of b's instances
	// fails the test at once (nothing may be dropped), else it is asked
	// again: a server just restarted serves the table it kept on disk
	// (written every 5 s) until its replica catches up, and that table
	// may predate b's last change.
	check := func(n *Node, strict bool) error {
		got, err := rs.srv(n, "a")
		if err != nil {
			return err
		}
		if ids := got.ids(); !slices.Equal(ids, all) && strict {
			t.Fatalf("%s, b gone, answers %v, want %v: nothing of b dropped", n.ID, got, all)
		} else if !slices.Equal(ids, all) {
			return fmt.Errorf("%s, b gone, answers %v, want %v", n.ID, got, all)
		}
		if !got.stale {
			return fmt.Errorf("%s: SRV %v not stale yet", n.ID, got)
		}
		b, err := rs.ask(n, "b", dns.TypeA)
		if err != nil {
			return err
		}
		if len(b.addrs) != inB || !b.stale {
			return fmt.Errorf("%s: A to a caller in b: %v (stale %v), want b's %d, stale", n.ID, b.addrs, b.stale, inB)
		}
		return nil
	}
	Eventually(t, 30*time.Second, func() error {
		for _, n := range rs.a.Nodes {
			if err := check(n, true); err != nil {
				return err
			}
		}
		return nil
	})
	n := rs.a.Nodes[2]
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error { return check(n, false) })
	if p, err := peerView(ctx, n); err != nil || p.Instances < inB || !p.Stale {
		t.Fatalf("%s restarted with b gone: view of b %+v (%v), want b's %d instances at least, stale", n.ID, p, err, inB)
	}
}

// TestRegionFailoverSignal: with region a's control plane impaired (two
// of its three servers killed: no quorum), the out-of-band signal file
// fails a's callers over to b on the server left, and on that server
// restarted while a still has no quorum (serving the table it kept);
// the signal removed, a's own come back, returning (over the default
// shift_back: the kept table holds no policy), their callers sharing b
// meanwhile.
func TestRegionFailoverSignal(t *testing.T) {
	rs := startRegions(t)
	// a1 has kept a table of all six on disk, to serve at its restart.
	Eventually(t, 20*time.Second, func() error {
		s, err := tablefile.Load(filepath.Join(rs.a.Nodes[0].DataDir, cmd.TableFile))
		if err != nil || s == nil || len(s.Entries) < 6 {
			return fmt.Errorf("a1's kept table: %v (%v), want all six instances", s, err)
		}
		return nil
	})
	for _, n := range rs.a.Nodes[1:] {
		if err := n.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	left := rs.a.Nodes[0]
	firstB := func() error {
		a, err := rs.ask(left, "a", dns.TypeA)
		if err != nil {
			return err
		}
		if !slices.Equal(a.addrs, rs.ids["b"]) {
			return fmt.Errorf("%s: A to a caller in a: %v, want b's %v", left.ID, a.addrs, rs.ids["b"])
		}
		return nil
	}
	if err := os.WriteFile(rs.signal, []byte("failovers:\n  - {from: a, to: b, reason: a has lost its quorum}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	Eventually(t, 10*time.Second, firstB)
	t.Logf("the signal gave a's callers b first %s after it was written", time.Since(written).Round(time.Millisecond))
	if err := left.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := left.Restart(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 10*time.Second, firstB)
	if err := os.Remove(rs.signal); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		a, err := rs.ask(left, "a", dns.TypeA)
		if err != nil {
			return err
		}
		for _, id := range rs.ids["a"] {
			if !slices.Contains(a.addrs, id) {
				return fmt.Errorf("%s: A to a caller in a: %v, want a's own returning, %v among them", left.ID, a.addrs, rs.ids["a"])
			}
		}
		return nil
	})
}
