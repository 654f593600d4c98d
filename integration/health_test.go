package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// The health tests run real servers that probe listeners of the test
// process on 127.0.0.1, with the default evaluation interval (1s). Each
// test has a cluster of its own and runs in parallel with the others.

// healthArgs are the server flags of every health test: the instances
// are the test's loopback listeners.
var healthArgs = []string{"--allow-loopback-endpoints"}

const healthNS = "shop"

// withdrawBound is the bound on withdrawing an instance whose TCP
// listener closed, with a 1s check interval.
const withdrawBound = 5 * time.Second

// healthService returns the definition of shop/name with one port, http,
// and the check and policy given as YAML flow mappings. The tests' policies
// set lease_ttl: 10m, as an expired lease is not what they are about.
func healthService(name, check, policy string) string {
	def := fmt.Sprintf("namespace: %s\nname: %s\nports: [{name: http, number: 8080, protocol: tcp}]\n", healthNS, name)
	if check != "" {
		def += "check: " + check + "\n"
	}
	if policy == "" {
		policy = "{}"
	}
	return def + "policy: " + policy + "\n"
}

// backend is a listener on 127.0.0.1 that an instance points at: plain
// TCP (accept, then close) when handler is nil, HTTP otherwise. Close
// makes connections to it refused; Open listens on the same port again.
type backend struct {
	addr    string
	port    int
	handler http.Handler
	hits    atomic.Int64 // connections (TCP) or requests (HTTP) served

	mu   sync.Mutex
	stop func() // closes the listener and waits for its server; nil while closed
}

func newBackend(t *testing.T, h http.Handler) *backend {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &backend{addr: ln.Addr().String(), port: ln.Addr().(*net.TCPAddr).Port, handler: h}
	b.serve(ln)
	t.Cleanup(b.Close)
	return b
}

func (b *backend) serve(ln net.Listener) {
	done := make(chan struct{})
	if b.handler == nil {
		go func() {
			defer close(done)
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				b.hits.Add(1)
				c.Close()
			}
		}()
		b.stop = func() { ln.Close(); <-done }
		return
	}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second,
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			b.hits.Add(1)
			b.handler.ServeHTTP(w, r)
		})}
	go func() {
		defer close(done)
		srv.Serve(ln)
	}()
	b.stop = func() { srv.Close(); <-done }
}

// Close closes the listener (and, for HTTP, every open connection).
func (b *backend) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop != nil {
		b.stop()
		b.stop = nil
	}
}

// Open listens on the backend's port again. The port was free while the
// backend was closed, so another process may hold it for a moment: Open
// retries for a few seconds.
func (b *backend) Open(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.stop != nil {
		return
	}
	var ln net.Listener
	err := Poll(5*time.Second, 50*time.Millisecond, func() error {
		var err error
		ln, err = net.Listen("tcp", b.addr)
		return err
	})
	if err != nil {
		t.Fatalf("listening on %s again: %v", b.addr, err)
	}
	b.serve(ln)
}

// statusHandler answers every request with its current status (200 at
// first) and counts the answers by status.
type statusHandler struct {
	code   atomic.Int32
	mu     sync.Mutex
	served map[int]int
}

func newStatusHandler() *statusHandler {
	h := &statusHandler{served: map[int]int{}}
	h.code.Store(http.StatusOK)
	return h
}

func (h *statusHandler) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	code := int(h.code.Load())
	h.mu.Lock()
	h.served[code]++
	h.mu.Unlock()
	w.WriteHeader(code)
}

// Set makes the handler answer code from now on.
func (h *statusHandler) Set(code int) { h.code.Store(int32(code)) }

// Served returns how many answers with code it gave.
func (h *statusHandler) Served(code int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.served[code]
}

