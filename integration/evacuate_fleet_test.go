package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/miekg/dns"
	"google.golang.org/grpc"

	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// The evacuation tests (issue 30) run a service with instances in zones
// a, b and c of one region, each instance a TCP listener of the test on
// an address of its own (127.0.31.x in zone a, .32.x in b, .33.x in c)
// that the servers probe. DNS callers are placed in each zone by the
// servers' --subnet: a caller in zone z asks from its own loopback
// address, callerAddr(z). xDS subscribers are delta clients, as Envoy is
// one, whose node names a locality in one of the zones.

const evacRegion = "r1"

var evacZones = []string{"a", "b", "c"}

// callerAddr is the address a DNS caller in zone z asks from.
func callerAddr(z string) string { return fmt.Sprintf("127.0.30.%d", slices.Index(evacZones, z)+1) }

// evacArgs are the servers' flags: loopback instances allowed, and each
// zone's caller address placed in that zone.
func evacArgs() []string {
	args := slices.Clone(healthArgs)
	for _, z := range evacZones {
		args = append(args, "--subnet", callerAddr(z)+"/32="+evacRegion+"/"+z)
	}
	return args
}

// evacDefinition is service svc: probed every second, withdrawn after
// two failures and readmitted after three passes with no minimum time,
// no slow start (every weight is whole, wire.DefaultWeight), and the
// extra policy fields given (", shift_back: 10s").
func evacDefinition(svc, policy string) string {
	return healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}",
		"{lease_ttl: 10m, drain_window: 1h, slow_start: 0s, admit_min: 0s, withdraw_after: 2, admit_after: 3"+policy+"}")
}

// evacFleet is the service's instances: ids a-0, a-1, …, b-0, …, each
// with a backend of its own.
type evacFleet struct {
	c       *Cluster
	svc     string
	ids     []string
	zone    map[string]string // by instance id
	addr    map[string]string // by instance id
	backend map[string]*backend

	mu   sync.Mutex
	down map[string]bool // instances whose listener the test closed
}

// startEvacFleet applies svc's definition, starts count[i] instances in
// evacZones[i] and waits until every node has them all healthy.
func startEvacFleet(ctx context.Context, t *testing.T, c *Cluster, svc, policy string, count ...int) *evacFleet {
	t.Helper()
	applyDefinition(ctx, t, c, evacDefinition(svc, policy))
	f := &evacFleet{c: c, svc: svc, zone: map[string]string{}, addr: map[string]string{},
		backend: map[string]*backend{}, down: map[string]bool{}}
	for zi, z := range evacZones {
		for i := range count[zi] {
			id, ip := fmt.Sprintf("%s-%d", z, i), fmt.Sprintf("127.0.%d.%d", 31+zi, i+1)
			ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
			if err != nil {
				t.Fatalf("listening on %s: %v", ip, err)
			}
			b := &backend{addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port}
			b.serve(ln)
			t.Cleanup(b.Close)
			registerLoopback(ctx, t, c, svc, id, b.port, func(r *wire.Registration) {
				r.Addresses, r.Region, r.Zone = []string{ip}, evacRegion, z
			})
			f.ids = append(f.ids, id)
			f.zone[id], f.addr[id], f.backend[id] = z, ip, b
		}
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, f.ids...)
	return f
}

// setDown closes (down) or reopens an instance's listener.
func (f *evacFleet) setDown(t *testing.T, id string, down bool) {
	t.Helper()
	if down {
		f.backend[id].Close()
	} else {
		f.backend[id].Open(t)
	}
	f.mu.Lock()
	f.down[id] = down
	f.mu.Unlock()
}

// up returns the instances in rotation as the test made them.
func (f *evacFleet) up() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(f.ids), func(id string) bool { return f.down[id] })
}

// idOfAddr returns the instance at address ip.
func (f *evacFleet) idOfAddr(ip string) string {
	for id, a := range f.addr {
		if a == ip {
			return id
		}
	}
	return "?" + ip
}

// ask asks n for the service's A set (qtype A) or its SRV records (SRV)
// as a caller in zone from.
func (f *evacFleet) ask(n *Node, from string, qtype uint16) (*dns.Msg, error) {
	name := f.svc + "." + healthNS + ".svc." + dnsZone
	if qtype == dns.TypeSRV {
		name = "_http._tcp." + name
	}
	return askFrom(n, callerAddr(from), "zone "+from, name, qtype)
}

// askFrom asks n's DNS server name (qtype) over UDP with EDNS from the
// local address addr, where a caller is placed (by --subnet); who names
// the caller in errors. An answer other than NOERROR is an error.
func askFrom(n *Node, addr, who, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.SetEdns0(1232, false)
	cl := &dns.Client{Net: "udp", Timeout: 2 * time.Second,
		Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: net.ParseIP(addr)}}}
	r, _, err := cl.Exchange(q, n.DNSAddr)
	if err != nil {
		return nil, fmt.Errorf("%s: %s %s from %s: %w", n.ID, name, dns.TypeToString[qtype], who, err)
	}
	if r.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s: %s %s from %s: %s", n.ID, name, dns.TypeToString[qtype], who, dns.RcodeToString[r.Rcode])
	}
	return r, nil
}

