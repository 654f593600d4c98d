package callers_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/callers"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(code int) {
		integration.RemoveBinary()
		os.Exit(code)
	}))
}

// needProcesses skips a real-process test under -short, except under
// CI=true, where nothing may skip.
func needProcesses(t *testing.T) {
	t.Helper()
	if !testing.Short() {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("-short would skip this real-process test, and nothing may skip under CI=true")
	}
	t.Skip("starts real cairn processes; skipped under -short")
}

// envoyBinary returns the Envoy binary, or "" when there is none (an
// error under CI=true, where nothing may be left out).
func envoyBinary(t *testing.T) string {
	bin, err := integration.EnvoyBinary()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v; under CI=true a missing Envoy fails the test", err)
		}
		t.Logf("no Envoy callers: %v", err)
		return ""
	}
	return bin
}

const (
	admin = "callers-admin-0123456789abcdefgh"
	// The gRPC service the resolving callers call.
	ns, svc = "shop", "rpc"
	// The HTTP service the shipped Envoy bootstrap routes to.
	webNS, webSvc, webCluster = "demo", "web", "web.demo:http"
	callRate                  = 20
)

// population is a set of callers of one kind.
type population struct {
	kind callers.Kind
	n    int
}

var populations = []population{{callers.DNSDirect, 3}, {callers.DNSAgent, 2}, {callers.GRPCXDS, 2}, {callers.Envoy, 2}}

// fixture is a 1-node cluster with ACLs serving shop/rpc (three
// stand-in gRPC instances, one per zone address) and demo/web (three
// stand-in HTTP instances, the service the shipped Envoy bootstrap
// routes to), an agent of shop/rpc, an Envoy when there is one, and
// callers: every population's, each that reports with a token of its
// own.
type fixture struct {
	ctx        context.Context
	n          *integration.Node
	rpcs, webs []*standin
	envoy      *integration.Envoy
	cs         []*callers.Caller
	reps       []*callers.Reporter
	start      time.Time
	stop       func()
}

