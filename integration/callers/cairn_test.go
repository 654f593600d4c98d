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

const (
	ns       = "shop"
	svc      = "rpc"
	admin    = "callers-admin-0123456789abcdefgh"
	nDNS     = 4
	nGRPC    = 2
	callRate = 20
)

// TestCallersAgainstCairn runs DNS-direct and grpc-go xDS callers, each
// with a token of its own, against a 1-node cluster serving three
// stand-in gRPC instances (one per zone address), then makes one refuse
// connections. Every caller is a distinct voice in the outcome quorum;
// the test prints the time until 99% of each population stopped
// sending to the refused instance and the error rate per second.
func TestCallersAgainstCairn(t *testing.T) {
	needProcesses(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	tokens := make([]string, nDNS+nGRPC)
	acls := fmt.Sprintf("tokens:\n- {secret: %s, scope: admin}\n", admin)
	for i := range tokens {
		tokens[i] = fmt.Sprintf("callers-reader-%02d-0123456789abcdef", i)
		acls += fmt.Sprintf("- {secret: %s, scope: reader, namespaces: [%s]}\n", tokens[i], ns)
	}
	aclFile := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(aclFile, []byte(acls), 0o600); err != nil {
		t.Fatal(err)
	}
	c := integration.StartClusterAs(t, admin, 1, "--allow-loopback-endpoints", "--acl-file", aclFile,
		"--probe-token", admin, "--load-report-interval", "1s")
	n := c.Nodes[0]
	def := fmt.Sprintf("namespace: %s\nname: %s\nports: [{name: grpc, number: 9000, protocol: tcp}]\n"+
		"check: {type: tcp, port: grpc, interval: 1s, timeout: 500ms}\n"+
		"policy: {lease_ttl: 10m, slow_start: 0s, dns_ttl: 1s}\n", ns, svc)
	if _, err := n.Client().Apply(ctx, []byte(def)); err != nil {
		t.Fatal(err)
	}
	ips := []string{"127.11.0.1", "127.12.0.1", "127.13.0.1"}
	ss, port := startStandins(t, callers.GRPC, "i", ips...)
	for i, s := range ss {
		reg := wire.Registration{ID: s.id, Addresses: []string{ips[i]}, Ports: map[string]int{"grpc": port},
			Region: "r1", Zone: string(rune('a' + i))}
		if _, err := n.Client().Register(ctx, ns, svc, reg); err != nil {
			t.Fatal(err)
		}
	}
	integration.Eventually(t, 10*time.Second, func() error {
		es, err := n.Client().Endpoints(ctx, ns, svc)
		if err != nil {
			return err
		}
		for _, e := range es {
			if !e.Eligible {
				return fmt.Errorf("%s not eligible yet", e.InstanceID)
			}
		}
		return nil
	})

	// The callers, each with its reporter and its own token.
	var cs []*callers.Caller
	var reps []*callers.Reporter
	for i, tok := range tokens {
		cfg := callers.Config{Name: fmt.Sprintf("dns-%d", i), Rate: callRate, Timeout: 300 * time.Millisecond}
		var cl *callers.Caller
		var err error
		if i < nDNS {
			cl, err = callers.NewDNS(callers.DNSDirect, callers.DNSConfig{Config: cfg, Server: n.DNSAddr,
				Name: svc + "." + ns + ".svc.cairn.internal.", Port: port, Protocol: callers.GRPC,
				Source: net.ParseIP(fmt.Sprintf("127.1%d.0.%d", 1+i%3, 100+i))})
		} else {
			cfg.Name = fmt.Sprintf("grpc-%d", i)
			var boot []byte
			boot, err = xdsserver.Bootstrap(xdsserver.BootstrapConfig{Server: n.GRPCAddr, NodeID: cfg.Name})
			if err == nil {
				cl, err = callers.NewGRPC(callers.GRPCConfig{Config: cfg, Bootstrap: boot, Target: svc + "." + ns, Token: tok})
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		api, err := client.New(n.URL(), tok)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { api.Close() })
		rep, err := callers.NewReporter(callers.ReporterConfig{Caller: cl, API: api, Namespace: ns, Service: svc, Interval: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		cs, reps = append(cs, cl), append(reps, rep)
	}
	start := time.Now()
	rctx, stopAll := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range cs {
		wg.Add(2)
		go func() { defer wg.Done(); _ = cs[i].Run(rctx) }()
		go func() { defer wg.Done(); _ = reps[i].Run(rctx) }()
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

	// Every caller reaches the instance about to fail, and the server
	// holds outcome evidence about it from every caller: a distinct
	// observer each, so that outcome_quorum can be met.
	target := callers.Target{ID: ss[1].id, Addr: ss[1].addr}
	integration.Eventually(t, 15*time.Second, func() error {
		for _, r := range snap() {
			if count(r, func(q callers.Request) bool { return q.Instance == target.ID && q.Result == callers.Success }) == 0 {
				return fmt.Errorf("%s has not reached %s yet", r.Caller, target.ID)
			}
		}
		es, err := n.Client().Endpoints(ctx, ns, svc)
		if err != nil {
			return err
		}
		observers := map[string]bool{}
		for _, e := range es {
			if e.InstanceID != target.ID {
				continue
			}
			for _, ev := range e.Evidence {
				if ev.Class == "outcome" {
					observers[ev.Observer] = true
				}
			}
		}
		if len(observers) < len(cs) {
			return fmt.Errorf("outcome evidence about %s from %d observers %v, want %d", target.ID, len(observers), keys(observers), len(cs))
		}
		return nil
	})

	fault := time.Now()
	ss[1].Refuse()
	converged := func(recs []callers.Record) error {
		for k, rs := range callers.ByKind(recs) {
			if cv := callers.StopTime(rs, target, fault, time.Now(), time.Second); !cv.Converged {
				return fmt.Errorf("%s callers still sending to %s: %v", k, target.ID, cv.StillSending)
			}
		}
		return nil
	}
	// Measured once the server has withdrawn it and every population has
	// been quiet about it for a second.
	integration.Eventually(t, 10*time.Second, func() error {
		es, err := n.Client().Endpoints(ctx, ns, svc)
		if err != nil {
			return err
		}
		for _, e := range es {
			if e.InstanceID == target.ID && e.Eligible {
				return fmt.Errorf("%s still eligible", target.ID)
			}
		}
		if time.Since(fault) < 2*time.Second {
			return errors.New("less than 2s since the fault")
		}
		return converged(snap())
	})
	stop()
	end := time.Now()
	recs := snap()

	for k, rs := range callers.ByKind(recs) {
		cv := callers.StopTime(rs, target, fault, end, time.Second)
		t.Logf("%s: time until 99%% of %d callers stopped sending to the refused %s: %v (converged %v; last sends %v)",
			k, cv.Callers, target.ID, cv.P99, cv.Converged, cv.Last)
		if !cv.Converged || cv.P99 > 5*time.Second {
			t.Errorf("%s: p99 stop time %v (converged %v), want converged within 5s", k, cv.P99, cv.Converged)
		}
	}
	rates := callers.ErrorRates(recs, start, end, time.Second)
	kinds := make([]string, 0, len(rates))
	for k := range rates {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		var b strings.Builder
		for _, p := range rates[callers.Kind(k)] {
			fmt.Fprintf(&b, " %.0fs:%.2f", p.T, p.V)
		}
		t.Logf("%s error rate per second (fault at %.1fs):%s", k, fault.Sub(start).Seconds(), b.String())
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

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
