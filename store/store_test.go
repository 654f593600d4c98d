package store_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// TestMain checks that no test leaves a goroutine behind: every store is
// stopped, raft included, when its test ends. It covers the FSM tests of
// package store too, which share this test binary.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const wait = 10 * time.Second

func webService(drainWindow time.Duration) wire.Service {
	return wire.Service{
		Namespace: "prod", Name: "web",
		Ports:      []wire.Port{{Name: "http", Number: 8080}},
		Capability: wire.Capability{Readiness: "self", Dependencies: []wire.Dependency{{Name: "db"}}},
		Policy:     wire.Policy{DrainWindow: wire.Duration(drainWindow), LeaseTTL: wire.Duration(30 * time.Second)},
	}
}

func registration(id, addr string) wire.Registration {
	return wire.Registration{Namespace: "prod", Service: "web", ID: id,
		Addresses: []string{addr}, Ports: map[string]int{"http": 8080}}
}

func key(id string) wire.InstanceKey {
	return wire.InstanceKey{Namespace: "prod", Service: "web", ID: id}
}

func mustApply(t *testing.T, s *store.Store, svcs ...wire.Service) uint64 {
	t.Helper()
	rev, err := s.ApplyServices(t.Context(), "admin", svcs)
	if err != nil {
		t.Fatalf("ApplyServices: %v", err)
	}
	return rev
}

func mustRegister(t *testing.T, s *store.Store, r wire.Registration) wire.Instance {
	t.Helper()
	in, _, err := s.Register(t.Context(), "registrar", r)
	if err != nil {
		t.Fatalf("Register %s: %v", r.ID, err)
	}
	return in
}

func kinds(events []wire.Event) []wire.EventKind {
	var out []wire.EventKind
	for _, e := range events {
		out = append(out, e.Kind)
	}
	return out
}