// onAnyNode calls f with the live nodes in turn until it succeeds, for up
// to 30s, while its errors are worth a retry (503 during an election, a
// refused connection); another error fails the test at once.
func onAnyNode(t *testing.T, c *Cluster, what string, f func(n *Node) error) {
	t.Helper()
	var last error
	err := Poll(30*time.Second, 100*time.Millisecond, func() error {
		for _, n := range c.Live() {
			last = f(n)
			if last == nil {
				return nil
			}
			if !client.IsRetryable(last) {
				return &stopPolling{fmt.Errorf("%s via %s: %w", what, n.ID, last)}
			}
		}
		return fmt.Errorf("%s: %w", what, last)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// applyDefinition applies service definitions through any live node.
func applyDefinition(ctx context.Context, t *testing.T, c *Cluster, def string) {
	t.Helper()
	onAnyNode(t, c, "apply", func(n *Node) error {
		_, err := n.Client().Apply(ctx, []byte(def))
		return err
	})
}

// loopbackFleet starts n backends and registers each as an instance of
// svc on 127.0.0.1, ids prefix-0 … prefix-(n-1), edit applied to each
// registration (may be nil).
func loopbackFleet(ctx context.Context, t *testing.T, c *Cluster, svc, prefix string, n int, edit func(*wire.Registration)) ([]*backend, []string) {
	t.Helper()
	var bs []*backend
	var ids []string
	for i := range n {
		b := newBackend(t, nil)
		id := fmt.Sprintf("%s-%d", prefix, i)
		registerLoopback(ctx, t, c, svc, id, b.port, edit)
		bs, ids = append(bs, b), append(ids, id)
	}
	return bs, ids
}

// registerLoopback registers instance id of shop/svc at 127.0.0.1:port
// (port "http"); edit, if set, changes the registration first.
func registerLoopback(ctx context.Context, t *testing.T, c *Cluster, svc, id string, port int, edit func(*wire.Registration)) wire.Registered {
	t.Helper()
	reg := wire.Registration{ID: id, Addresses: []string{"127.0.0.1"}, Ports: map[string]int{"http": port}}
	if edit != nil {
		edit(&reg)
	}
	var r wire.Registered
	onAnyNode(t, c, "register "+id, func(n *Node) error {
		var err error
		r, err = n.Client().Register(ctx, healthNS, svc, reg)
		return err
	})
	return r
}

// endpointsOn returns shop/svc's endpoints as node n serves them, by
// instance id.
func endpointsOn(ctx context.Context, n *Node, svc string) (map[string]wire.Endpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	es, err := n.Client().Endpoints(ctx, healthNS, svc)
	if err != nil {
		return nil, fmt.Errorf("%s: endpoints of %s/%s: %w", n.ID, healthNS, svc, err)
	}
	m := make(map[string]wire.Endpoint, len(es))
	for _, e := range es {
		m[e.InstanceID] = e
	}
	return m, nil
}

// endpointOn returns one instance's endpoint as node n serves it.
func endpointOn(ctx context.Context, n *Node, svc, id string) (wire.Endpoint, error) {
	es, err := endpointsOn(ctx, n, svc)
	if err != nil {
		return wire.Endpoint{}, err
	}
	e, ok := es[id]
	if !ok {
		return wire.Endpoint{}, fmt.Errorf("%s: %s/%s/%s is not listed", n.ID, healthNS, svc, id)
	}
	return e, nil
}

// describe is an endpoint in one line, for failure messages and logs.
func describe(e wire.Endpoint) string {
	return fmt.Sprintf("%s#%d %s verdict=%s eligible=%v weight=%d flags=%v reasons=%q",
		e.InstanceID, e.Incarnation, e.Lifecycle, e.Verdict, e.Eligible, e.Weight, e.Flags, e.Reasons)
}

// waitEndpoint polls n every 100ms until want holds for instance id of
// shop/svc (want returns nil), and returns that answer and when it came.
// It fails the test with the last answer after timeout.
func waitEndpoint(ctx context.Context, t *testing.T, n *Node, svc, id string, timeout time.Duration, want func(wire.Endpoint) error) (wire.Endpoint, time.Time) {
	t.Helper()
	var got wire.Endpoint
	var at time.Time
	err := Poll(timeout, 100*time.Millisecond, func() error {
		e, err := endpointOn(ctx, n, svc, id)
		if err != nil {
			return err
		}
		at = time.Now()
		if err := want(e); err != nil {
			return fmt.Errorf("%s: %s: %v", n.ID, describe(e), err)
		}
		got = e
		return nil
	})
	if err != nil {
		t.Fatalf("%s/%s/%s on %s: %v", healthNS, svc, id, n.ID, err)
	}
	return got, at
}

// Conditions for waitEndpoint.
func isHealthyEligible(e wire.Endpoint) error {
	if !e.Eligible || e.Verdict != status.Healthy {
		return fmt.Errorf("want eligible and healthy")
	}
	return nil
}

func isWithdrawn(e wire.Endpoint) error {
	if e.Eligible {
		return fmt.Errorf("want withdrawn")
	}
	return nil
}

// withdrawnVerdict waits until n's table carries the committed verdict of
// a withdrawn endpoint: the withdrawal fast path publishes the
// withdrawal before the next table carries the verdict and its evidence
// (until then the endpoint's reason says "not yet published").
func withdrawnVerdict(ctx context.Context, t *testing.T, n *Node, svc, id string) wire.Endpoint {
	t.Helper()
	e, _ := waitEndpoint(ctx, t, n, svc, id, 10*time.Second, func(e wire.Endpoint) error {
		if err := isWithdrawn(e); err != nil {
			return err
		}
		if hasReason(e.Reasons, "not yet published by this node") {
			return fmt.Errorf("the committed verdict is not yet published")
		}
		return nil
	})
	return e
}

func isEligible(e wire.Endpoint) error {
	if !e.Eligible {
		return fmt.Errorf("want eligible")
	}
	return nil
}

// waitAllHealthy waits until every node lists each instance eligible and
// healthy (probed, evaluated, committed and in each node's table).
func waitAllHealthy(ctx context.Context, t *testing.T, nodes []*Node, svc string, ids ...string) {
	t.Helper()
	for _, n := range nodes {
		Eventually(t, 30*time.Second, func() error {
			es, err := endpointsOn(ctx, n, svc)
			if err != nil {
				return err
			}
			for _, id := range ids {
				e, ok := es[id]
				if !ok {
					return fmt.Errorf("%s: %s not listed", n.ID, id)
				}
				if err := isHealthyEligible(e); err != nil {
					return fmt.Errorf("%s: %s: %v", n.ID, describe(e), err)
				}
			}
			return nil
		})
	}
}

// hasReason reports whether one of the reasons contains sub.
func hasReason(reasons []string, sub string) bool {
	return slices.ContainsFunc(reasons, func(r string) bool { return strings.Contains(r, sub) })
}

// hasFlag reports whether flags holds flag.
func hasFlag(flags []string, flag string) bool { return slices.Contains(flags, flag) }

// eventsOn returns shop/svc's audit trail as n serves it, oldest first.
func eventsOn(ctx context.Context, n *Node, svc string) ([]wire.Event, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	evs, err := n.Client().Events(ctx, healthNS, svc, store.AuditCapacity)
	if err != nil {
		return nil, fmt.Errorf("%s: events of %s/%s: %w", n.ID, healthNS, svc, err)
	}
	return evs, nil
}

// withdrawal and readmission match eligibility events of one instance.
func withdrawal(id string) func(wire.Event) bool {
	return func(e wire.Event) bool {
		return e.Kind == wire.EventEligibility && e.Instance == id &&
			strings.HasPrefix(e.From, "eligible/") && strings.HasPrefix(e.To, "withdrawn/")
	}
}

func readmission(id string) func(wire.Event) bool {
	return func(e wire.Event) bool {
		return e.Kind == wire.EventEligibility && e.Instance == id &&
			strings.HasPrefix(e.From, "withdrawn/") && strings.HasPrefix(e.To, "eligible/")
	}
}

// waitEvent polls n's audit trail of shop/svc until it holds an event
// after seq (by sequence number) that match accepts, and returns it.
func waitEvent(ctx context.Context, t *testing.T, n *Node, svc string, after uint64, what string, match func(wire.Event) bool) wire.Event {
	t.Helper()
	var found wire.Event
	Eventually(t, 15*time.Second, func() error {
		evs, err := eventsOn(ctx, n, svc)
		if err != nil {
			return err
		}
		for _, e := range evs {
			if e.Seq > after && match(e) {
				found = e
				return nil
			}
		}
		return fmt.Errorf("%s: no %s event in the audit trail of %s/%s after seq %d:\n%s", n.ID, what, healthNS, svc, after, eventLines(evs))
	})
	return found
}

func eventLines(evs []wire.Event) string {
	var b strings.Builder
	for _, e := range evs {
		fmt.Fprintf(&b, "  #%d %s %s %s#%d %s -> %s %q by %s\n", e.Seq, e.At.Format("15:04:05.000"), e.Kind,
			e.Instance, e.Incarnation, e.From, e.To, e.Reason, e.Actor)
	}
	return b.String()
}

// loadavg is the machine's load, for a timing failure's message.
func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}

// TestHealthTCPCloseWithdraws: closing the TCP listener of one of four
// instances (check interval 1s, 3-node cluster, two observers) withdraws
// it within withdrawBound, on a hard failure, and leaves the others in
// rotation.
func TestHealthTCPCloseWithdraws(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 3, healthArgs...)
	ctx := ctxT(t, 2*time.Minute)
	const svc = "tcp"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}", "{lease_ttl: 10m}"))
	bs, ids := loopbackFleet(ctx, t, c, svc, "t", 4, nil)
	leader, err := c.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)

	closedAt := time.Now()
	bs[0].Close()
	e, at := waitEndpoint(ctx, t, leader, svc, ids[0], 15*time.Second, isWithdrawn)
	took := at.Sub(closedAt)
	t.Logf("listener of %s closed: withdrawn on leader %s after %s: %s", ids[0], leader.ID, took.Round(time.Millisecond), describe(e))
	if took >= withdrawBound {
		t.Errorf("withdrawn %s after the listener closed; want < %s (load average: %s)", took, withdrawBound, loadavg())
	}
	e = withdrawnVerdict(ctx, t, leader, svc, ids[0])
	if e.Verdict != status.Unhealthy || !hasReason(e.Reasons, "connection refused") {
		t.Errorf("withdrawn endpoint: %s; want verdict unhealthy for a refused connection", describe(e))
	}
	if ev := e.VerdictEvidence; ev == nil || ev.Class != "probe" || c.Node(ev.Observer) == nil {
		t.Errorf("verdict evidence %+v; want a probe by one of the cluster's nodes", e.VerdictEvidence)
	}
	// Every node publishes the committed verdict; the others stay.
	for _, n := range c.Nodes {
		waitEndpoint(ctx, t, n, svc, ids[0], 10*time.Second, isWithdrawn)
		es, err := endpointsOn(ctx, n, svc)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids[1:] {
			if !es[id].Eligible {
				t.Errorf("%s: %s; want it eligible still", n.ID, describe(es[id]))
			}
		}
	}
	ev := waitEvent(ctx, t, leader, svc, 0, "withdrawal of "+ids[0], withdrawal(ids[0]))
	if !strings.Contains(ev.Reason, "connection refused") {
		t.Errorf("withdrawal event reason %q; want the refused connection", ev.Reason)
	}
}