func newFixture(t *testing.T, ctx context.Context, pops []population, withEnvoy bool) *fixture {
	t.Helper()
	f := &fixture{ctx: ctx}
	envoyBin := ""
	if withEnvoy {
		envoyBin = envoyBinary(t)
	}
	var tokens []string
	acls := fmt.Sprintf("tokens:\n- {secret: %s, scope: admin}\n", admin)
	for i := range 10 {
		tokens = append(tokens, fmt.Sprintf("callers-reader-%02d-0123456789abcdef", i))
		acls += fmt.Sprintf("- {secret: %s, scope: reader, namespaces: [%s, %s]}\n", tokens[i], ns, webNS)
	}
	aclFile := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(aclFile, []byte(acls), 0o600); err != nil {
		t.Fatal(err)
	}
	c := integration.StartClusterAs(t, admin, 1, "--allow-loopback-endpoints", "--acl-file", aclFile,
		"--probe-token", admin, "--load-report-interval", "1s")
	n := c.Nodes[0]
	f.n = n
	for _, def := range []string{
		fmt.Sprintf("namespace: %s\nname: %s\nports: [{name: grpc, number: 9000, protocol: tcp}]\n"+
			"check: {type: tcp, port: grpc, interval: 1s, timeout: 500ms}\n"+
			"policy: {lease_ttl: 10m, slow_start: 0s, dns_ttl: 1s}\n", ns, svc),
		fmt.Sprintf("namespace: %s\nname: %s\nports: [{name: http, number: 8080, protocol: tcp}]\n"+
			"check: {type: http, port: http, path: /ready, interval: 1s, timeout: 500ms}\n"+
			"policy: {lease_ttl: 10m, slow_start: 0s, max_unavailable: 100%%}\n", webNS, webSvc),
	} {
		if _, err := n.Client().Apply(ctx, []byte(def)); err != nil {
			t.Fatal(err)
		}
	}
	var rpcPort, webPort int
	f.rpcs, rpcPort = startStandins(t, callers.GRPC, "i", "127.11.0.1", "127.12.0.1", "127.13.0.1")
	f.webs, webPort = startStandins(t, callers.HTTP, "w", "127.11.0.2", "127.12.0.2", "127.13.0.2")
	register := func(ns, svc, port string, p int, ss []*standin, region func(i int) (string, string)) {
		for i, s := range ss {
			host, _, _ := net.SplitHostPort(s.addr)
			reg := wire.Registration{ID: s.id, Addresses: []string{host}, Ports: map[string]int{port: p}}
			reg.Region, reg.Zone = region(i)
			if _, err := n.Client().Register(ctx, ns, svc, reg); err != nil {
				t.Fatal(err)
			}
		}
	}
	register(ns, svc, "grpc", rpcPort, f.rpcs, func(i int) (string, string) { return "r1", string(rune('a' + i)) })
	// In the Envoy's own region and zone: one priority, all in rotation.
	register(webNS, webSvc, "http", webPort, f.webs, func(int) (string, string) { return "local", "zone-1" })
	for _, k := range [][2]string{{ns, svc}, {webNS, webSvc}} {
		integration.Eventually(t, 10*time.Second, func() error {
			es, err := n.Client().Endpoints(ctx, k[0], k[1])
			if err != nil {
				return err
			}
			for _, e := range es {
				if !e.Eligible {
					return fmt.Errorf("%s/%s not eligible yet", k[1], e.InstanceID)
				}
			}
			return nil
		})
	}

	var agent *integration.Agent
	for _, p := range pops {
		if p.kind == callers.DNSAgent && agent == nil {
			agent = integration.StartAgentWith(t, integration.AgentConfig{Servers: []string{n.GRPCAddr}, Token: admin,
				Args: []string{"--service", ns + "/" + svc}})
		}
	}
	if envoyBin != "" {
		f.envoy = integration.StartEnvoy(t, integration.EnvoyConfig{Dir: filepath.Join(t.TempDir(), "envoy"), Bin: envoyBin,
			Servers: []string{n.GRPCAddr}, Node: "callers-envoy", Zone: "zone-1", Token: tokens[9]})
	}

	tok := 0
	for _, p := range pops {
		for i := range p.n {
			cfg := callers.Config{Name: fmt.Sprintf("%s-%d", p.kind, i), Rate: callRate, Timeout: 300 * time.Millisecond}
			dns := callers.DNSConfig{Config: cfg, Server: n.DNSAddr, Query: svc + "." + ns + ".svc.cairn.internal.",
				Port: rpcPort, Protocol: callers.GRPC, Source: net.ParseIP(fmt.Sprintf("127.1%d.0.%d", 1+i%3, 100+len(f.cs)))}
			var cl *callers.Caller
			var err error
			switch p.kind {
			case callers.DNSDirect:
				cl, err = callers.NewDNS(p.kind, dns)
			case callers.DNSAgent:
				dns.Server = agent.DNSAddr
				cl, err = callers.NewDNS(p.kind, dns)
			case callers.GRPCXDS:
				var boot []byte
				boot, err = xdsserver.Bootstrap(xdsserver.BootstrapConfig{Server: n.GRPCAddr, NodeID: cfg.Name})
				if err == nil {
					cl, err = callers.NewGRPC(callers.GRPCConfig{Config: cfg, Bootstrap: boot, Target: svc + "." + ns, Token: tokens[tok]})
				}
			case callers.Envoy:
				if f.envoy == nil {
					continue
				}
				cl, err = callers.NewEnvoy(callers.EnvoyConfig{Config: cfg, URL: "http://" + f.envoy.Listener + "/",
					Hosts: func(ctx context.Context) ([]string, error) { return routed(ctx, f.envoy) }})
			}
			if err != nil {
				t.Fatal(err)
			}
			f.cs = append(f.cs, cl)
			if p.kind == callers.Envoy {
				continue // Envoy reports over LRS by itself
			}
			api, err := client.New(n.URL(), tokens[tok])
			if err != nil {
				t.Fatal(err)
			}
			tok++
			t.Cleanup(func() { api.Close() })
			rep, err := callers.NewReporter(callers.ReporterConfig{Caller: cl, API: api, Namespace: ns, Service: svc, Interval: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			f.reps = append(f.reps, rep)
		}
	}
	f.start = time.Now()
	rctx, stopAll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range f.cs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(rctx) }()
	}
	for _, r := range f.reps {
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(rctx) }()
	}
	f.stop = sync.OnceFunc(func() { stopAll(); wg.Wait() })
	t.Cleanup(f.stop)
	return f
}

func (f *fixture) snap() []callers.Record {
	var out []callers.Record
	for _, cl := range f.cs {
		out = append(out, cl.Snapshot())
	}
	return out
}

// eligible reports whether the server has instance id of ns/svc in
// rotation.
func (f *fixture) eligible(ns, svc, id string) (bool, wire.Endpoint, error) {
	es, err := f.n.Client().Endpoints(f.ctx, ns, svc)
	if err != nil {
		return false, wire.Endpoint{}, err
	}
	for _, e := range es {
		if e.InstanceID == id {
			return e.Eligible, e, nil
		}
	}
	return false, wire.Endpoint{}, fmt.Errorf("%s/%s/%s not listed", ns, svc, id)
}

