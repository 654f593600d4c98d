package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestMain checks that no test leaves a goroutine behind: every Node.Run,
// prober and store is stopped when its test ends.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

// clock is the injected clock of the tests that drive Node.Tick by hand.
// The store of a single-node harness shares it, so that registration
// times, lease deadlines and the evaluator's now agree.
type clock = storetest.Clock

func newClock() *clock { return storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

// harness is one Node over a real store replica, with its own status
// table and metrics registry.
type harness struct {
	t   *testing.T
	clk *clock
	st  *storetest.Node
	pub *status.Publisher
	reg *prometheus.Registry
	n   *Node
}

// newHarness starts a single-node store on clk (nil: a fresh clock) and a
// Node on it with a table of capacity slots (0: 64). mod may change the
// Node's Config.
func newHarness(t *testing.T, clk *clock, capacity int, mod func(*Config)) *harness {
	t.Helper()
	return newHarnessWith(t, clk, capacity, mod, nil)
}

// newHarnessWith is newHarness with pmod, if set, changing the
// publisher's Config (see newNodeWith).
func newHarnessWith(t *testing.T, clk *clock, capacity int, mod func(*Config), pmod func(*publish.Config)) *harness {
	t.Helper()
	if clk == nil {
		clk = newClock()
	}
	st := storetest.Single(t, store.Config{Now: clk.Now})
	// The new leader records its own addresses just after it is ready;
	// wait for that, so that the revision holds still from here on.
	storetest.WaitFor(t, wait, func() error {
		if _, addr := st.Leader(); addr == "" {
			return errors.New("the leader's HTTP address is not recorded yet")
		}
		return nil
	})
	h := &harness{t: t, clk: clk, st: st}
	h.n = newNodeWith(t, st.Store, clk, capacity, mod, pmod)
	h.pub, h.reg = h.n.pub.Table(), h.n.cfg.Registerer.(*prometheus.Registry)
	return h
}

// newNode returns a Node on s with a table of capacity slots (0: 64), a
// fresh registry, and clk (nil: the real clock).
func newNode(t *testing.T, s *store.Store, clk *clock, capacity int, mod func(*Config)) *Node {
	t.Helper()
	return newNodeWith(t, s, clk, capacity, mod, nil)
}

// newNodeWith is newNode with pmod, if set, changing the publisher's
// Config, which takes the Node's Slice first.
func newNodeWith(t *testing.T, s *store.Store, clk *clock, capacity int, mod func(*Config), pmod func(*publish.Config)) *Node {
	t.Helper()
	if capacity == 0 {
		capacity = 64
	}
	pub, err := status.New(status.Config{Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Store: s, Registerer: prometheus.NewRegistry(),
		Logger: storetest.Logger(t).With("health", s.NodeID())}
	if clk != nil {
		cfg.Now = clk.Now
	}
	if mod != nil {
		mod(&cfg)
	}
	pc := publish.Config{Store: s, Table: pub, Slice: cfg.Slice, Now: cfg.Now, Logger: cfg.Logger,
		Registerer: cfg.Registerer}
	if pmod != nil {
		pmod(&pc)
	}
	if cfg.Publish, err = publish.New(pc); err != nil {
		t.Fatalf("publish.New: %v", err)
	}
	n, err := New(cfg)
	if err != nil {
		t.Fatalf("health.New: %v", err)
	}
	return n
}

// tick advances the clock by d and runs one round.
func (h *harness) tick(d time.Duration) {
	h.t.Helper()
	h.clk.Advance(d)
	h.n.Tick(h.t.Context())
}

func (h *harness) apply(svcs ...wire.Service) {
	h.t.Helper()
	if _, err := h.st.ApplyServices(h.t.Context(), "admin", svcs); err != nil {
		h.t.Fatalf("ApplyServices: %v", err)
	}
}

func (h *harness) register(r wire.Registration) wire.Instance {
	h.t.Helper()
	return register(h.t, h.st.Store, r)
}

func register(t *testing.T, s *store.Store, r wire.Registration) wire.Instance {
	t.Helper()
	in, _, err := s.Register(t.Context(), "registrar", r)
	if err != nil {
		t.Fatalf("Register %s: %v", r.ID, err)
	}
	return in
}

// instance re-reads an instance from the harness's replica.
func (h *harness) instance(in wire.Instance) wire.Instance {
	h.t.Helper()
	got, ok := h.st.Instance(in.Key())
	if !ok {
		h.t.Fatalf("instance %s is not in the store", in.Key())
	}
	return got
}

// entry returns in's entry in the current table, failing when the table
// does not hold it.
func (h *harness) entry(in wire.Instance) status.Entry {
	h.t.Helper()
	e, ok := h.n.pub.Status(in.Key().String(), in.Incarnation)
	if !ok {
		h.t.Fatalf("the table holds no entry for %s#%d", in.Key(), in.Incarnation)
	}
	return e
}

// probe reports one probe result about in from observer, taken now.
func (h *harness) probe(observer string, in wire.Instance, ok, hard bool) wire.ProbeReply {
	h.t.Helper()
	return h.n.ProbeReport(wire.ProbeReport{Observer: observer, Results: []wire.ProbeResult{
		{Target: TargetID(in.Key(), in.Incarnation), At: h.clk.Now(), OK: ok, Hard: hard}}})
}

// metric returns the value of the counter or gauge name with the given
// label pairs ("reason", "unassigned"), or 0 when it has no such series.
func (h *harness) metric(name string, labels ...string) float64 {
	h.t.Helper()
	return metricValue(h.t, h.reg, name, labels...)
}

// nodeMetric is metric for a Node made by newNode.
func nodeMetric(t *testing.T, n *Node, name string, labels ...string) float64 {
	t.Helper()
	return metricValue(t, n.cfg.Registerer.(prometheus.Gatherer), name, labels...)
}

func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}
				if !found {
					continue series
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

// events returns the audit events of one service of kind (all kinds when
// empty) about instance id (all when empty).
func events(s *store.Store, key wire.ServiceKey, kind wire.EventKind, id string) []wire.Event {
	var out []wire.Event
	for _, e := range s.Events(key.Namespace, key.Name, 0) {
		if (kind == "" || e.Kind == kind) && (id == "" || e.Instance == id) {
			out = append(out, e)
		}
	}
	return out
}

// tcpService is a service probed over TCP on its "main" port, with a
// lease long enough that it never expires in a test.
func tcpService(ns, name string) wire.Service {
	return wire.Service{Namespace: ns, Name: name,
		Ports:  []wire.Port{{Name: "main", Number: 8080}},
		Check:  &wire.Check{Type: "tcp"},
		Policy: wire.Policy{LeaseTTL: wire.Duration(time.Hour)}}
}

// selfService is a service whose instances report their own readiness:
// no check, one declared dependency of their own.
func selfService(ns, name string) wire.Service {
	return wire.Service{Namespace: ns, Name: name,
		Ports:      []wire.Port{{Name: "main", Number: 8080}},
		Capability: wire.Capability{Readiness: "self", Dependencies: []wire.Dependency{{Name: "db"}}},
		Policy:     wire.Policy{LeaseTTL: wire.Duration(time.Hour)}}
}

func reg(svc wire.Service, id, addr string) wire.Registration {
	return wire.Registration{Namespace: svc.Namespace, Service: svc.Name, ID: id,
		Addresses: []string{addr}, Ports: map[string]int{"main": 8080}}
}

// fleet registers n ready instances of svc, ids prefix0…, addresses
// 10.0.0.1…
func (h *harness) fleet(svc wire.Service, prefix string, n int) []wire.Instance {
	h.t.Helper()
	out := make([]wire.Instance, n)
	for i := range out {
		out[i] = h.register(reg(svc, fmt.Sprintf("%s%d", prefix, i), fmt.Sprintf("10.0.0.%d", i+1)))
	}
	return out
}

// assignedTo returns the first of observers that target in is assigned
// to over members, failing when none is.
func assignedTo(t *testing.T, in wire.Instance, members []string, replicas int, observers ...string) string {
	t.Helper()
	for _, o := range observers {
		if slices.Contains(probe.Assign(TargetID(in.Key(), in.Incarnation), members, replicas), o) {
			return o
		}
	}
	t.Fatalf("%s is assigned to none of %v over %v", in.Key(), observers, members)
	return ""
}

// run starts n.Run and returns a function that stops it and waits.
func run(t *testing.T, n *Node) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond until it holds, failing the test with its last
// error after wait.
func waitFor(t *testing.T, cond func() error) {
	t.Helper()
	storetest.WaitFor(t, wait, cond)
}

// cluster starts an n-node store cluster and waits until every node's
// replica lists all n members (a follower learns the last joins a little
// after the leader).
func cluster(t *testing.T, n int) []*storetest.Node {
	t.Helper()
	nodes := storetest.Cluster(t, n)
	for _, nd := range nodes {
		waitFor(t, func() error {
			ms, err := nd.Members()
			if err != nil {
				return err
			}
			if len(ms) != n {
				return fmt.Errorf("%s lists %d members, want %d", nd.NodeID(), len(ms), n)
			}
			return nil
		})
	}
	return nodes
}