// TestHealthHTTPWithdrawAndReadmit: an HTTP check answering 503 withdraws
// the instance after withdraw_after failures; answering 200 again
// re-admits it only after admit_after successes spanning admit_min, which
// takes strictly longer. Both transitions are in the audit trail with
// their reasons.
func TestHealthHTTPWithdrawAndReadmit(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	const (
		svc           = "http"
		withdrawAfter = 3
		admitAfter    = 5
		admitMin      = 5 * time.Second
	)
	applyDefinition(ctx, t, c, healthService(svc, "{type: http, port: http, path: /ready, interval: 1s, timeout: 500ms}",
		fmt.Sprintf("{withdraw_after: %d, admit_after: %d, admit_min: %s, lease_ttl: 10m}", withdrawAfter, admitAfter, admitMin)))
	var hs []*statusHandler
	var ids []string
	for i := range 4 {
		h := newStatusHandler()
		b := newBackend(t, h)
		id := fmt.Sprintf("h-%d", i)
		registerLoopback(ctx, t, c, svc, id, b.port, nil)
		hs, ids = append(hs, h), append(ids, id)
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)

	failedAt := time.Now()
	hs[0].Set(http.StatusServiceUnavailable)
	e, at := waitEndpoint(ctx, t, n, svc, ids[0], 20*time.Second, isWithdrawn)
	withdrawTook := at.Sub(failedAt)
	failures := hs[0].Served(http.StatusServiceUnavailable)
	t.Logf("503 from %s: withdrawn after %s and %d failed probes: %s", ids[0], withdrawTook.Round(time.Millisecond), failures, describe(e))
	if failures < withdrawAfter {
		t.Errorf("withdrawn after %d failed probes; want at least withdraw_after = %d", failures, withdrawAfter)
	}
	e = withdrawnVerdict(ctx, t, n, svc, ids[0])
	if e.Verdict != status.Unhealthy || !hasReason(e.Reasons, "probe failing") {
		t.Errorf("withdrawn endpoint: %s; want verdict unhealthy, probe failing", describe(e))
	}

	okBefore := hs[0].Served(http.StatusOK)
	recoveredAt := time.Now()
	hs[0].Set(http.StatusOK)
	e, at = waitEndpoint(ctx, t, n, svc, ids[0], 30*time.Second, isEligible)
	admitTook := at.Sub(recoveredAt)
	successes := hs[0].Served(http.StatusOK) - okBefore
	t.Logf("200 from %s again: re-admitted after %s and %d successful probes: %s", ids[0], admitTook.Round(time.Millisecond), successes, describe(e))
	if admitTook <= withdrawTook {
		t.Errorf("re-admission took %s, withdrawal %s; want re-admission strictly slower", admitTook, withdrawTook)
	}
	if admitTook < admitMin {
		t.Errorf("re-admitted %s after the check passed again; want at least admit_min = %s", admitTook, admitMin)
	}
	if successes < admitAfter {
		t.Errorf("re-admitted after %d successful probes; want at least admit_after = %d", successes, admitAfter)
	}
	// Healthy, unless the re-admitting sample was already older than the
	// freshness window when it was evaluated (a starved machine): then
	// unknown, which is eligible too.
	if e.Verdict == status.Unhealthy || !hasFlag(e.Flags, "slow_start") {
		t.Errorf("re-admitted endpoint: %s; want healthy (or unknown), in slow start", describe(e))
	}
	waitEndpoint(ctx, t, n, svc, ids[0], 10*time.Second, isHealthyEligible)

	out := waitEvent(ctx, t, n, svc, 0, "withdrawal of "+ids[0], withdrawal(ids[0]))
	if out.To != "withdrawn/unhealthy" || !strings.Contains(out.Reason, "probe failing") || out.Evidence == nil || out.Evidence.Class != "probe" {
		t.Errorf("withdrawal event %+v; want -> withdrawn/unhealthy, reason probe failing, probe evidence", out)
	}
	back := waitEvent(ctx, t, n, svc, out.Seq, "re-admission of "+ids[0], readmission(ids[0]))
	if back.To == "eligible/unhealthy" || back.Reason == "" || back.Actor != "evaluator@"+n.ID {
		t.Errorf("re-admission event %+v; want -> eligible/healthy with a reason, by evaluator@%s", back, n.ID)
	}
	if d := back.At.Sub(out.At); d < admitMin {
		t.Errorf("audit trail: re-admitted %s after the withdrawal; want at least admit_min = %s", d, admitMin)
	}
}