// reached waits until every caller has had an answer from its
// population's target, and the server holds outcome evidence about the
// gRPC target from every reporting caller: a distinct observer each,
// what outcome_quorum needs.
func (f *fixture) reached(t *testing.T, targets map[callers.Kind]callers.Target) {
	t.Helper()
	integration.Eventually(t, 20*time.Second, func() error {
		for _, r := range f.snap() {
			tg := targets[r.Kind]
			if count(r, func(q callers.Request) bool { return q.Instance == tg.ID && q.Result == callers.Success }) == 0 {
				return fmt.Errorf("%s has not reached %s yet", r.Caller, tg.ID)
			}
		}
		id := targets[callers.DNSDirect].ID
		if got := observers(f.ctx, f.n, ns, svc, id); len(got) < len(f.reps) {
			return fmt.Errorf("outcome evidence about %s from %d observers %v, want %d", id, len(got), got, len(f.reps))
		}
		if f.envoy != nil {
			id := targets[callers.Envoy].ID
			if got := observers(f.ctx, f.n, webNS, webSvc, id); len(got) != 1 {
				return fmt.Errorf("outcome evidence about %s from %v, want the Envoy's token", id, got)
			}
		}
		return nil
	})
}

// figures logs, per population, the time until 99% of its callers
// stopped sending to its target after fault and its error rate per
// second, and fails a population that did not stop within bound.
func (f *fixture) figures(t *testing.T, recs []callers.Record, targets map[callers.Kind]callers.Target, fault, end time.Time, bound time.Duration) {
	t.Helper()
	byKind := callers.ByKind(recs)
	for _, p := range populations {
		rs := byKind[p.kind]
		if len(rs) == 0 {
			continue
		}
		cv := callers.StopTime(rs, targets[p.kind], fault, end, time.Second)
		t.Logf("%s: time until 99%% of %d callers stopped sending to %s: %v (last sends %v)",
			p.kind, cv.Callers, targets[p.kind].ID, cv.P99.Round(time.Millisecond), cv.Last)
		if !cv.Converged || cv.P99 > bound {
			t.Errorf("%s: p99 stop time %v (converged %v), want converged within %v", p.kind, cv.P99, cv.Converged, bound)
		}
		var b strings.Builder
		for _, pt := range callers.ErrorRates(rs, f.start, end, time.Second)[p.kind] {
			fmt.Fprintf(&b, " %.0fs:%.2f", pt.T, pt.V)
		}
		t.Logf("%s error rate per second (fault at %.1fs):%s", p.kind, fault.Sub(f.start).Seconds(), b.String())
		b.Reset()
		for _, pt := range callers.Presence(rs, targets[p.kind], f.start, end, 500*time.Millisecond)[p.kind] {
			fmt.Fprintf(&b, " %.1fs:%.2f", pt.T, pt.V)
		}
		t.Logf("%s share of callers given %s:%s", p.kind, targets[p.kind].ID, b.String())
	}
	for i, r := range f.reps {
		st := r.Stats()
		t.Logf("%s: %d reports, %d endpoints accepted, discarded %v, %d requests unattributed, %d ambiguous, %d errors %s",
			f.cs[i].Name(), st.Reports, st.Accepted, st.Discarded, st.Unattributed, st.Ambiguous, st.Errors, st.LastErr)
		if st.Accepted == 0 {
			t.Errorf("%s: the server accepted none of its outcomes", f.cs[i].Name())
		}
		if len(st.Delivered) != st.Reports {
			t.Errorf("%s: %d report timings for %d reports", f.cs[i].Name(), len(st.Delivered), st.Reports)
		}
		for j, d := range st.Delivered {
			if d.Late() < 0 || d.Late() > 4*time.Second || j > 0 && !d.Due.After(st.Delivered[j-1].Due) {
				t.Errorf("%s: report %d due %s, acknowledged %s later (the one before due %s); want due times increasing, each acknowledged within 4 s (a round times out after its interval)",
					f.cs[i].Name(), j, d.Due.Format("15:04:05.000"), d.Late(), st.Delivered[max(j-1, 0)].Due.Format("15:04:05.000"))
			}
		}
	}
}

// converged waits until the server has taken the targets out of
// rotation and every population has been quiet about its target for a
// second (and at least minWait has passed since fault).
func (f *fixture) converged(t *testing.T, targets map[callers.Kind]callers.Target, fault time.Time, minWait, timeout time.Duration) {
	t.Helper()
	integration.Eventually(t, timeout, func() error {
		for _, k := range [][3]string{{ns, svc, targets[callers.DNSDirect].ID}, {webNS, webSvc, targets[callers.Envoy].ID}} {
			if k[1] == webSvc && f.envoy == nil {
				continue
			}
			ok, e, err := f.eligible(k[0], k[1], k[2])
			if err != nil {
				return err
			}
			if ok {
				return fmt.Errorf("%s/%s still eligible (%s, %v)", k[1], k[2], e.Verdict, e.Reasons)
			}
		}
		if time.Since(fault) < minWait {
			return fmt.Errorf("less than %v since the fault", minWait)
		}
		for k, rs := range callers.ByKind(f.snap()) {
			if cv := callers.StopTime(rs, targets[k], fault, time.Now(), time.Second); !cv.Converged {
				return fmt.Errorf("%s callers still sending to %s: %v", k, targets[k].ID, cv.StillSending)
			}
		}
		return nil
	})
}

