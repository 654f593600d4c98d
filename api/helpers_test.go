package api_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/api"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/internal/addrpolicy"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

const (
	// ownHost is the test node's recorded HTTP host: one of "the
	// servers' own addresses" the address policy refuses. It is not
	// loopback, so that the own-address rule is what refuses it.
	ownHost = "10.255.0.1"
	// pciNS is a namespace whose endpoints must fall in pciCIDR.
	pciNS   = "pci"
	pciCIDR = "10.50.0.0/16"
)

// Service definitions the tests apply. drain_window is long so that no
// drain ends (and changes the state) while a test runs.
const (
	webYAML = `namespace: shop
name: web
ports: [{name: http, number: 8080, protocol: tcp}, {name: admin, number: 9090}]
capability: {readiness: self, dependencies: [{name: db, shared: true}]}
check: {type: http, port: http, path: /ready, interval: 2s, timeout: 1s}
policy: {lease_ttl: 30s, drain_window: 1h}
`
	cartYAML = `namespace: shop
name: cart
ports: [{name: http, number: 8080}]
policy: {drain_window: 1h}
`
	otherYAML = `namespace: other
name: web
ports: [{name: http, number: 8080}]
policy: {drain_window: 1h}
`
	pciYAML = `namespace: pci
name: vault
ports: [{name: http, number: 8080}]
policy: {drain_window: 1h}
`
)

// options configure one test API server.
type options struct {
	acl           acl.Config
	dev           bool
	maxBody       int64
	auditRefusals int
	now           func() time.Time
	ready         func() error
	noMetrics     bool
	ui            http.Handler
	xdsSummary    func() wire.XDSSummary
	grpcAddr      string
	// region and zone are the node's locality (api.Config).
	region, zone string
	// health runs a health.Node (no prober) that the test drives with
	// env.tick, on clock when set.
	health bool
	clock  *clock
	// storeClock gives the store clock's time too (registration times,
	// leases); by default it runs on the real clock.
	storeClock bool
	// restore is the table kept on disk the evaluator starts serving.
	restore *tablefile.Snapshot
	// replay and timeline are api.Config.Replay and Timeline.
	replay   func(wire.ReplayQuery) (*wire.Replay, error)
	timeline func(ns, svc string, from, to time.Time) (*wire.ServiceHistory, error)
	// peers are other regions' instances in the table (with health),
	// and peerRegions what GET /v1/regions reports of them.
	peers       publish.Peers
	peerRegions func() []wire.PeerRegion
}

// env is one API server, over a real HTTP listener, in front of a real
// single-node in-memory store.
type env struct {
	node *storetest.Node
	url  string
	hc   *http.Client
	logs *syncBuffer
	reg  *prometheus.Registry
	// health is the node's evaluator when options.health is set, and
	// table the status table it publishes.
	health *health.Node
	table  *status.Publisher
}

// syncBuffer collects log output; slog and the test read it concurrently.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// tlog shows log lines with t.Log, so that they appear when a test fails.
type tlog struct{ t testing.TB }

func (w tlog) Write(p []byte) (int, error) { w.t.Log(strings.TrimSpace(string(p))); return len(p), nil }