func TestSingleNodeLifecycle(t *testing.T) {
	n := storetest.Single(t, store.Config{HTTPAddr: "127.0.0.1:7000"})
	ctx := t.Context()

	rev := mustApply(t, n.Store, webService(time.Minute))
	svc, ok := n.Service("prod", "web")
	if !ok || svc.Revision != rev || svc.Policy.DNSTTL.D() != wire.DefaultDNSTTL || svc.Ports[0].Protocol != "tcp" {
		t.Fatalf("stored service %+v (found %t), want revision %d with defaults filled", svc, ok, rev)
	}
	if again := mustApply(t, n.Store, webService(time.Minute)); n.Services()[0].Revision != rev {
		t.Errorf("re-applying the same definition moved its revision from %d to %d (entry %d)", rev, n.Services()[0].Revision, again)
	}

	in, created, err := n.Register(ctx, "registrar", registration("a", "10.0.0.1"))
	if err != nil || !created || in.Incarnation == 0 || in.Lifecycle != status.Ready || in.Registrar != "registrar" {
		t.Fatalf("Register: %+v created=%t err=%v", in, created, err)
	}
	retry, created, err := n.Register(ctx, "registrar", registration("a", "10.0.0.1"))
	if err != nil || created || retry.Incarnation != in.Incarnation {
		t.Fatalf("identical retry: incarnation %d created=%t err=%v, want %d false nil", retry.Incarnation, created, err, in.Incarnation)
	}

	renewed, err := n.Renew(ctx, key("a"), in.Incarnation)
	if err != nil || renewed.LeaseDeadline.Before(in.LeaseDeadline) {
		t.Fatalf("Renew: deadline %v err %v, want at least %v", renewed.LeaseDeadline, err, in.LeaseDeadline)
	}
	if got, _ := n.Instance(key("a")); !got.LeaseDeadline.Equal(renewed.LeaseDeadline) {
		t.Errorf("Instance shows deadline %v after renewal to %v", got.LeaseDeadline, renewed.LeaseDeadline)
	}

	rep, err := n.Report(ctx, "instance:a", key("a"), in.Incarnation, wire.Report{Ready: true, Dependencies: map[string]wire.DependencyState{"db": wire.DepOK}})
	if err != nil || rep.Report == nil || !rep.Report.Ready || rep.Report.Reporter != "instance:a" {
		t.Fatalf("Report: %+v err %v", rep.Report, err)
	}
	if !rep.LeaseDeadline.Equal(renewed.LeaseDeadline) {
		t.Errorf("Report answered lease deadline %v, want the renewed %v", rep.LeaseDeadline, renewed.LeaseDeadline)
	}

	// Refusals.
	refusals := []struct {
		name string
		err  error
		want error
	}{
		{"undeclared dependency", errOf(n.Report(ctx, "x", key("a"), in.Incarnation, wire.Report{Dependencies: map[string]wire.DependencyState{"queue": wire.DepOK}})), wire.ErrInvalid},
		{"stale drain", errOf(n.Drain(ctx, "x", key("a"), in.Incarnation-1)), store.ErrFenced},
		{"future deregister", errOf(n.Deregister(ctx, "x", key("a"), in.Incarnation+1)), store.ErrFenced},
		{"stale renew", errOf(n.Renew(ctx, key("a"), in.Incarnation+1)), store.ErrFenced},
		{"unknown instance", errOf(n.Drain(ctx, "x", key("zz"), 1)), store.ErrNotFound},
		{"unknown service", errOf3(n.Register(ctx, "x", wire.Registration{Namespace: "prod", Service: "nope", ID: "a"})), store.ErrNotFound},
		{"bad registration", errOf3(n.Register(ctx, "x", registration("a", "not-an-ip"))), wire.ErrInvalid},
		{"no services", errOf(n.ApplyServices(ctx, "x", nil)), wire.ErrInvalid},
		{"twice in one apply", errOf(n.ApplyServices(ctx, "x", []wire.Service{webService(0), webService(0)})), wire.ErrInvalid},
		{"invalid service", errOf(n.ApplyServices(ctx, "x", []wire.Service{{Namespace: "prod", Name: "Web"}})), wire.ErrInvalid},
	}
	for _, r := range refusals {
		if !errors.Is(r.err, r.want) {
			t.Errorf("%s: error %v, want %v", r.name, r.err, r.want)
		}
	}

	drained, err := n.Drain(ctx, "admin", key("a"), in.Incarnation)
	if err != nil || drained.Lifecycle != status.Draining || drained.DrainingSince.IsZero() {
		t.Fatalf("Drain: %+v err %v", drained, err)
	}
	gone, err := n.Deregister(ctx, "admin", key("a"), in.Incarnation)
	if err != nil || gone.Lifecycle != status.Terminated {
		t.Fatalf("Deregister: %+v err %v", gone, err)
	}
	if _, err := n.Renew(ctx, key("a"), in.Incarnation); !errors.Is(err, store.ErrFenced) {
		t.Errorf("renewing a deregistered instance: error %v, want ErrFenced", err)
	}
	back := mustRegister(t, n.Store, registration("a", "10.0.0.1"))
	if back.Incarnation <= in.Incarnation {
		t.Errorf("re-registration got incarnation %d, want > %d", back.Incarnation, in.Incarnation)
	}
	if err := n.Audit(ctx, wire.Event{Kind: wire.EventRefused, Namespace: "prod", Service: "web", Actor: "api", Reason: "test"}); err != nil {
		t.Fatalf("Audit: %v", err)
	}

	want := []wire.EventKind{wire.EventApplied, wire.EventRegistered, wire.EventReported,
		wire.EventDrained, wire.EventDeregistered, wire.EventRegistered, wire.EventRefused}
	if got := kinds(n.Events("prod", "web", 0)); !reflect.DeepEqual(got, want) {
		t.Errorf("events %v, want %v", got, want)
	}
	if got := kinds(n.Events("prod", "web", 2)); !reflect.DeepEqual(got, want[len(want)-2:]) {
		t.Errorf("last 2 events %v, want %v", got, want[len(want)-2:])
	}
	if ins := n.Instances("prod", "web"); len(ins) != 1 || ins[0].Incarnation != back.Incarnation {
		t.Errorf("instances %+v, want only incarnation %d", ins, back.Incarnation)
	}

	storetest.WaitFor(t, wait, func() error {
		ms, err := n.Members()
		if err != nil {
			return err
		}
		want := []wire.Member{{NodeID: "n1", RaftAddr: "n1", HTTPAddr: "127.0.0.1:7000", Leader: true, Voter: true}}
		if !reflect.DeepEqual(ms, want) {
			return fmt.Errorf("members %+v, want %+v", ms, want)
		}
		return nil
	})
	if id, addr := n.Leader(); id != "n1" || addr != "127.0.0.1:7000" {
		t.Errorf("Leader() = %q %q", id, addr)
	}
	if !n.IsLeader() || n.State() != "Leader" || n.LastContact().IsZero() {
		t.Errorf("IsLeader %t State %s LastContact %v", n.IsLeader(), n.State(), n.LastContact())
	}

	if err := n.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := n.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := n.ApplyServices(ctx, "x", []wire.Service{webService(0)}); err == nil {
		t.Errorf("write after Close succeeded")
	}
}

func errOf[T any](_ T, err error) error          { return err }
func errOf3[T, U any](_ T, _ U, err error) error { return err }

