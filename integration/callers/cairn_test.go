package callers_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/callers"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
)

func TestMain(m *testing.M) {
	code := m.Run()
	integration.RemoveBinary()
	os.Exit(code)
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

// TestCallersAgainstCairn runs every kind of caller against a 1-node
// cluster with ACLs: DNS-direct, DNS via an agent and grpc-go xDS
// callers of three stand-in gRPC instances, one per zone address, each
// caller with a token of its own, and Envoy callers of three stand-in
// HTTP instances through one Envoy (when there is one). Every reporting
// caller is a distinct voice in the outcome quorum. Then instance 1 of
// each service refuses connections, and the test prints the time until
// 99% of each population stopped sending to it and the error rate per
// second.
func TestCallersAgainstCairn(t *testing.T) {
	needProcesses(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	envoyBin := envoyBinary(t)

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
	rpcs, rpcPort := startStandins(t, callers.GRPC, "i", "127.11.0.1", "127.12.0.1", "127.13.0.1")
	webs, webPort := startStandins(t, callers.HTTP, "w", "127.11.0.2", "127.12.0.2", "127.13.0.2")
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
	register(ns, svc, "grpc", rpcPort, rpcs, func(i int) (string, string) { return "r1", string(rune('a' + i)) })
	// In the Envoy's own region and zone: one priority, all in rotation.
	register(webNS, webSvc, "http", webPort, webs, func(int) (string, string) { return "local", "zone-1" })
	for _, s := range []string{svc, webSvc} {
		nsOf := map[string]string{svc: ns, webSvc: webNS}[s]
		integration.Eventually(t, 10*time.Second, func() error {
			es, err := n.Client().Endpoints(ctx, nsOf, s)
			if err != nil {
				return err
			}
			for _, e := range es {
				if !e.Eligible {
					return fmt.Errorf("%s/%s not eligible yet", s, e.InstanceID)
				}
			}
			return nil
		})
	}

	agent := integration.StartAgentWith(t, integration.AgentConfig{Servers: []string{n.GRPCAddr}, Token: admin,
		Args: []string{"--service", ns + "/" + svc}})
	var envoy *integration.Envoy
	if envoyBin != "" {
		e, err := integration.NewEnvoy(integration.EnvoyConfig{Dir: filepath.Join(t.TempDir(), "envoy"), Bin: envoyBin,
			Servers: []string{n.GRPCAddr}, Node: "callers-envoy", Zone: "zone-1", Token: tokens[9], Logf: t.Logf})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if e.Running() {
				e.Kill()
			}
			e.CloseIdle()
		})
		if err := e.Start(); err != nil {
			t.Fatal(err)
		}
		envoy = e
	}

	// The callers; each that reports has its own token.
	var cs []*callers.Caller
	var reps []*callers.Reporter
	tok := 0
	for _, p := range populations {
		for i := range p.n {
			cfg := callers.Config{Name: fmt.Sprintf("%s-%d", p.kind, i), Rate: callRate, Timeout: 300 * time.Millisecond}
			dns := callers.DNSConfig{Config: cfg, Server: n.DNSAddr, Name: svc + "." + ns + ".svc.cairn.internal.",
				Port: rpcPort, Protocol: callers.GRPC, Source: net.ParseIP(fmt.Sprintf("127.1%d.0.%d", 1+i%3, 100+len(cs)))}
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
				if envoy == nil {
					continue
				}
				cl, err = callers.NewEnvoy(callers.EnvoyConfig{Config: cfg, URL: "http://" + envoy.Listener + "/",
					Hosts: func(ctx context.Context) ([]string, error) { return routed(ctx, envoy) }})
			}
			if err != nil {
				t.Fatal(err)
			}
			cs = append(cs, cl)
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
			reps = append(reps, rep)
		}
	}
	start := time.Now()
	rctx, stopAll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, r := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(rctx) }()
	}
	for _, r := range reps {
		wg.Add(1)
		go func() { defer wg.Done(); _ = r.Run(rctx) }()
	}
	stop := sync.OnceFunc(func() { stopAll(); wg.Wait() })
	t.Cleanup(stop)
	snap := func() []callers.Record {
		var out []callers.Record
		for _, cl := range cs {
			out = append(out, cl.Snapshot())
		}
		return out
	}
	targets := map[callers.Kind]callers.Target{}
	for _, p := range populations {
		targets[p.kind] = callers.Target{ID: rpcs[1].id, Addr: rpcs[1].addr}
	}
	targets[callers.Envoy] = callers.Target{ID: webs[1].id, Addr: webs[1].addr}

	// Every caller reaches the instance about to fail, and the server
	// holds outcome evidence about it from every reporting caller (and
	// the Envoy): a distinct observer each, what outcome_quorum needs.
	integration.Eventually(t, 20*time.Second, func() error {
		for _, r := range snap() {
			tg := targets[r.Kind]
			if count(r, func(q callers.Request) bool { return q.Instance == tg.ID && q.Result == callers.Success }) == 0 {
				return fmt.Errorf("%s has not reached %s yet", r.Caller, tg.ID)
			}
		}
		if got := observers(ctx, n, ns, svc, rpcs[1].id); len(got) < len(reps) {
			return fmt.Errorf("outcome evidence about %s from %d observers %v, want %d", rpcs[1].id, len(got), got, len(reps))
		}
		if got := observers(ctx, n, webNS, webSvc, webs[1].id); envoy != nil && len(got) != 1 {
			return fmt.Errorf("outcome evidence about %s from %v, want the Envoy's token", webs[1].id, got)
		}
		return nil
	})

	fault := time.Now()
	rpcs[1].Refuse()
	webs[1].Refuse()
	// Measured once the server has withdrawn both and every population
	// has been quiet about them for a second.
	integration.Eventually(t, 15*time.Second, func() error {
		for _, k := range []struct{ ns, svc, id string }{{ns, svc, rpcs[1].id}, {webNS, webSvc, webs[1].id}} {
			es, err := n.Client().Endpoints(ctx, k.ns, k.svc)
			if err != nil {
				return err
			}
			for _, e := range es {
				if e.InstanceID == k.id && e.Eligible {
					return fmt.Errorf("%s/%s still eligible", k.svc, k.id)
				}
			}
		}
		if time.Since(fault) < 2*time.Second {
			return errors.New("less than 2s since the fault")
		}
		for k, rs := range callers.ByKind(snap()) {
			if cv := callers.StopTime(rs, targets[k], fault, time.Now(), time.Second); !cv.Converged {
				return fmt.Errorf("%s callers still sending to %s: %v", k, targets[k].ID, cv.StillSending)
			}
		}
		return nil
	})
	stop()
	end := time.Now()
	recs := snap()

	byKind := callers.ByKind(recs)
	for _, p := range populations {
		rs := byKind[p.kind]
		if len(rs) == 0 {
			continue
		}
		cv := callers.StopTime(rs, targets[p.kind], fault, end, time.Second)
		t.Logf("%s: time until 99%% of %d callers stopped sending to the refused %s: %v (last sends %v)",
			p.kind, cv.Callers, targets[p.kind].ID, cv.P99.Round(time.Millisecond), cv.Last)
		if !cv.Converged || cv.P99 > 5*time.Second {
			t.Errorf("%s: p99 stop time %v (converged %v), want converged within 5s", p.kind, cv.P99, cv.Converged)
		}
		var b strings.Builder
		for _, pt := range callers.ErrorRates(rs, start, end, time.Second)[p.kind] {
			fmt.Fprintf(&b, " %.0fs:%.2f", pt.T, pt.V)
		}
		t.Logf("%s error rate per second (fault at %.1fs):%s", p.kind, fault.Sub(start).Seconds(), b.String())
	}
	for i, r := range reps {
		st := r.Stats()
		t.Logf("%s: %d reports, %d endpoints accepted, discarded %v, %d requests unattributed, %d errors %s",
			cs[i].Name(), st.Reports, st.Accepted, st.Discarded, st.Unattributed, st.Errors, st.LastErr)
		if st.Accepted == 0 {
			t.Errorf("%s: the server accepted none of its outcomes", cs[i].Name())
		}
	}
}

// routed returns the hosts Envoy routes web.demo to: those it holds
// healthy or unknown, with no failure flag of its own.
func routed(ctx context.Context, e *integration.Envoy) ([]string, error) {
	hs, err := e.Hosts(ctx, webCluster)
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, h := range hs {
		if (h.Health == "HEALTHY" || h.Health == "UNKNOWN") && len(h.Flags) == 0 {
			out = append(out, h.Addr)
		}
	}
	return out, nil
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