// srvRec is one instance's SRV record.
type srvRec struct{ prio, weight int }

// srv returns the SRV records n gives a caller in zone from, by
// instance id.
func (f *evacFleet) srv(n *Node, from string) (map[string]srvRec, error) {
	r, err := f.ask(n, from, dns.TypeSRV)
	if err != nil {
		return nil, err
	}
	out := map[string]srvRec{}
	for _, rr := range r.Answer {
		if s, ok := rr.(*dns.SRV); ok {
			id, _, _ := strings.Cut(s.Target, ".")
			out[id] = srvRec{prio: int(s.Priority), weight: int(s.Weight)}
		}
	}
	return out, nil
}

// a returns the instances of the A answer n gives a caller in zone
// from, sorted, and the answer's EDE texts.
func (f *evacFleet) a(n *Node, from string) (ids, ede []string, err error) {
	r, err := f.ask(n, from, dns.TypeA)
	if err != nil {
		return nil, nil, err
	}
	for _, a := range addrSet(r.Answer) {
		ids = append(ids, f.idOfAddr(a))
	}
	slices.Sort(ids)
	if o := r.IsEdns0(); o != nil {
		for _, opt := range o.Option {
			if e, ok := opt.(*dns.EDNS0_EDE); ok {
				ede = append(ede, e.ExtraText)
			}
		}
	}
	return ids, ede, nil
}

// tierIn is the tier of zone z's instances for a caller in zone from
// (SPEC §3), zone a evacuated or not: an evacuated zone is last for
// every caller, status.TierEvacuated.
func tierIn(from, z string, aEvacuated bool) int {
	switch {
	case aEvacuated && z == "a":
		return 3
	case z == from:
		return 0
	}
	return 1
}

// checkDNS checks n's answers to a caller in zone from while every
// instance the test has not closed is healthy: SRV lists every one at
// its tier's priority with its whole weight, and the A set is the
// instances of the best tier (every zone fully healthy: nothing spills).
func (f *evacFleet) checkDNS(n *Node, from string, aEvacuated bool) error {
	recs, err := f.srv(n, from)
	if err != nil {
		return err
	}
	up := f.up()
	best := 3
	for _, id := range up {
		best = min(best, tierIn(from, f.zone[id], aEvacuated))
		want := srvRec{prio: tierIn(from, f.zone[id], aEvacuated), weight: wire.DefaultWeight}
		if got, ok := recs[id]; !ok || got != want {
			return fmt.Errorf("%s: SRV to a caller in zone %s (zone a evacuated: %v): %s is %+v (listed: %v); want %+v; all: %v",
				n.ID, from, aEvacuated, id, got, ok, want, recs)
		}
	}
	if len(recs) != len(up) {
		return fmt.Errorf("%s: SRV to a caller in zone %s lists %v; want %v", n.ID, from, recs, up)
	}
	ids, _, err := f.a(n, from)
	if err != nil {
		return err
	}
	want := slices.DeleteFunc(slices.Clone(up), func(id string) bool { return tierIn(from, f.zone[id], aEvacuated) != best })
	if !slices.Equal(ids, want) {
		return fmt.Errorf("%s: A to a caller in zone %s (zone a evacuated: %v) holds %v; want %v", n.ID, from, aEvacuated, ids, want)
	}
	return nil
}

// zoneSub is a delta xDS subscriber of the service's assignment whose
// node is in one zone. It acknowledges every response, and whenever its
// stream ends opens another, until the test ends. It keeps every
// assignment it is sent.
type zoneSub struct {
	zone string
	node string

	mu   sync.Mutex
	sent []heldCLA
}

// heldCLA is an assignment and when it came.
type heldCLA struct {
	at  time.Time
	cla *endpointv3.ClusterLoadAssignment
}

// cluster is the name of the service's assignment.
func (f *evacFleet) cluster() string { return f.svc + "." + healthNS + ":http" }

// subscribe starts a subscriber in zone z of node n's xDS server.
func (f *evacFleet) subscribe(ctx context.Context, t *testing.T, n *Node, z string) *zoneSub {
	cc, err := xdstest.Dial(n.GRPCAddr)
	if err != nil {
		t.Fatal(err)
	}
	s := &zoneSub{zone: z, node: n.ID}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		retry := time.NewTicker(100 * time.Millisecond)
		defer retry.Stop()
		for ctx.Err() == nil {
			s.session(ctx, t, cc, f.cluster())
			select {
			case <-ctx.Done():
			case <-retry.C:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		cc.Close()
	})
	return s
}