func followers(nodes []*storetest.Node, leader *storetest.Node) []*storetest.Node {
	var out []*storetest.Node
	for _, nd := range nodes {
		if nd != leader {
			out = append(out, nd)
		}
	}
	return out
}

// stop stops nd and cuts it off from the others, so that they do not wait
// on a transport nobody reads any more.
func stop(t *testing.T, nd *storetest.Node, others []*storetest.Node) {
	t.Helper()
	if err := nd.Stop(); err != nil {
		t.Fatalf("stopping %s: %v", nd.NodeID(), err)
	}
	for _, o := range others {
		o.Trans.Disconnect(nd.Trans.LocalAddr())
	}
}

func TestClusterFollowerWritesReturnNotLeader(t *testing.T) {
	nodes := storetest.Cluster(t, 3)
	leader := storetest.Leader(t, nodes)
	ctx := t.Context()
	mustApply(t, leader.Store, webService(time.Minute))
	in := mustRegister(t, leader.Store, registration("a", "10.0.0.1"))

	for _, f := range followers(nodes, leader) {
		storetest.WaitFor(t, wait, func() error {
			if _, ok := f.Instance(key("a")); !ok {
				return fmt.Errorf("%s has not seen instance a", f.NodeID())
			}
			return nil
		})
		writes := map[string]error{
			"apply":      errOf(f.ApplyServices(ctx, "x", []wire.Service{webService(time.Minute)})),
			"register":   errOf3(f.Register(ctx, "x", registration("b", "10.0.0.2"))),
			"renew":      errOf(f.Renew(ctx, key("a"), in.Incarnation)),
			"drain":      errOf(f.Drain(ctx, "x", key("a"), in.Incarnation)),
			"deregister": errOf(f.Deregister(ctx, "x", key("a"), in.Incarnation)),
			"report":     errOf(f.Report(ctx, "x", key("a"), in.Incarnation, wire.Report{Ready: true})),
			"audit":      f.Audit(ctx, wire.Event{Kind: wire.EventRefused}),
			"join":       f.Join(ctx, "x", wire.Member{NodeID: "n9", RaftAddr: "h:1", HTTPAddr: "h:2"}),
			"leave":      f.Leave(ctx, "x", "n3"),
		}
		for op, err := range writes {
			if !errors.Is(err, store.ErrNotLeader) {
				t.Errorf("%s on follower %s: error %v, want ErrNotLeader", op, f.NodeID(), err)
			}
		}
		if id, _ := f.Leader(); id != leader.NodeID() {
			t.Errorf("follower %s names leader %q, want %q", f.NodeID(), id, leader.NodeID())
		}
		if f.LeaderReady() || f.IsLeader() {
			t.Errorf("follower %s claims to lead", f.NodeID())
		}
	}
	if got, _ := leader.Instance(key("a")); got.Lifecycle != status.Ready {
		t.Errorf("refused follower writes changed instance a: %+v", got)
	}
}