// testLogger logs to buf (when not nil) and to t.Log.
func testLogger(t testing.TB, buf io.Writer) *slog.Logger {
	var w io.Writer = tlog{t}
	if buf != nil {
		w = io.MultiWriter(buf, w)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// ownAddrs returns the hosts of every member's raft and HTTP addresses,
// as `cairn server` does.
func ownAddrs(st *store.Store) func() []netip.Addr {
	return func() []netip.Addr {
		ms, _ := st.Members()
		var out []netip.Addr
		for _, m := range ms {
			for _, hp := range []string{m.HTTPAddr, m.RaftAddr} {
				if ap, err := netip.ParseAddrPort(hp); err == nil {
					out = append(out, ap.Addr().Unmap())
				}
			}
		}
		return out
	}
}

func policyFor(st *store.Store, dev bool) *addrpolicy.Policy {
	return addrpolicy.New(addrpolicy.Config{
		AllowLoopback: dev,
		Permitted:     map[string][]netip.Prefix{pciNS: {netip.MustParsePrefix(pciCIDR)}},
		Own:           ownAddrs(st),
	})
}

func newEnv(t *testing.T, o options) *env {
	t.Helper()
	logs := &syncBuffer{}
	logger := testLogger(t, logs)
	reg := prometheus.NewRegistry()
	scfg := store.Config{HTTPAddr: net.JoinHostPort(ownHost, "8480"), Logger: logger, Registerer: reg}
	if o.storeClock {
		scfg.Now = o.clock.Now
	}
	node := storetest.Single(t, scfg)
	// The new leader records its own address right after it is ready;
	// wait for that so that the revision holds still from here on.
	storetest.WaitFor(t, 10*time.Second, func() error {
		if _, addr := node.Leader(); addr == "" {
			return errors.New("the leader's HTTP address is not recorded yet")
		}
		return nil
	})
	authz, err := acl.New(o.acl)
	if err != nil {
		t.Fatalf("acl.New: %v", err)
	}
	cfg := api.Config{Store: node.Store, ACL: authz, Addrs: policyFor(node.Store, o.dev),
		MaxBodyBytes: o.maxBody, AuditRefusals: o.auditRefusals, Ready: o.ready,
		Registerer: reg, Logger: logger, Now: o.now, UI: o.ui, XDSSummary: o.xdsSummary, GRPCAddr: o.grpcAddr,
		Region: o.region, Zone: o.zone, Replay: o.replay, Timeline: o.timeline, Peers: o.peerRegions}
	if !o.noMetrics {
		cfg.Gatherer = reg
	}
	var (
		hn  *health.Node
		tbl *status.Publisher
	)
	if o.health {
		tbl, err = status.New(status.Config{Capacity: 64})
		if err != nil {
			t.Fatal(err)
		}
		pc := publish.Config{Store: node.Store, Table: tbl, Logger: logger, Registerer: reg, Restore: o.restore, Peers: o.peers}
		hc := health.Config{Store: node.Store, Logger: logger, Registerer: reg}
		if o.clock != nil {
			pc.Now, hc.Now = o.clock.Now, o.clock.Now
		}
		if hc.Publish, err = publish.New(pc); err != nil {
			t.Fatal(err)
		}
		if hn, err = health.New(hc); err != nil {
			t.Fatal(err)
		}
		cfg.Health, cfg.Publish, cfg.Table = hn, hc.Publish, tbl
	}
	a, err := api.New(cfg)
	if err != nil {
		t.Fatalf("api.New: %v", err)
	}
	srv := httptest.NewServer(a)
	tr := &http.Transport{}
	t.Cleanup(func() {
		tr.CloseIdleConnections()
		srv.Close()
	})
	return &env{node: node, url: srv.URL, hc: &http.Client{Transport: tr, Timeout: 20 * time.Second}, logs: logs, reg: reg, health: hn, table: tbl}
}

// tick runs one round of the health loop: evaluate, commit, publish.
func (e *env) tick(t *testing.T) {
	t.Helper()
	e.health.Tick(t.Context())
}

// client returns the Go client for e with token.
func (e *env) client(t *testing.T, token string) *client.Client {
	t.Helper()
	c, err := client.New(e.url, token)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// reply is one raw HTTP answer.
type reply struct {
	Method, Path string
	Status       int
	Header       http.Header
	Body         []byte
}

func (r reply) String() string {
	var b bytes.Buffer
	if json.Compact(&b, r.Body) != nil {
		b.Reset()
		b.Write(bytes.TrimSpace(r.Body))
	}
	return fmt.Sprintf("%s %s: %d %s", r.Method, r.Path, r.Status, b.Bytes())
}

// request sends body to path with the headers given.
func (e *env) request(t *testing.T, method, path string, hdr map[string]string, body string) reply {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, e.url+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		ct := "application/json"
		if !strings.HasPrefix(strings.TrimSpace(body), "{") && !strings.HasPrefix(strings.TrimSpace(body), "[") {
			ct = "application/yaml"
		}
		req.Header.Set("Content-Type", ct)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the answer: %v", method, path, err)
	}
	return reply{Method: method, Path: path, Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// call sends body with token as the bearer token ("" sends none).
func (e *env) call(t *testing.T, method, path, token, body string) reply {
	t.Helper()
	hdr := map[string]string{}
	if token != "" {
		hdr["Authorization"] = "Bearer " + token
	}
	return e.request(t, method, path, hdr, body)
}

func wantStatus(t *testing.T, r reply, status int) {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s; want status %d", r, status)
	}
}

// wantError checks an error answer: the status, the JSON body with
// exactly "error" and "code", and that the message mentions each of
// mentions (the field at fault).
func wantError(t *testing.T, r reply, status int, code string, mentions ...string) wire.Error {
	t.Helper()
	if r.Status != status {
		t.Fatalf("%s; want status %d (%s)", r, status, code)
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("%s: Content-Type %q, want application/json", r, ct)
	}
	var e wire.Error
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("%s: the body is not {\"error\", \"code\"}: %v", r, err)
	}
	if e.Code != code {
		t.Errorf("%s: code %q, want %q", r, e.Code, code)
	}
	if e.Error == "" {
		t.Errorf("%s: empty error message", r)
	}
	for _, m := range mentions {
		if !strings.Contains(e.Error, m) {
			t.Errorf("%s: message %q does not mention %q", r, e.Error, m)
		}
	}
	return e
}

// decodeAs decodes a successful answer.
func decodeAs[T any](t *testing.T, r reply) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Body, &v); err != nil {
		t.Fatalf("%s: decoding as %T: %v", r, v, err)
	}
	return v
}