// TestHealthGuardDisregardsHealth: three of four instances of a service
// in one zone failing puts the service below min_healthy_fraction (0.5):
// health is disregarded, the view says so, every ready instance is
// served (the failing ones flagged health_disregarded), an event is
// recorded and cairn_health_disregarded_services is 1. When they recover
// health is restored, with its event, and the metric goes back to 0.
func TestHealthGuardDisregardsHealth(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	const svc = "guard"
	applyDefinition(ctx, t, c, healthService(svc, "{type: http, port: http, path: /ready, interval: 1s, timeout: 500ms}",
		"{min_healthy_fraction: 0.5, admit_after: 4, admit_min: 3s, lease_ttl: 10m}"))
	var hs []*statusHandler
	var ids []string
	for i := range 4 {
		h := newStatusHandler()
		b := newBackend(t, h)
		id := fmt.Sprintf("g-%d", i)
		registerLoopback(ctx, t, c, svc, id, b.port, func(r *wire.Registration) { r.Region, r.Zone = "r-1", "z-a" })
		hs, ids = append(hs, h), append(ids, id)
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)
	evs, err := eventsOn(ctx, n, svc)
	if err != nil {
		t.Fatal(err)
	}
	var before uint64
	if len(evs) > 0 {
		before = evs[len(evs)-1].Seq
	}

	failedAt := time.Now()
	for _, h := range hs[:3] {
		h.Set(http.StatusServiceUnavailable)
	}
	Eventually(t, 30*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		d, err := n.Client().Service(cctx, healthNS, svc)
		if err != nil {
			return err
		}
		if !d.View.HealthDisregarded {
			return fmt.Errorf("view health_disregarded=false; endpoints:\n%s", viewLines(d.View))
		}
		for _, e := range d.View.Endpoints {
			failing := e.InstanceID != ids[3]
			switch {
			case !e.Eligible:
				return fmt.Errorf("%s; want every ready instance served while health is disregarded", describe(e))
			case failing && (e.Verdict != status.Unhealthy || !hasFlag(e.Flags, "health_disregarded") || !hasReason(e.Reasons, "health disregarded")):
				return fmt.Errorf("%s; want unhealthy, flagged health_disregarded", describe(e))
			case !failing && e.Verdict != status.Healthy:
				return fmt.Errorf("%s; want healthy", describe(e))
			}
		}
		return nil
	})
	t.Logf("3 of 4 failing: health disregarded after %s", time.Since(failedAt).Round(time.Millisecond))
	// The services list flags the service too (the dashboard shows it).
	Eventually(t, 5*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		ss, err := n.Client().Services(cctx)
		if err != nil {
			return err
		}
		for _, s := range ss {
			if s.Namespace == healthNS && s.Name == svc && s.HealthDisregarded {
				return nil
			}
		}
		return fmt.Errorf("services %+v: want %s/%s flagged health_disregarded", ss, healthNS, svc)
	})
	// GET .../endpoints says the same as the view.
	es, err := endpointsOn(ctx, n, svc)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range ids[:3] {
		if e := es[id]; !e.Eligible || !hasFlag(e.Flags, "health_disregarded") {
			t.Errorf("GET endpoints: %s; want eligible, flagged health_disregarded", describe(e))
		}
	}
	ev := waitEvent(ctx, t, n, svc, before, "health_disregarded", func(e wire.Event) bool { return e.Kind == wire.EventHealthDisregarded })
	if !strings.Contains(ev.Reason, "1 of 4") {
		t.Errorf("health_disregarded event reason %q; want it to say 1 of 4 ready instances are healthy", ev.Reason)
	}
	Eventually(t, 10*time.Second, func() error {
		v, err := n.Metric(ctx, "cairn_health_disregarded_services")
		if err != nil || v != 1 {
			return fmt.Errorf("cairn_health_disregarded_services = %v (%v); want 1", v, err)
		}
		return nil
	})

	restoredAt := time.Now()
	for _, h := range hs[:3] {
		h.Set(http.StatusOK)
	}
	restored := waitEvent(ctx, t, n, svc, ev.Seq, "health_restored", func(e wire.Event) bool { return e.Kind == wire.EventHealthRestored })
	t.Logf("checks pass again: health restored after %s (%q)", time.Since(restoredAt).Round(time.Millisecond), restored.Reason)
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)
	Eventually(t, 10*time.Second, func() error {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		d, err := n.Client().Service(cctx, healthNS, svc)
		if err != nil {
			return err
		}
		if d.View.HealthDisregarded {
			return fmt.Errorf("view still health_disregarded:\n%s", viewLines(d.View))
		}
		for _, e := range d.View.Endpoints {
			if hasFlag(e.Flags, "health_disregarded") {
				return fmt.Errorf("%s; want the flag gone", describe(e))
			}
		}
		v, err := n.Metric(ctx, "cairn_health_disregarded_services")
		if err != nil || v != 0 {
			return fmt.Errorf("cairn_health_disregarded_services = %v (%v); want 0", v, err)
		}
		return nil
	})
}

func viewLines(v wire.View) string {
	var b strings.Builder
	for _, e := range v.Endpoints {
		fmt.Fprintf(&b, "  %s\n", describe(e))
	}
	return b.String()
}