func (s *zoneSub) session(ctx context.Context, t *testing.T, cc grpc.ClientConnInterface, name string) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	node := &corev3.Node{Id: "evac-" + s.zone, Locality: &corev3.Locality{Region: evacRegion, Zone: s.zone}}
	st, err := xdstest.Open(ctx, cc, xdstest.Options{Node: node})
	if err != nil || st.Subscribe(resourcev3.EndpointType, []string{name}, nil) != nil {
		return
	}
	for {
		resp, err := st.Recv()
		if err != nil {
			return
		}
		for _, r := range resp.Resources {
			cla, err := xdstest.DecodeAssignment(r)
			if err != nil {
				t.Errorf("subscriber in zone %s of %s: %s: %v", s.zone, s.node, r.Name, err)
				return
			}
			if r.Name == name {
				s.mu.Lock()
				s.sent = append(s.sent, heldCLA{at: time.Now(), cla: cla})
				s.mu.Unlock()
			}
		}
		if st.Ack(resp) != nil {
			return
		}
	}
}

// held returns the last assignment the subscriber was sent, nil before
// the first.
func (s *zoneSub) held() *endpointv3.ClusterLoadAssignment {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.sent) == 0 {
		return nil
	}
	return s.sent[len(s.sent)-1].cla
}

// since returns the assignments sent since t.
func (s *zoneSub) since(t time.Time) []heldCLA {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.sent, func(h heldCLA) bool { return !h.at.Before(t) })
	if i < 0 {
		return nil
	}
	return slices.Clone(s.sent[i:])
}

// xdsEndpoint is one endpoint of an assignment as a client takes it.
type xdsEndpoint struct {
	priority  int
	health    corev3.HealthStatus
	weight    int
	evacuated bool // metadata cairn.evacuated
}

// endpoints returns the assignment's endpoints by instance id.
func (f *evacFleet) endpoints(cla *endpointv3.ClusterLoadAssignment) map[string]xdsEndpoint {
	out := map[string]xdsEndpoint{}
	for _, l := range cla.GetEndpoints() {
		for _, lb := range l.GetLbEndpoints() {
			ip := lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			md := lb.GetMetadata().GetFilterMetadata()["cairn"].GetFields()["evacuated"]
			out[f.idOfAddr(ip)] = xdsEndpoint{priority: int(l.GetPriority()), health: lb.GetHealthStatus(),
				weight: int(lb.GetLoadBalancingWeight().GetValue()), evacuated: md.GetBoolValue()}
		}
	}
	return out
}

// checkXDS checks the assignment a subscriber holds while every instance
// the test has not closed is healthy: every one HEALTHY at its whole
// weight, the caller's best tier at priority 0 and each other tier a
// priority of its own after it in tier order, so an evacuated zone a is
// the last priority, flagged cairn.evacuated.
func (f *evacFleet) checkXDS(s *zoneSub, aEvacuated bool) error {
	cla := s.held()
	if cla == nil {
		return fmt.Errorf("the subscriber in zone %s of %s holds no assignment yet", s.zone, s.node)
	}
	got := f.endpoints(cla)
	up := f.up()
	var tiers []int
	for _, id := range up {
		tiers = append(tiers, tierIn(s.zone, f.zone[id], aEvacuated))
	}
	slices.Sort(tiers)
	tiers = slices.Compact(tiers)
	for _, id := range up {
		tr := tierIn(s.zone, f.zone[id], aEvacuated)
		want := xdsEndpoint{priority: slices.Index(tiers, tr), health: corev3.HealthStatus_HEALTHY,
			weight: wire.DefaultWeight, evacuated: tr == 3}
		if e, ok := got[id]; !ok || e != want {
			return fmt.Errorf("the subscriber in zone %s of %s (zone a evacuated: %v) holds %s as %+v (listed: %v); want %+v; all: %+v",
				s.zone, s.node, aEvacuated, id, e, ok, want, got)
		}
	}
	if len(got) != len(up) {
		return fmt.Errorf("the subscriber in zone %s of %s holds %+v; want %v", s.zone, s.node, got, up)
	}
	return nil
}

// cliJSON runs a cairn command with -o json against n and decodes its
// output into v.
func cliJSON(ctx context.Context, t *testing.T, n *Node, v any, args ...string) {
	t.Helper()
	out := runCLI(ctx, t, n, append([]string{"-o", "json"}, args...)...)
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("cairn -o json %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// evacuationsOn returns the evacuations node n lists.
func evacuationsOn(ctx context.Context, n *Node) ([]wire.EvacuationView, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	es, err := n.Client().Evacuations(ctx)
	if err != nil {
		return nil, fmt.Errorf("%s: evacuations: %w", n.ID, err)
	}
	return es, nil
}
