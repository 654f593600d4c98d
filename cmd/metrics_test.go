package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	lrsv3 "github.com/envoyproxy/go-control-plane/envoy/service/load_stats/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-sd/cairn/client"
)

// TestMetricNames lints every metric family `cairn server` registers
// (STYLE §3.2, §3.6): promlint, and the cairn_ namespace for all but the
// Go runtime's and the process's collectors. It scrapes /metrics of real
// servers, so that what it lints is what cmd wires, whichever package
// registers it.
//
// A labelled family has no series, and so is not exposed, until it is
// first used: each one gets the traffic that gives it one below, and the
// test waits for all of them (wantSeries). A new labelled family needs its
// row there and its traffic here, or it goes unlinted.
func TestMetricNames(t *testing.T) {
	leader := startServer(t, "--dev")
	// Only a follower pushes its probe batches to a leader. This node
	// never finds its cluster, so each push fails and counts.
	lonely := startServer(t, "--join", closedAddr(t))

	ctx := t.Context()
	cl, err := client.New(leader.http, "")
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	eventually(t, 30*time.Second, func() error {
		if !cl.Ready(ctx) {
			return fmt.Errorf("%s not ready", leader.http)
		}
		return nil
	})
	def := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(def, []byte("namespace: demo\nname: web\nports: [{name: http, number: 8080, protocol: tcp}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, "--addr", leader.http, "apply", "-f", def); code != 0 {
		t.Fatalf("apply: %d %q", code, errs)
	}
	// A registration: a health transition once the leader evaluates it.
	if code, _, errs := run(t, "--addr", leader.http, "register", "--instance", "w1", "--address", "127.0.0.1",
		"--port", "http=8080", "demo/web"); code != 0 {
		t.Fatalf("register: %d %q", code, errs)
	}
	// A refused write.
	if code, _, _ := run(t, "--addr", leader.http, "register", "--instance", "w1", "--address", "127.0.0.1",
		"--port", "http=8080", "demo/none"); code != exitError {
		t.Fatalf("register in an undefined service: exit %d, want %d", code, exitError)
	}
	// Evidence about an instance that does not exist, discarded. (Sent as
	// the documented JSON, docs/api.md: the test needs no report type.)
	eventually(t, 30*time.Second, func() error {
		body := `{"endpoints": [{"namespace": "demo", "service": "web", "instance_id": "nobody", "incarnation": 1, "success": 1}]}`
		resp, err := http.Post(leader.http+"/v1/outcomes", "application/json", strings.NewReader(body))
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("POST /v1/outcomes: %s %s", resp.Status, b)
		}
		return nil
	})
	// A DNS query, whatever its answer.
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, leader.dns)
	}}
	_, _ = r.LookupHost(ctx, "web.demo.svc.cairn.internal.")
	// An xDS subscription, answered, then refused.
	xdsRoundTrip(t, ctx, leader.grpc)
	// A load report about a cluster the server does not serve.
	lrsReport(t, ctx, leader.grpc)

	wantSeries := []string{
		"cairn_api_requests_total",
		"cairn_api_rejected_mutations_total",
		"cairn_dns_queries_total",
		"cairn_health_transitions_total",
		"cairn_health_evidence_discarded_total",
		"cairn_health_probe_pushes_total",
		"cairn_xds_responses_total",
		"cairn_xds_nacks_total",
		"cairn_xds_load_stats_total",
		"cairn_xds_streams_let_go_total", // its reasons are there from the start
	}
	var scrapes [][]byte
	var types map[string]string // family → type, over both servers
	eventually(t, 30*time.Second, func() error {
		scrapes, types = nil, map[string]string{}
		for _, s := range []server{leader, lonely} {
			b, err := scrape(ctx, s.http)
			if err != nil {
				return err
			}
			scrapes = append(scrapes, b)
			for name, typ := range familyTypes(b) {
				types[name] = typ
			}
		}
		var missing []string
		for _, name := range wantSeries {
			if _, ok := types[name]; !ok {
				missing = append(missing, name)
			}
		}
		if len(missing) > 0 {
			return fmt.Errorf("no series yet for %v", missing)
		}
		return nil
	})

	reported := map[promlint.Problem]bool{} // each once, though both servers have it
	for _, b := range scrapes {
		probs, err := promlint.New(bytes.NewReader(b)).Lint()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range probs {
			if !reported[p] {
				reported[p] = true
				t.Errorf("metric %s: %s", p.Metric, p.Text)
			}
		}
	}
	var ours int
	for name := range types {
		switch {
		case strings.HasPrefix(name, "cairn_"):
			ours++
		case strings.HasPrefix(name, "go_"), strings.HasPrefix(name, "process_"):
			// The Go runtime's and the process's collectors keep their
			// standard names.
		default:
			t.Errorf("metric %s lacks the cairn_ namespace", name)
		}
	}
	// Every package cmd wires that registers metrics shows up.
	for _, sub := range []string{"api", "dns", "health", "probe", "store"} {
		if !slices.ContainsFunc(slices.Collect(maps.Keys(types)), func(n string) bool { return strings.HasPrefix(n, "cairn_"+sub+"_") }) {
			t.Errorf("no cairn_%s_ metric scraped", sub)
		}
	}
	t.Logf("linted %d families, %d of them cairn_", len(types), ours)
}