// TestHealthSilentProberLeavesUnknown: a 5-node cluster; the two
// observers of one instance (followers when chosen) are paused with
// SIGSTOP, so their probe results stop; the three others keep a quorum.
// On every live node and at every poll the instance stays eligible; its
// verdict turns unknown once their evidence is stale; after the leader's
// live timeout (5s) the target moves and a probe by a new observer
// arrives, after which it is healthy again.
func TestHealthSilentProberLeavesUnknown(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 5, healthArgs...)
	ctx := ctxT(t, 3*time.Minute)
	const svc = "silent"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}", "{lease_ttl: 10m}"))
	leader, err := c.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var members []string
	for _, n := range c.Nodes {
		members = append(members, n.ID)
	}
	slices.Sort(members)

	// Register instances until one is probed by two followers: its
	// target id has the incarnation the server allocates. Each has a
	// probability of 3/5; 20 tries fail with 10⁻⁸.
	var id string
	var observers []string
	for i := 0; i < 20 && id == ""; i++ {
		b := newBackend(t, nil)
		r := registerLoopback(ctx, t, c, svc, fmt.Sprintf("s-%d", i), b.port, nil)
		obs := probe.Assign(health.TargetID(r.Key(), r.Incarnation), members, 2)
		if !slices.Contains(obs, leader.ID) {
			id, observers = r.ID, obs
		}
	}
	if id == "" {
		t.Fatalf("no instance of 20 is probed by two followers (leader %s)", leader.ID)
	}
	slices.Sort(observers)
	t.Logf("%s is probed by %v; the leader is %s", id, observers, leader.ID)
	// Healthy on every node, on the evidence of exactly the two assigned
	// observers, as the evaluating leader (whichever node it is by now)
	// holds it.
	waitAllHealthy(ctx, t, c.Nodes, svc, id)
	Eventually(t, 30*time.Second, func() error {
		e, n, err := evaluatedEndpoint(ctx, c.Live(), svc, id)
		if err != nil {
			return err
		}
		if err := isHealthyEligible(e); err != nil {
			return fmt.Errorf("%s: %s: %v", n.ID, describe(e), err)
		}
		var got []string
		for _, ev := range e.Evidence {
			if ev.Class == "probe" && ev.OK {
				got = append(got, ev.Observer)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, observers) {
			return fmt.Errorf("%s: passing probes by %v (evidence %+v); want by %v", n.ID, got, e.Evidence, observers)
		}
		return nil
	})

	var paused, live []*Node
	for _, n := range c.Nodes {
		if !slices.Contains(observers, n.ID) {
			live = append(live, n)
			continue
		}
		if err := n.Pause(); err != nil {
			t.Fatal(err)
		}
		paused = append(paused, n)
		t.Cleanup(func() { n.Resume() })
	}
	pausedAt := time.Now()
	since := func() time.Duration { return time.Since(pausedAt).Round(time.Millisecond) }
	t.Logf("paused %v (SIGSTOP)", observers)

	// Watch for 15s, and on (at most 45s) until the verdict has been
	// unknown and a node that is not paused has probed the target: it
	// must be eligible on every live node at every poll.
	const watch, watchMax = 15 * time.Second, 45 * time.Second
	var unknownAt, movedAt time.Time
	var unknown wire.Endpoint
	var moved wire.ClassEvidence
	var movedOn *Node
	answers, failures := 0, 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for time.Since(pausedAt) < watch || (unknownAt.IsZero() || movedAt.IsZero()) && time.Since(pausedAt) < watchMax {
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
		for _, n := range live {
			e, err := endpointOn(ctx, n, svc, id)
			if err != nil {
				if failures++; failures <= 5 {
					t.Logf("%s after the pause: %v", since(), err)
				}
				continue
			}
			answers++
			if !e.Eligible {
				t.Fatalf("%s %s after pausing its observers: %s; silence must leave it eligible", n.ID, since(), describe(e))
			}
			// A node's verdict comes from its status table, rebuilt every
			// second, its reasons from its store replica: just after a
			// commit the two can disagree. Silence says so in its reason.
			if e.Verdict == status.Unknown && unknownAt.IsZero() && hasReason(e.Reasons, "no fresh evidence") {
				unknownAt, unknown = time.Now(), e
			}
			if movedAt.IsZero() {
				for _, ev := range e.Evidence {
					if ev.Class == "probe" && !slices.Contains(observers, ev.Observer) && ev.At.After(pausedAt) {
						movedAt, moved, movedOn = time.Now(), ev, n
						break
					}
				}
			}
		}
	}
	t.Logf("%d answers from %d live nodes over %s, eligible in every one (%d requests failed)", answers, len(live), since(), failures)
	if answers < 3*int(watch/time.Second) {
		t.Errorf("only %d answers over %s", answers, since())
	}
	if unknownAt.IsZero() {
		t.Errorf("the verdict never became unknown (no fresh evidence) while both observers were paused")
	} else {
		t.Logf("unknown %s after the pause: %s", unknownAt.Sub(pausedAt).Round(time.Millisecond), describe(unknown))
	}
	if movedAt.IsZero() {
		t.Errorf("no probe from a new observer within %s of the pause", watchMax)
	} else {
		t.Logf("first probe by new observer %s seen on %s %s after the pause: %+v", moved.Observer, movedOn.ID, movedAt.Sub(pausedAt).Round(time.Millisecond), moved)
		if d := movedAt.Sub(pausedAt); d < health.DefaultLiveTimeout {
			t.Errorf("a new observer reported %s after the pause; the target should move only after the live timeout %s", d, health.DefaultLiveTimeout)
		}
	}
	// With a live observer again, the verdict is healthy.
	Eventually(t, 15*time.Second, func() error {
		e, n, err := evaluatedEndpoint(ctx, live, svc, id)
		if err != nil {
			return err
		}
		if err := isHealthyEligible(e); err != nil {
			return fmt.Errorf("%s: %s: %v", n.ID, describe(e), err)
		}
		return nil
	})
	for _, n := range paused {
		if err := n.Resume(); err != nil {
			t.Fatal(err)
		}
	}
}