func targetsOf(rpc, web *standin) map[callers.Kind]callers.Target {
	out := map[callers.Kind]callers.Target{}
	for _, p := range populations {
		out[p.kind] = callers.Target{ID: rpc.id, Addr: rpc.addr}
	}
	out[callers.Envoy] = callers.Target{ID: web.id, Addr: web.addr}
	return out
}

// TestCallersAgainstCairn runs every population of callers against
// cairn, DNS-direct, DNS via an agent and grpc-go xDS callers of shop/rpc
// and Envoy callers of demo/web (when there is an Envoy); instance 1 of
// each service then refuses connections, and the test prints the time
// until 99% of each population stopped sending to it and the error rate
// per second.
func TestCallersAgainstCairn(t *testing.T) {
	needProcesses(t)
	// Startup (cluster, agent, Envoy: up to ~20 s on a loaded box) and
	// every Eventually's budget below.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f := newFixture(t, ctx, populations, true)
	targets := targetsOf(f.rpcs[1], f.webs[1])
	f.reached(t, targets)

	fault := time.Now()
	f.rpcs[1].Refuse()
	f.webs[1].Refuse()
	f.converged(t, targets, fault, 2*time.Second, 15*time.Second)
	f.stop()
	f.figures(t, f.snap(), targets, fault, time.Now(), 5*time.Second)
}

// TestSlowReplicaCaughtByTimeouts: an instance that still accepts
// connections (its TCP probes pass) but answers after the callers'
// deadline is withdrawn on the callers' evidence alone: their reported
// timeouts make the outcome quorum (docs/decisions.md, "A slow replica
// is caught by timeouts").
func TestSlowReplicaCaughtByTimeouts(t *testing.T) {
	needProcesses(t)
	// Startup (cluster, agent, Envoy: up to ~20 s on a loaded box) and
	// every Eventually's budget below.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	f := newFixture(t, ctx, []population{{callers.DNSDirect, 3}, {callers.GRPCXDS, 2}}, false)
	targets := targetsOf(f.rpcs[2], f.webs[2])
	f.reached(t, targets)

	fault := time.Now()
	f.rpcs[2].Slow(time.Second)
	f.converged(t, targets, fault, 2*time.Second, 25*time.Second)
	_, e, err := f.eligible(ns, svc, f.rpcs[2].id)
	f.stop()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: verdict %s, reasons %v", e.InstanceID, e.Verdict, e.Reasons)
	quorum := false
	for _, r := range e.Reasons {
		quorum = quorum || strings.HasPrefix(r, "outcome failing: a quorum of callers report failures")
		if strings.HasPrefix(r, "probe failing") {
			t.Errorf("withdrawn for a failing probe (%q): not the callers' evidence alone", r)
		}
	}
	if !quorum {
		t.Errorf("the withdrawal's reasons %q do not name the callers' outcome quorum", e.Reasons)
	}
	for _, ev := range e.Evidence {
		if ev.Class == "probe" && !ev.OK {
			t.Errorf("a probe failed (%s): the withdrawal is not the callers' alone", ev.Detail)
		}
	}
	f.figures(t, f.snap(), targets, fault, time.Now(), 15*time.Second)
}

// routed returns the hosts Envoy routes web.demo to: those it holds
// healthy or unknown, with no failure flag of its own.
func routed(ctx context.Context, e *integration.Envoy) ([]string, error) {
	hs, err := e.Hosts(ctx, webCluster)
	if err != nil {
		return nil, err
	}
	return integration.RoutedAddrs(hs), nil
}

// observers returns the distinct observers of the outcome evidence the
// server holds about one instance.
func observers(ctx context.Context, n *integration.Node, ns, svc, id string) []string {
	es, err := n.Client().Endpoints(ctx, ns, svc)
	if err != nil {
		return nil
	}
	seen := map[string]bool{}
	for _, e := range es {
		if e.InstanceID != id {
			continue
		}
		for _, ev := range e.Evidence {
			if ev.Class == "outcome" {
				seen[ev.Observer] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for o := range seen {
		out = append(out, o)
	}
	sort.Strings(out)
	return out
}