// TestClusterLeaderStopKeepsWritesAndLeases: every write acknowledged by
// the old leader is on the new one, and a leader change never expires a
// lease it could not have seen renewed.
func TestClusterLeaderStopKeepsWritesAndLeases(t *testing.T) {
	nodes := storetest.Cluster(t, 3)
	old := storetest.Leader(t, nodes)
	ctx := t.Context()
	svc := webService(time.Hour)
	svc.Policy.MaxUnavailable = "100%" // not a test of budgets: b drains, then a goes
	mustApply(t, old.Store, svc)
	a := mustRegister(t, old.Store, registration("a", "10.0.0.1"))
	b := mustRegister(t, old.Store, registration("b", "10.0.0.2"))
	if _, err := old.Drain(ctx, "admin", key("b"), b.Incarnation); err != nil {
		t.Fatal(err)
	}
	if _, err := old.Report(ctx, "instance:a", key("a"), a.Incarnation, wire.Report{Ready: false}); err != nil {
		t.Fatal(err)
	}
	renewed, err := old.Renew(ctx, key("a"), a.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	wantServices := old.Services()
	wantInstances := old.Instances("prod", "web")
	wantEvents := old.Events("", "", 0)

	rest := followers(nodes, old)
	stop(t, old, rest)
	leader := storetest.Leader(t, rest)

	got, ok := leader.Instance(key("a"))
	if !ok || leader.LeaseExpiry(got).Before(renewed.LeaseDeadline) {
		t.Fatalf("new leader %s lets the lease expire at %v, want at least %v, renewed on the old leader", leader.NodeID(), leader.LeaseExpiry(got), renewed.LeaseDeadline)
	}
	wantSameState(t, leader.Store, wantServices, wantInstances, "on the new leader")
	if got := leader.Events("", "", 0); !reflect.DeepEqual(got[:len(wantEvents)], wantEvents) {
		t.Errorf("events on the new leader\n%+v\nwant them to start with\n%+v", got, wantEvents)
	}
	// The new leader takes writes.
	if _, err := leader.Deregister(ctx, "admin", key("a"), a.Incarnation); err != nil {
		t.Errorf("Deregister on the new leader: %v", err)
	}
}

func TestClusterDrainedInstanceTerminatedAfterWindow(t *testing.T) {
	const window = 100 * time.Millisecond
	nodes := storetest.Cluster(t, 3)
	leader := storetest.Leader(t, nodes)
	mustApply(t, leader.Store, webService(window))
	in := mustRegister(t, leader.Store, registration("a", "10.0.0.1"))
	drained, err := leader.Drain(t.Context(), "admin", key("a"), in.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	for _, nd := range nodes {
		storetest.WaitFor(t, wait, func() error {
			got, _ := nd.Instance(key("a"))
			if got.Lifecycle != status.Terminated {
				return fmt.Errorf("%s: instance a is %s", nd.NodeID(), got.Lifecycle)
			}
			if d := got.TerminatedAt.Sub(drained.DrainingSince); d < window {
				t.Fatalf("%s: terminated %s after the drain began, before the %s window", nd.NodeID(), d, window)
			}
			return nil
		})
	}
	evs := leader.Events("prod", "web", 1)
	if len(evs) != 1 || evs[0].Kind != wire.EventTerminated || evs[0].Incarnation != in.Incarnation {
		t.Errorf("last event %+v, want %s of incarnation %d", evs, wire.EventTerminated, in.Incarnation)
	}
}

func TestClusterLeaseCheckpointReachesFollowers(t *testing.T) {
	nodes := storetest.Cluster(t, 3)
	leader := storetest.Leader(t, nodes)
	mustApply(t, leader.Store, webService(time.Minute))
	in := mustRegister(t, leader.Store, registration("a", "10.0.0.1"))
	renewed, err := leader.Renew(t.Context(), key("a"), in.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if !renewed.LeaseDeadline.After(in.LeaseDeadline) {
		t.Fatalf("renewal did not move the deadline past %v: %v", in.LeaseDeadline, renewed.LeaseDeadline)
	}
	for _, f := range followers(nodes, leader) {
		storetest.WaitFor(t, wait, func() error {
			if got, _ := f.Instance(key("a")); got.LeaseDeadline.Before(renewed.LeaseDeadline) {
				return fmt.Errorf("%s shows deadline %v, want %v", f.NodeID(), got.LeaseDeadline, renewed.LeaseDeadline)
			}
			return nil
		})
	}
}

// node is a store started by hand, for tests that need a Config that
// storetest does not set.
type node struct {
	*store.Store
	trans *raft.InmemTransport
	stop  func()
}

func startNode(t *testing.T, cfg store.Config) *node {
	t.Helper()
	_, trans := raft.NewInmemTransport(raft.ServerAddress(cfg.NodeID + ":8300"))
	cfg.Transport = trans
	cfg.Logger = storetest.Logger(t).With("node", cfg.NodeID)
	s, err := store.Open(cfg)
	if err != nil {
		t.Fatalf("opening %s: %v", cfg.NodeID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	n := &node{Store: s, trans: trans}
	stopped := false
	n.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run of %s: %v", cfg.NodeID, err)
		}
		if err := s.Close(); err != nil {
			t.Errorf("closing %s: %v", cfg.NodeID, err)
		}
	}
	t.Cleanup(n.stop)
	return n
}

// TestLeaseExtendedOnElectionWithoutCheckpoint pins down the lease
// extension rule: with checkpoints too rare to happen during the test, a
// renewal lives only in the old leader's memory, and the new leader must
// still not show (or replicate) an earlier deadline.
func TestLeaseExtendedOnElectionWithoutCheckpoint(t *testing.T) {
	nodes := manualCluster(t, 3, func(c *store.Config) { c.LeaseCheckpoint = time.Hour })
	n1 := nodes[0]
	mustApply(t, n1.Store, webService(time.Minute))
	in := mustRegister(t, n1.Store, registration("a", "10.0.0.1"))
	renewed, err := n1.Renew(t.Context(), key("a"), in.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	// Make sure the followers hold the registration, and only it.
	if err := n1.Audit(t.Context(), wire.Event{Kind: wire.EventRefused, Reason: "barrier"}); err != nil {
		t.Fatal(err)
	}
	for _, f := range nodes[1:] {
		storetest.WaitFor(t, wait, func() error {
			got, ok := f.Instance(key("a"))
			if !ok {
				return fmt.Errorf("%s has not seen instance a", f.NodeID())
			}
			if !got.LeaseDeadline.Equal(in.LeaseDeadline) {
				t.Fatalf("%s shows deadline %v: a checkpoint ran, so this test shows nothing", f.NodeID(), got.LeaseDeadline)
			}
			return nil
		})
	}

	n1.stop()
	for _, o := range nodes[1:] {
		o.trans.Disconnect(n1.trans.LocalAddr())
	}
	var leader *node
	storetest.WaitFor(t, wait, func() error {
		for _, nd := range nodes[1:] {
			if nd.LeaderReady() {
				leader = nd
				return nil
			}
		}
		return errors.New("no ready leader among n2, n3")
	})
	if got, _ := leader.Instance(key("a")); leader.LeaseExpiry(got).Before(renewed.LeaseDeadline) {
		t.Fatalf("new leader %s lets the lease expire at %v, earlier than the %v the old leader granted", leader.NodeID(), leader.LeaseExpiry(got), renewed.LeaseDeadline)
	}
	// The grace is replicated when the new leader takes over.
	for _, nd := range nodes[1:] {
		storetest.WaitFor(t, wait, func() error {
			if got, _ := nd.Instance(key("a")); nd.LeaseExpiry(got).Before(renewed.LeaseDeadline) {
				return fmt.Errorf("%s lets the lease expire at %v, want at least %v", nd.NodeID(), nd.LeaseExpiry(got), renewed.LeaseDeadline)
			}
			return nil
		})
	}
	// The takeover rewrote the recorded deadline on every replica: one TTL
	// from the takeover, which covers the renewal never replicated.
	for _, nd := range nodes[1:] {
		if got, _ := nd.Instance(key("a")); got.LeaseDeadline.Before(renewed.LeaseDeadline) {
			t.Errorf("%s records deadline %v, want at least the unreplicated renewal's %v", nd.NodeID(), got.LeaseDeadline, renewed.LeaseDeadline)
		}
	}
}

// TestPersistenceAcrossRestart: a node with a data dir comes back with
// everything it acknowledged, from a snapshot plus the log after it.
func TestPersistenceAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := t.Context()
	n := storetest.Single(t, store.Config{DataDir: dir})
	svc := webService(time.Hour)
	svc.Policy.MaxUnavailable = "2" // not a test of budgets: b drains, then a goes
	mustApply(t, n.Store, svc)
	a := mustRegister(t, n.Store, registration("a", "10.0.0.1"))
	b := mustRegister(t, n.Store, registration("b", "10.0.0.2"))
	if _, err := n.Drain(ctx, "admin", key("b"), b.Incarnation); err != nil {
		t.Fatal(err)
	}
	if err := n.Snapshot(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	if snaps, _ := filepath.Glob(filepath.Join(dir, "snapshots", "*", "state.bin")); len(snaps) == 0 {
		t.Fatalf("no snapshot in %s", dir)
	}
	// After the snapshot: only in the log.
	other := webService(time.Hour)
	other.Name = "api"
	mustApply(t, n.Store, other)
	c := mustRegister(t, n.Store, registration("c", "10.0.0.3"))
	if _, err := n.Deregister(ctx, "admin", key("a"), a.Incarnation); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Report(ctx, "instance:c", key("c"), c.Incarnation, wire.Report{Ready: true}); err != nil {
		t.Fatal(err)
	}
	wantServices := n.Services()
	wantInstances := n.Instances("prod", "web")
	wantEvents := n.Events("", "", 0)
	wantRev := n.Revision()
	if err := n.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "raft.db")); err != nil {
		t.Fatal(err)
	}

	n = storetest.Single(t, store.Config{DataDir: dir})
	storetest.WaitFor(t, wait, func() error {
		if n.Revision() < wantRev {
			return fmt.Errorf("revision %d, want at least %d", n.Revision(), wantRev)
		}
		return nil
	})
	// The restarted leader gives every lease a grace; nothing else moves.
	wantSameState(t, n.Store, wantServices, wantInstances, "after restart")
	if got := n.Events("", "", 0); !reflect.DeepEqual(got, wantEvents) {
		t.Errorf("events after restart\n%+v\nwant\n%+v", got, wantEvents)
	}
	d := mustRegister(t, n.Store, registration("d", "10.0.0.4"))
	if d.Incarnation <= c.Incarnation {
		t.Errorf("registration after restart got incarnation %d, want > %d (the counter must survive)", d.Incarnation, c.Incarnation)
	}
}

func TestOpenRejectsBadConfig(t *testing.T) {
	_, trans := raft.NewInmemTransport("x")
	for name, cfg := range map[string]store.Config{
		"no node id":           {Transport: trans},
		"no raft address":      {NodeID: "n1"},
		"lease over heartbeat": {NodeID: "n1", Transport: trans, HeartbeatTimeout: time.Second, LeaderLease: 2 * time.Second},
		"unspecified address":  {NodeID: "n1", RaftAddr: "0.0.0.0:0"},
	} {
		if s, err := store.Open(cfg); err == nil {
			s.Close()
			t.Errorf("%s: Open succeeded", name)
		}
	}
}

// fakeClock is a settable clock for the store's timestamps (raft keeps
// its own real timers).
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestLeaseGraceForEveryLiveLease: after a takeover, every lease not yet
// past its hard expiry runs at least one TTL from it, however long it had
// been dead before (time without a leader never counts against a lease,
// SPEC §2), as the takeover entry records on every replica.
func TestLeaseGraceForEveryLiveLease(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := store.Config{DataDir: dir, Now: clk.Now}
	n := storetest.Single(t, cfg)
	mustApply(t, n.Store, webService(time.Minute))
	mustRegister(t, n.Store, registration("a", "10.0.0.1"))
	b := mustRegister(t, n.Store, registration("b", "10.0.0.2"))

	// Both leases dead for half a minute, not yet past their hard expiry
	// (5 × 30 s); b renews, reviving its lease.
	clk.Advance(time.Minute)
	renewed, err := n.Renew(t.Context(), key("b"), b.Incarnation)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := n.Instance(key("b")); !got.LeaseDeadline.Equal(renewed.LeaseDeadline) {
		t.Fatalf("reviving renewal not applied: %v, want %v", got.LeaseDeadline, renewed.LeaseDeadline)
	}
	// The node is down for longer than a hard expiry of a's lease.
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute)
	n2 := storetest.Single(t, cfg) // takes over at now
	since := clk.Now()

	// Both run one TTL from the takeover, recorded so on every replica.
	gotA, _ := n2.Instance(key("a"))
	if want := since.Add(gotA.LeaseTTL.D()); !gotA.LeaseDeadline.Equal(want) || !n2.LeaseExpiry(gotA).Equal(want) {
		t.Errorf("lease a, dead half a minute before the outage: deadline %v, expiry %v, want %v (one TTL from the takeover)",
			gotA.LeaseDeadline, n2.LeaseExpiry(gotA), want)
	}
	gotB, _ := n2.Instance(key("b"))
	if want := since.Add(gotB.LeaseTTL.D()); !gotB.LeaseDeadline.Equal(want) || !n2.LeaseExpiry(gotB).Equal(want) {
		t.Errorf("live lease b: deadline %v, expiry %v, want %v (one TTL from the takeover)", gotB.LeaseDeadline, n2.LeaseExpiry(gotB), want)
	}
	// Both renew without registering again.
	for _, in := range []wire.Instance{gotA, gotB} {
		if _, err := n2.Renew(t.Context(), in.Key(), in.Incarnation); err != nil {
			t.Errorf("renewing %s after the outage: %v", in.ID, err)
		}
	}
}

// TestFollowerCaughtUp: a follower is CaughtUp only once its replica has
// applied what the leader had applied when asked.
func TestFollowerCaughtUp(t *testing.T) {
	var leader atomic.Pointer[store.Store]
	var (
		mu       sync.Mutex
		answered []uint64 // the leader's revisions as told to n2, in order
	)
	ask := func(ctx context.Context, _ string) (uint64, error) {
		l := leader.Load()
		if l == nil {
			return 0, errors.New("no leader yet")
		}
		r := l.Revision()
		mu.Lock()
		answered = append(answered, r)
		mu.Unlock()
		return r, nil
	}
	var nodes []*node
	for i := 1; i <= 2; i++ {
		cfg := storetest.Fast(store.Config{NodeID: fmt.Sprintf("n%d", i), HTTPAddr: fmt.Sprintf("127.0.0.1:%d", i),
			Bootstrap: i == 1, LeaderRevision: ask})
		nodes = append(nodes, startNode(t, cfg))
	}
	n1, n2 := nodes[0], nodes[1]
	storetest.WaitFor(t, wait, func() error {
		if !n1.LeaderReady() {
			return fmt.Errorf("n1 is %s", n1.State())
		}
		return nil
	})
	leader.Store(n1.Store)
	if !n1.CaughtUp() {
		t.Fatal("a ready leader is not CaughtUp")
	}
	mustApply(t, n1.Store, webService(time.Minute))
	for i := range 200 {
		mustRegister(t, n1.Store, registration(fmt.Sprintf("i-%d", i), fmt.Sprintf("10.0.%d.%d", i/200, i%200+1)))
	}
	// n2 is not connected yet: it knows no leader and is not caught up.
	if n2.CaughtUp() {
		t.Fatal("a follower that never heard from a leader is CaughtUp")
	}
	before := n1.Revision() // the 200 registrations
	n1.trans.Connect(n2.trans.LocalAddr(), n2.trans)
	n2.trans.Connect(n1.trans.LocalAddr(), n1.trans)
	if err := n1.Join(t.Context(), "test", wire.Member{NodeID: "n2", RaftAddr: n2.RaftAddr(), HTTPAddr: "127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	storetest.WaitFor(t, wait, func() error {
		if !n2.CaughtUp() {
			return fmt.Errorf("n2 at revision %d is not CaughtUp (leader %d)", n2.Revision(), n1.Revision())
		}
		return nil
	})
	// Caught up with what the leader had when n2 asked: an answer it has
	// applied, and that holds every registration. Not necessarily the
	// last answer: n2 may ask again after it has latched (the join's own
	// entries), before it applies what it is told.
	got := n2.Revision()
	mu.Lock()
	told := slices.Clone(answered)
	mu.Unlock()
	if !slices.ContainsFunc(told, func(a uint64) bool { return a >= before && a <= got }) {
		t.Fatalf("n2 CaughtUp at revision %d; the leader told it %v, and had %d before the join", got, told, before)
	}
}

// wantSameState checks that s holds wantServices and, for prod/web,
// wantInstances, except that a lease may expire later (a new leader's
// grace) but never earlier.
func wantSameState(t *testing.T, s *store.Store, wantServices []wire.Service, wantInstances []wire.Instance, where string) {
	t.Helper()
	if got := s.Services(); !reflect.DeepEqual(got, wantServices) {
		t.Errorf("services %s\n%+v\nwant\n%+v", where, got, wantServices)
	}
	got := s.Instances("prod", "web")
	if len(got) != len(wantInstances) {
		t.Fatalf("%d instances %s, want %d", len(got), where, len(wantInstances))
	}
	for i := range got {
		g, w := got[i], wantInstances[i]
		if s.LeaseExpiry(g).Before(w.LeaseDeadline) {
			t.Errorf("instance %s %s: lease deadline went back from %v to %v", g.ID, where, w.LeaseDeadline, g.LeaseDeadline)
		}
		g.LeaseDeadline, w.LeaseDeadline = time.Time{}, time.Time{}
		if !reflect.DeepEqual(g, w) {
			t.Errorf("instance %s\n%+v\nwant\n%+v", where, g, w)
		}
	}
}

// TestEachInstance: EachInstance visits the records AllInstances lists,
// terminated ones included, each once, with the same values.
func TestEachInstance(t *testing.T) {
	n := storetest.Single(t, store.Config{})
	mustApply(t, n.Store, webService(0))
	for _, id := range []string{"a", "b", "c"} {
		mustRegister(t, n.Store, registration(id, "10.0.0.1"))
	}
	b, _ := n.Instance(key("b"))
	if _, err := n.Deregister(t.Context(), "x", key("b"), b.Incarnation); err != nil {
		t.Fatal(err)
	}
	c, _ := n.Instance(key("c"))
	if err := n.CommitHealth(t.Context(), "evaluator", []store.HealthUpdate{{Key: key("c"), Health: sampleHealth(c.Incarnation, time.Now().UTC())}}, nil); err != nil {
		t.Fatal(err)
	}
	want := map[wire.InstanceKey]wire.Instance{}
	for _, in := range n.AllInstances() {
		want[in.Key()] = in
	}
	seen := map[wire.InstanceKey]bool{}
	n.EachInstance(func(e store.Entry) {
		w, ok := want[e.Key]
		if !ok || seen[e.Key] {
			t.Errorf("%s visited unexpectedly (listed %t, seen before %t)", e.Key, ok, seen[e.Key])
		}
		seen[e.Key] = true
		var h *wire.Health
		if e.Verdict != nil {
			v := e.Verdict.Health()
			h = &v
		}
		if !reflect.DeepEqual(h, w.Health) {
			t.Errorf("%s visited with verdict %+v, listed with %+v", e.Key, h, w.Health)
		}
		e.Verdict = nil
		listed := store.Entry{Key: w.Key(), Incarnation: w.Incarnation, Lifecycle: w.Lifecycle, Region: w.Region, Zone: w.Zone,
			Addresses: w.Addresses, Ports: w.Ports, Weight: w.Weight, LeaseTTL: w.LeaseTTL,
			LeaseDeadline: w.LeaseDeadline.UnixNano(), RegisteredAt: w.RegisteredAt.UnixNano(), Report: w.Report}
		if !reflect.DeepEqual(e, listed) {
			t.Errorf("%s visited as %+v, listed as %+v", e.Key, e, listed)
		}
	})
	if len(seen) != len(want) || len(want) != 3 {
		t.Errorf("visited %d instances, AllInstances lists %d, want 3", len(seen), len(want))
	}

	// EachInstanceOf: the same entries, of the service asked for only.
	of := map[wire.InstanceKey]store.Entry{}
	n.EachInstanceOf(key("a").ServiceKey(), func(e store.Entry) {
		if _, dup := of[e.Key]; dup {
			t.Errorf("EachInstanceOf visited %s twice", e.Key)
		}
		of[e.Key] = e
	})
	n.EachInstance(func(e store.Entry) {
		if g, ok := of[e.Key]; !ok || !reflect.DeepEqual(g, e) {
			t.Errorf("EachInstanceOf gave %s as %+v (visited %t), EachInstance as %+v", e.Key, g, ok, e)
		}
	})
	if len(of) != 3 {
		t.Errorf("EachInstanceOf visited %d instances, want 3", len(of))
	}
	n.EachInstanceOf(wire.ServiceKey{Namespace: "nowhere", Name: "none"}, func(e store.Entry) {
		t.Errorf("EachInstanceOf of a service that does not exist visited %s", e.Key)
	})
}

// TestRaftAddrByName: a raft address given by name is what the node
// advertises and what its peers hold, so that they resolve it at each
// dial (a StatefulSet pod keeps its name, not its IP).
func TestRaftAddrByName(t *testing.T) {
	free := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return "localhost:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	}
	open := func(id string, boot bool) *store.Store {
		s, err := store.Open(storetest.Fast(store.Config{NodeID: id, RaftAddr: free(), HTTPAddr: "127.0.0.1:1",
			DataDir: t.TempDir(), Bootstrap: boot}))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- s.Run(ctx) }()
		t.Cleanup(func() {
			cancel()
			<-done
			s.Close()
		})
		return s
	}
	n1 := open("n1", true)
	storetest.WaitFor(t, 10*time.Second, func() error {
		if !n1.LeaderReady() {
			return errors.New("n1 not a ready leader")
		}
		return nil
	})
	n2 := open("n2", false)
	if !strings.HasPrefix(n2.RaftAddr(), "localhost:") {
		t.Fatalf("n2 advertises %q, want the name it was given", n2.RaftAddr())
	}
	if err := n1.Join(t.Context(), "test", wire.Member{NodeID: "n2", RaftAddr: n2.RaftAddr(), HTTPAddr: "127.0.0.1:2"}); err != nil {
		t.Fatal(err)
	}
	mustApply(t, n1, webService(time.Minute))
	storetest.WaitFor(t, 10*time.Second, func() error {
		if _, ok := n2.Service("prod", "web"); !ok {
			return errors.New("n2 has not replicated the definition over its named address")
		}
		return nil
	})
	ms, err := n1.Members()
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		if !strings.HasPrefix(m.RaftAddr, "localhost:") {
			t.Errorf("member %s at %q, want its name", m.NodeID, m.RaftAddr)
		}
	}
}