// evaluatedEndpoint returns an instance's endpoint as the evaluating
// leader among nodes serves it, with the evidence it holds (a follower's
// answer has none), and that node.
func evaluatedEndpoint(ctx context.Context, nodes []*Node, svc, id string) (wire.Endpoint, *Node, error) {
	var errs []string
	for _, n := range nodes {
		e, err := endpointOn(ctx, n, svc, id)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if e.Evidence != nil {
			return e, n, nil
		}
		errs = append(errs, fmt.Sprintf("%s: no evidence (not the evaluating leader, or it holds none): %s", n.ID, describe(e)))
	}
	return wire.Endpoint{}, nil, fmt.Errorf("no node serves %s with evidence: %s", id, strings.Join(errs, "; "))
}

// TestHealthRedirectNotFollowed: an HTTP check answered with a 302 to
// another listener passes (3xx passes) and the redirect is not followed:
// the second listener, which would fail the check, sees no request.
func TestHealthRedirectNotFollowed(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	n := c.Nodes[0]
	ctx := ctxT(t, time.Minute)
	const svc = "redirect"
	landing := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	redirect := newBackend(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "http://"+landing.addr+"/elsewhere", http.StatusFound)
	}))
	applyDefinition(ctx, t, c, healthService(svc, "{type: http, port: http, path: /ready, interval: 1s, timeout: 500ms}", "{lease_ttl: 10m}"))
	registerLoopback(ctx, t, c, svc, "x-0", redirect.port, nil)

	e, _ := waitEndpoint(ctx, t, n, svc, "x-0", 30*time.Second, func(e wire.Endpoint) error {
		if err := isHealthyEligible(e); err != nil {
			return err
		}
		if hasFlag(e.Flags, "health_disregarded") {
			return fmt.Errorf("served only because health is disregarded")
		}
		if i := slices.IndexFunc(e.Evidence, func(ev wire.ClassEvidence) bool { return ev.Class == "probe" }); i < 0 || !e.Evidence[i].OK || e.Evidence[i].Detail != "status 302" {
			return fmt.Errorf("evidence %+v; want a passing probe answered 302", e.Evidence)
		}
		if h := redirect.hits.Load(); h < 3 {
			return fmt.Errorf("%d probes so far; want 3", h)
		}
		return nil
	})
	t.Logf("after %d probes answered 302: %s, evidence %+v", redirect.hits.Load(), describe(e), e.Evidence)
	if h := landing.hits.Load(); h != 0 {
		t.Errorf("the redirect's target got %d requests; want 0 (redirects are not followed)", h)
	}
}

// TestHealthFailoverKeepsWithdrawn: in a 3-node cluster, one of four
// instances is withdrawn (its listener closed), then the leader is
// killed with SIGKILL. On the surviving nodes the instance is never
// eligible while a new leader takes over and evaluates; once its
// listener is open again (same port) it is re-admitted by a surviving
// node's evaluator, no sooner than admit_min.
func TestHealthFailoverKeepsWithdrawn(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 3, healthArgs...)
	ctx := ctxT(t, 2*time.Minute)
	const (
		svc      = "failover"
		admitMin = 3 * time.Second
	)
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}",
		fmt.Sprintf("{admit_after: 5, admit_min: %s, lease_ttl: 10m}", admitMin)))
	bs, ids := loopbackFleet(ctx, t, c, svc, "f", 4, nil)
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)

	closedAt := time.Now()
	bs[0].Close()
	for _, n := range c.Nodes {
		waitEndpoint(ctx, t, n, svc, ids[0], 15*time.Second, isWithdrawn)
	}
	t.Logf("%s withdrawn on every node %s after its listener closed", ids[0], time.Since(closedAt).Round(time.Millisecond))

	old, err := c.WaitLeader(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var survivors []*Node
	for _, n := range c.Nodes {
		if n != old {
			survivors = append(survivors, n)
		}
	}
	evaluations := func() float64 {
		sum := 0.0
		for _, n := range survivors {
			v, err := n.Metric(ctx, "cairn_health_evaluations_total")
			if err != nil {
				t.Fatal(err)
			}
			sum += v
		}
		return sum
	}
	evalsBefore := evaluations()
	killedAt := time.Now()
	if err := old.Kill(); err != nil {
		t.Fatal(err)
	}
	since := func() time.Duration { return time.Since(killedAt).Round(time.Millisecond) }
	// Watch the survivors for at least 5s, and for at least 4s after one
	// of them answers as the evaluating leader (it lists evidence), so
	// that the new leader evaluates a few times.
	var leadingAt time.Time
	var leading *Node
	answers := map[string]int{}
	failures := 0
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	// On a starved machine the new leader evaluates less often than
	// every second: watch until it has evaluated three times, too.
	evals, lastScrape := 0.0, time.Time{}
	for time.Since(killedAt) < 5*time.Second || leadingAt.IsZero() || time.Since(leadingAt) < 4*time.Second || evals < 3 {
		if time.Since(killedAt) > 30*time.Second {
			t.Fatalf("no survivor evaluates as leader three times 30s after %s was killed (answers: %v, evaluations %v)", old.ID, answers, evals)
		}
		if time.Since(lastScrape) >= time.Second {
			evals, lastScrape = evaluations()-evalsBefore, time.Now()
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-tick.C:
		}
		for _, n := range survivors {
			e, err := endpointOn(ctx, n, svc, ids[0])
			if err != nil {
				if failures++; failures <= 5 {
					t.Logf("%s after the kill: %v", since(), err)
				}
				continue
			}
			answers[n.ID]++
			if e.Eligible {
				t.Fatalf("%s %s after leader %s was killed: %s; a failover must not re-admit a withdrawn instance",
					n.ID, since(), old.ID, describe(e))
			}
			if e.Evidence != nil && leadingAt.IsZero() {
				leadingAt, leading = time.Now(), n
			}
		}
	}
	evals = evaluations() - evalsBefore
	t.Logf("killed leader %s; %s evaluates %s later; %s withdrawn on %s and %s at every poll for %s (answers %v; %v evaluations on the survivors)",
		old.ID, leading.ID, leadingAt.Sub(killedAt).Round(time.Millisecond), ids[0], survivors[0].ID, survivors[1].ID,
		since(), answers, evals)
	for _, n := range survivors {
		if answers[n.ID] < 20 {
			t.Errorf("%s answered %d polls after the kill; want at least 20", n.ID, answers[n.ID])
		}
	}
	if evals < 3 {
		t.Errorf("the survivors ran %v evaluations after the kill; want at least 3 while the instance stayed withdrawn", evals)
	}

	reopenedAt := time.Now()
	bs[0].Open(t)
	e, at := waitEndpoint(ctx, t, leading, svc, ids[0], 45*time.Second, isEligible)
	took := at.Sub(reopenedAt)
	t.Logf("listener of %s open again: re-admitted (as %s serves it) after %s: %s", ids[0], leading.ID, took.Round(time.Millisecond), describe(e))
	if took < admitMin {
		t.Errorf("re-admitted %s after the listener reopened; want at least admit_min = %s", took, admitMin)
	}
	for _, n := range survivors {
		waitEndpoint(ctx, t, n, svc, ids[0], 15*time.Second, isHealthyEligible)
	}
	back := waitEvent(ctx, t, leading, svc, 0, "re-admission of "+ids[0], func(e wire.Event) bool {
		return readmission(ids[0])(e) && e.At.After(killedAt)
	})
	if back.Actor != "evaluator@"+survivors[0].ID && back.Actor != "evaluator@"+survivors[1].ID {
		t.Errorf("re-admission event by %q; want a surviving node's evaluator", back.Actor)
	}
}