// apply applies YAML definitions with token and wants 200.
func (e *env) apply(t *testing.T, token string, yamls ...string) {
	t.Helper()
	r := e.call(t, http.MethodPost, "/v1/apply", token, strings.Join(yamls, "---\n"))
	wantStatus(t, r, http.StatusOK)
}

func svcPath(ns, svc string) string { return "/v1/services/" + ns + "/" + svc }

func instPath(ns, svc, id, verb string) string {
	return svcPath(ns, svc) + "/instances/" + id + "/" + verb
}

// regJSON is a registration body with the http port.
func regJSON(id string, addrs ...string) string {
	return mustJSON(map[string]any{"instance_id": id, "addresses": addrs, "ports": map[string]int{"http": 8080}})
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// register registers id in ns/svc with token and wants 201 or 200.
func (e *env) register(t *testing.T, token, ns, svc, id string, addrs ...string) wire.Registered {
	t.Helper()
	r := e.call(t, http.MethodPost, svcPath(ns, svc)+"/instances", token, regJSON(id, addrs...))
	if r.Status != http.StatusCreated && r.Status != http.StatusOK {
		t.Fatalf("%s; want 201 or 200", r)
	}
	return decodeAs[wire.Registered](t, r)
}

func incBody(inc uint64) string { return fmt.Sprintf(`{"incarnation": %d}`, inc) }

// instance returns one instance from the store.
func (e *env) instance(t *testing.T, ns, svc, id string) wire.Instance {
	t.Helper()
	in, ok := e.node.Instance(wire.InstanceKey{Namespace: ns, Service: svc, ID: id})
	if !ok {
		t.Fatalf("instance %s/%s/%s is not in the store", ns, svc, id)
	}
	return in
}

// snapshot is everything a refused request must leave as it was.
type snapshot struct {
	Revision  uint64
	Services  []wire.Service
	Instances []wire.Instance
	Events    []wire.Event
	Members   []wire.Member
}

func (e *env) snapshot(t *testing.T) snapshot {
	t.Helper()
	s := snapshot{Revision: e.node.Revision(), Services: e.node.Services(), Events: e.node.Events("", "", 0)}
	for _, svc := range s.Services {
		s.Instances = append(s.Instances, e.node.Instances(svc.Namespace, svc.Name)...)
	}
	ms, err := e.node.Members()
	if err != nil {
		t.Fatal(err)
	}
	s.Members = ms
	return s
}

// wantUnchanged fails unless the store is exactly as before.
func (e *env) wantUnchanged(t *testing.T, before snapshot, after string) {
	t.Helper()
	now := e.snapshot(t)
	if !reflect.DeepEqual(before, now) {
		b, _ := json.Marshal(before)
		n, _ := json.Marshal(now)
		t.Fatalf("after %s the store changed:\nbefore %s\nnow %s", after, b, n)
	}
}

// wantDataUnchanged is wantUnchanged for services and instances only: a
// refusal written to the audit trail moves the revision and adds an event.
func (e *env) wantDataUnchanged(t *testing.T, before snapshot, after string) {
	t.Helper()
	now := e.snapshot(t)
	if !reflect.DeepEqual(before.Services, now.Services) || !reflect.DeepEqual(before.Instances, now.Instances) {
		b, _ := json.MarshalIndent(before.Instances, "", " ")
		n, _ := json.MarshalIndent(now.Instances, "", " ")
		t.Fatalf("after %s the services or instances changed:\nbefore %s\nnow %s", after, b, n)
	}
}

// metric returns the value of the sample of name whose labels include
// labels, or 0.
func (e *env) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	return metricValue(t, e.reg, name, labels)
}

func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == k && lp.GetValue() == v
				}
				if !found {
					continue metrics
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}