// lrsReport sends the server at addr one load report, about a cluster
// it does not serve, over LRS.
func lrsReport(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := lrsv3.NewLoadReportingServiceClient(cc).StreamLoadStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&lrsv3.LoadStatsRequest{Node: &corev3.Node{Id: "metrics-test"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil { // the reporting interval: the first request was taken
		t.Fatal(err)
	}
	if err := stream.Send(&lrsv3.LoadStatsRequest{ClusterStats: []*endpointv3.ClusterStats{{ClusterName: "nobody.demo:http"}}}); err != nil {
		t.Fatal(err)
	}
}

// server is a `cairn server` running in this process.
type server struct {
	http string // http://HOST:PORT
	dns  string // HOST:PORT, UDP and TCP
	grpc string // HOST:PORT, xDS
}

// startServer runs `cairn server` with args, its data in a temporary
// directory and every listener on a loopback port of its own, until the
// test ends; it returns once the server has written its addresses.
func startServer(t *testing.T, args ...string) server {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	argv := append([]string{"cairn", "server", "--data-dir", dir, "--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0",
		"--dns-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--eval-interval", "100ms", "--lame-duck", "0s"}, args...)
	logw := &tWriter{t: t}
	go func() { done <- Run(ctx, argv, io.Discard, logw) }()
	t.Cleanup(func() {
		cancel()
		select {
		case code := <-done:
			if code != exitOK {
				t.Errorf("%v exited %d", args, code)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("%v still running 30s after it was stopped", args)
		}
		logw.close()
	})
	var addrs struct{ HTTP, DNS, GRPC string }
	eventually(t, 30*time.Second, func() error {
		select {
		case code := <-done:
			done <- code
			return fmt.Errorf("%v exited %d before it listened", args, code)
		default:
		}
		b, err := os.ReadFile(filepath.Join(dir, AddrsFile))
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &addrs)
	})
	return server{http: "http://" + addrs.HTTP, dns: addrs.DNS, grpc: addrs.GRPC}
}

// xdsRoundTrip subscribes to every cluster over ADS at addr, refuses the
// answer, and subscribes to every listener.
func xdsRoundTrip(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var resp *discoveryv3.DiscoveryResponse
	eventually(t, 30*time.Second, func() error { // UNAVAILABLE until the table is built
		stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(sctx)
		if err != nil {
			return err
		}
		req := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ClusterType, Node: &corev3.Node{Id: "metrics-test"}}
		if err := stream.Send(req); err != nil {
			return err
		}
		if resp, err = stream.Recv(); err != nil {
			return err
		}
		req.ResponseNonce, req.ErrorDetail = resp.Nonce, &rpcstatus.Status{Message: "refused by the test"}
		if err := stream.Send(req); err != nil {
			return err
		}
		// The stream's requests are handled in order: once a later one is
		// answered, the refusal has been counted.
		if err := stream.Send(&discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.ListenerType}); err != nil {
			return err
		}
		_, err = stream.Recv()
		return err
	})
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// scrape returns the text exposition of base's /metrics.
func scrape(ctx context.Context, base string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", base, resp.Status)
	}
	return io.ReadAll(resp.Body)
}

// familyTypes reads the families' names and types from an exposition's
// TYPE lines.
func familyTypes(b []byte) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			out[f[2]] = f[3]
		}
	}
	return out
}

// eventually polls f until it returns nil, failing the test with f's
// last error if that takes longer than d.
func eventually(t *testing.T, d time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %v", d, err)
		}
		<-tick.C
	}
}

// tWriter sends a server's log to the test's, shown on failure, until
// close: a line logged after the test ended would panic.
type tWriter struct {
	mu     sync.Mutex
	t      *testing.T
	closed bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