// TestHealthCallerOutcomes: failures that callers report for an endpoint
// they were served withdraw it, with an outcome reason, even though its
// probes pass; outcomes for an endpoint never served (a starting
// instance) or of another incarnation are discarded and counted by
// reason.
func TestHealthCallerOutcomes(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	// Callers are told apart by their tokens: ACLs on, two readers.
	const admin, callerA, callerB = "admin-0123456789abcdefghijklmn", "caller-a-0123456789abcdefghijk", "caller-b-0123456789abcdefghijk"
	aclFile := filepath.Join(t.TempDir(), "acl.yaml")
	if err := os.WriteFile(aclFile, []byte(fmt.Sprintf("tokens:\n- {secret: %s, scope: admin}\n- {secret: %s, scope: reader, namespaces: [%s]}\n- {secret: %s, scope: reader, namespaces: [%s]}\n",
		admin, callerA, healthNS, callerB, healthNS)), 0o600); err != nil {
		t.Fatal(err)
	}
	c := StartClusterAs(t, admin, 1, append(slices.Clone(healthArgs), "--acl-file", aclFile)...)
	n := c.Nodes[0]
	callers := map[string]*client.Client{}
	for name, secret := range map[string]string{"a": callerA, "b": callerB} {
		cl, err := client.New(n.HTTPAddr, secret)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		callers[name] = cl
	}
	ctx := ctxT(t, time.Minute)
	const svc = "outcomes"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}", "{withdraw_after: 3, lease_ttl: 10m}"))
	regs := map[string]wire.Registered{}
	var ids []string
	for i := range 4 {
		b := newBackend(t, nil)
		id := fmt.Sprintf("o-%d", i)
		regs[id] = registerLoopback(ctx, t, c, svc, id, b.port, nil)
		ids = append(ids, id)
	}
	sb := newBackend(t, nil)
	starting := registerLoopback(ctx, t, c, svc, "o-starting", sb.port, func(r *wire.Registration) { r.Lifecycle = "starting" })
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)
	if e, err := endpointOn(ctx, n, svc, starting.ID); err != nil || e.Eligible || e.Lifecycle != status.Starting {
		t.Fatalf("starting instance: %s (%v); want it starting, not eligible", describe(e), err)
	}

	postAs := func(caller string, eps ...wire.EndpointOutcome) wire.OutcomeReply {
		t.Helper()
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		r, err := callers[caller].Outcomes(cctx, wire.OutcomeReport{Endpoints: eps})
		if err != nil {
			t.Fatalf("POST /v1/outcomes: %v", err)
		}
		return r
	}
	outcome := func(r wire.Registered, inc uint64, ok, failed int) wire.EndpointOutcome {
		return wire.EndpointOutcome{Namespace: healthNS, Service: svc, Instance: r.ID, Incarnation: inc, Success: ok, Failure: failed}
	}

	post := func(eps ...wire.EndpointOutcome) wire.OutcomeReply { t.Helper(); return postAs("a", eps...) }
	// Never served, or another incarnation: discarded, by reason.
	r := post(outcome(starting, starting.Incarnation, 0, 10), outcome(regs["o-1"], regs["o-1"].Incarnation+1, 0, 10))
	if r.Accepted != 0 || r.Discarded["not_served"] != 1 || r.Discarded["stale_incarnation"] != 1 {
		t.Errorf("outcomes for a starting instance and a wrong incarnation: %+v; want accepted 0, discarded not_served 1, stale_incarnation 1", r)
	}
	// A served endpoint whose probes pass: one caller's windows of mostly
	// failed calls lower its weight and nothing else (local evidence
	// stays local).
	target := regs["o-0"]
	window := func(caller string) {
		t.Helper()
		if r := postAs(caller, outcome(target, target.Incarnation, 1, 9)); r.Accepted != 1 || len(r.Discarded) != 0 {
			t.Fatalf("outcome window from %s for served %s: %+v; want accepted 1", caller, target.ID, r)
		}
	}
	for range 4 {
		window("a")
		time.Sleep(time.Second) // one window per evaluation round: the caller's cadence, not a wait for a condition
	}
	e, _ := waitEndpoint(ctx, t, n, svc, target.ID, 15*time.Second, func(e wire.Endpoint) error {
		if !e.Eligible || e.Verdict != status.Degraded || !hasFlag(e.Flags, "outcome_degraded") {
			return fmt.Errorf("want eligible, degraded, outcome_degraded")
		}
		return nil
	})
	if !hasReason(e.Reasons, "short of the quorum") {
		t.Errorf("one caller's failures: %s; want the quorum named in the reasons", describe(e))
	}
	if evs, err := eventsOn(ctx, n, svc); err != nil || slices.ContainsFunc(evs, withdrawal(target.ID)) {
		t.Fatalf("one caller withdrew %s (%v):\n%s", target.ID, err, eventLines(evs))
	}
	// A second caller makes the quorum: withdraw_after windows withdraw it.
	postedAt := time.Now()
	for range 3 {
		window("a")
		window("b")
		time.Sleep(time.Second) // the callers' cadence
	}
	e, at := waitEndpoint(ctx, t, n, svc, target.ID, 15*time.Second, isWithdrawn)
	t.Logf("3 failed outcome windows of two callers for %s: withdrawn after %s: %s", target.ID, at.Sub(postedAt).Round(time.Millisecond), describe(e))
	e = withdrawnVerdict(ctx, t, n, svc, target.ID)
	if e.Verdict != status.Unhealthy || !hasReason(e.Reasons, "outcome") {
		t.Errorf("withdrawn endpoint: %s; want unhealthy for its outcomes", describe(e))
	}
	if ev := e.VerdictEvidence; ev == nil || ev.Class != "outcome" {
		t.Errorf("verdict evidence %+v; want class outcome", e.VerdictEvidence)
	}
	if !slices.ContainsFunc(e.Evidence, func(ev wire.ClassEvidence) bool { return ev.Class == "outcome" && !ev.OK }) {
		t.Errorf("evidence %+v; want the failing outcome window", e.Evidence)
	}
	ev := waitEvent(ctx, t, n, svc, 0, "withdrawal of "+target.ID, withdrawal(target.ID))
	if !strings.Contains(ev.Reason, "outcome") || ev.Evidence == nil || ev.Evidence.Class != "outcome" {
		t.Errorf("withdrawal event %+v; want an outcome reason and outcome evidence", ev)
	}
	// The starting instance got nothing from its discarded outcomes, and
	// the other instances are untouched.
	es, err := endpointsOn(ctx, n, svc)
	if err != nil {
		t.Fatal(err)
	}
	if e := es[starting.ID]; e.Verdict == status.Unhealthy || hasReason(e.Reasons, "outcome") {
		t.Errorf("starting instance: %s; its discarded outcomes must not count", describe(e))
	}
	for _, id := range ids[1:] {
		if e := es[id]; !e.Eligible || e.Verdict != status.Healthy {
			t.Errorf("%s; want eligible and healthy", describe(e))
		}
	}
}