// TestRegistrationSource: the source a registration names is kept with
// the incarnation it creates and told in its audit event; a retry from
// another source is still a retry.
func TestRegistrationSource(t *testing.T) {
	n := storetest.Single(t, store.Config{DataDir: t.TempDir()})
	mustApply(t, n.Store, webService(time.Minute))
	r := registration("a", "10.0.0.1")
	r.RegistrationID, r.Source = "kube-sync/k/uid-1", "EndpointSlice prod/web-1@216"
	in := mustRegister(t, n.Store, r)
	if in.Source != r.Source {
		t.Fatalf("source %q, want %q", in.Source, r.Source)
	}
	r.Source = "EndpointSlice prod/web-1@217"
	again, created, err := n.Register(t.Context(), "registrar", r)
	if err != nil || created || again.Incarnation != in.Incarnation || again.Source != "EndpointSlice prod/web-1@216" {
		t.Errorf("retry from a newer source: %+v created %v err %v; want the same incarnation, from @216", again, created, err)
	}
	evs := n.Events("prod", "web", 0)
	if e := evs[len(evs)-1]; e.Kind != wire.EventRegistered || e.Reason != "from EndpointSlice prod/web-1@216" {
		t.Errorf("registration event %s %q, want registered from the slice", e.Kind, e.Reason)
	}
	r.Source = strings.Repeat("x", wire.MaxSource+1)
	if _, _, err := n.Register(t.Context(), "registrar", r); err == nil || !strings.Contains(err.Error(), "source") {
		t.Errorf("a %d-character source: %v, want refused naming source", len(r.Source), err)
	}
}