// TestHealthSelfReport: `cairn report --ready=false` withdraws an
// instance whose probes pass (reason self-report), and `--ready=true`
// re-admits it; `cairn --output json endpoints` shows both.
func TestHealthSelfReport(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	n := c.Nodes[0]
	ctx := ctxT(t, time.Minute)
	const svc = "report"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}", "{lease_ttl: 10m}"))
	var ids []string
	var target wire.Registered
	for i := range 4 {
		b := newBackend(t, nil)
		id := fmt.Sprintf("r-%d", i)
		r := registerLoopback(ctx, t, c, svc, id, b.port, nil)
		if i == 0 {
			target = r
		}
		ids = append(ids, id)
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)
	report := func(ready bool) {
		runCLI(ctx, t, n, "report", "--instance", target.ID, "--incarnation", strconv.FormatUint(target.Incarnation, 10),
			"--ready="+strconv.FormatBool(ready), healthNS+"/"+svc)
	}
	cliEndpoint := func() map[string]any {
		var es []map[string]any
		out := runCLI(ctx, t, n, "--output", "json", "endpoints", healthNS+"/"+svc)
		if err := json.Unmarshal(out, &es); err != nil {
			t.Fatalf("cairn --output json endpoints: %v\n%s", err, out)
		}
		for _, e := range es {
			if e["instance_id"] == target.ID {
				for _, f := range []string{"incarnation", "addresses", "zone", "lifecycle", "verdict", "eligible", "weight", "flags", "reasons"} {
					if _, ok := e[f]; !ok {
						t.Errorf("cairn --output json endpoints: %s lacks %q: %v", target.ID, f, e)
					}
				}
				return e
			}
		}
		t.Fatalf("cairn --output json endpoints does not list %s:\n%s", target.ID, out)
		return nil
	}

	reportedAt := time.Now()
	report(false)
	e, at := waitEndpoint(ctx, t, n, svc, target.ID, 15*time.Second, isWithdrawn)
	t.Logf("reported not ready: withdrawn after %s: %s", at.Sub(reportedAt).Round(time.Millisecond), describe(e))
	e = withdrawnVerdict(ctx, t, n, svc, target.ID)
	if e.Verdict != status.Unhealthy || !hasReason(e.Reasons, "self-report") {
		t.Errorf("withdrawn endpoint: %s; want unhealthy, reason self-report", describe(e))
	}
	if ev := e.VerdictEvidence; ev == nil || ev.Class != "report" || ev.Observer != target.ID {
		t.Errorf("verdict evidence %+v; want the instance's own report", e.VerdictEvidence)
	}
	if got := cliEndpoint(); got["eligible"] != false || got["verdict"] != "unhealthy" {
		t.Errorf("cairn endpoints after --ready=false: eligible %v verdict %v; want false, unhealthy", got["eligible"], got["verdict"])
	}
	out := waitEvent(ctx, t, n, svc, 0, "withdrawal of "+target.ID, withdrawal(target.ID))
	if !strings.Contains(out.Reason, "self-report") || out.Evidence == nil || out.Evidence.Class != "report" {
		t.Errorf("withdrawal event %+v; want reason self-report, report evidence", out)
	}

	reportedAt = time.Now()
	report(true)
	e, at = waitEndpoint(ctx, t, n, svc, target.ID, 15*time.Second, isEligible)
	t.Logf("reported ready: re-admitted after %s: %s", at.Sub(reportedAt).Round(time.Millisecond), describe(e))
	if e.Verdict != status.Healthy || hasReason(e.Reasons, "self-report") {
		t.Errorf("re-admitted endpoint: %s; want healthy, no self-report reason", describe(e))
	}
	if got := cliEndpoint(); got["eligible"] != true || got["verdict"] != "healthy" {
		t.Errorf("cairn endpoints after --ready=true: eligible %v verdict %v; want true, healthy", got["eligible"], got["verdict"])
	}
	waitEvent(ctx, t, n, svc, out.Seq, "re-admission of "+target.ID, readmission(target.ID))
}
