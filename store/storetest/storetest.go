// Package storetest starts in-memory stores for tests: a single
// self-bootstrapped node, or an N-node cluster on raft's in-memory
// transport. Nothing touches the disk or the network.
package storetest

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// Fast are timeouts that make an in-memory election take milliseconds.
func Fast(cfg store.Config) store.Config {
	cfg.HeartbeatTimeout = 50 * time.Millisecond
	cfg.ElectionTimeout = 50 * time.Millisecond
	cfg.LeaderLease = 50 * time.Millisecond
	cfg.LeaseCheckpoint = 20 * time.Millisecond
	return cfg
}

// Logger sends log lines to t.Log, so they show only when a test fails.
func Logger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// Node is one running in-memory store with its Run loop.
type Node struct {
	*store.Store
	Trans  *raft.InmemTransport
	cancel context.CancelFunc
	done   chan error

	stopOnce sync.Once
	stopErr  error
}

// Stop stops the node's Run loop and closes its store. It is safe to call
// twice: a test may stop a node that the cleanup stops again.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		n.cancel()
		err := <-n.done
		if cerr := n.Close(); cerr != nil {
			err = cerr
		}
		n.stopErr = err
	})
	return n.stopErr
}

// start opens a store for cfg on an in-memory transport named addr.
func start(t testing.TB, cfg store.Config, addr string) *Node {
	t.Helper()
	_, trans := raft.NewInmemTransport(raft.ServerAddress(addr))
	cfg.Transport = trans
	if cfg.Logger == nil {
		cfg.Logger = Logger(t).With("node", cfg.NodeID)
	}
	s, err := store.Open(cfg)
	if err != nil {
		t.Fatalf("opening store %s: %v", cfg.NodeID, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := &Node{Store: s, Trans: trans, cancel: cancel, done: make(chan error, 1)}
	go func() { n.done <- s.Run(ctx) }()
	return n
}

// Single starts a one-node cluster from cfg (NodeID defaults to "n1") and
// waits until it is a ready leader. It is stopped when the test ends.
func Single(t testing.TB, cfg store.Config) *Node {
	t.Helper()
	n := alone(t, cfg, true)
	WaitFor(t, 10*time.Second, func() error {
		if !n.LeaderReady() {
			return fmt.Errorf("state %s, not a ready leader", n.State())
		}
		return nil
	})
	return n
}

// Lone starts a node that neither bootstraps nor joins: it never hears
// from a leader, as a server restarted while its cluster has no quorum.
// It is stopped when the test ends.
func Lone(t testing.TB, cfg store.Config) *Node {
	t.Helper()
	return alone(t, cfg, false)
}

// alone starts one node on a transport of its own (NodeID defaults to
// "n1"), bootstrapping a cluster of itself or not, stopped when the test
// ends.
func alone(t testing.TB, cfg store.Config, bootstrap bool) *Node {
	t.Helper()
	if cfg.NodeID == "" {
		cfg.NodeID = "n1"
	}
	if cfg.HTTPAddr == "" {
		cfg.HTTPAddr = "127.0.0.1:1"
	}
	cfg.Bootstrap = bootstrap
	n := start(t, Fast(cfg), cfg.NodeID)
	t.Cleanup(func() {
		if err := n.Stop(); err != nil {
			t.Errorf("stopping store: %v", err)
		}
	})
	return n
}

// Cluster starts n nodes (ids n1..nN) on connected in-memory transports,
// n1 bootstrapping and the others joining, and waits until all n are
// voters and one is a ready leader.
func Cluster(t testing.TB, n int) []*Node {
	t.Helper()
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("127.0.0.1:%d", 10+i)
	}
	return ClusterWith(t, addrs)
}

// ClusterWith is Cluster with one node per HTTP address given, recorded in
// the membership (so that API tests can forward between real listeners).
func ClusterWith(t testing.TB, httpAddrs []string) []*Node {
	t.Helper()
	n := len(httpAddrs)
	nodes := make([]*Node, n)
	for i := range nodes {
		cfg := Fast(store.Config{NodeID: fmt.Sprintf("n%d", i+1), HTTPAddr: httpAddrs[i], Bootstrap: i == 0})
		// Store.Join wants a host:port raft address, so the transports
		// are named "nI:8300" rather than by the bare node id.
		nodes[i] = start(t, cfg, cfg.NodeID+":8300")
	}
	t.Cleanup(func() {
		for _, nd := range nodes {
			if err := nd.Stop(); err != nil {
				t.Errorf("stopping store: %v", err)
			}
		}
	})
	for i := range nodes {
		for j := range nodes {
			if i != j {
				nodes[i].Trans.Connect(nodes[j].Trans.LocalAddr(), nodes[j].Trans)
			}
		}
	}
	WaitFor(t, 10*time.Second, func() error {
		if !nodes[0].LeaderReady() {
			return fmt.Errorf("n1 is %s", nodes[0].State())
		}
		return nil
	})
	for i, nd := range nodes[1:] {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := nodes[0].Join(ctx, "test", wire.Member{NodeID: nd.NodeID(), RaftAddr: nd.RaftAddr(), HTTPAddr: httpAddrs[i+1]})
		cancel()
		if err != nil {
			t.Fatalf("joining %s: %v", nd.NodeID(), err)
		}
	}
	return nodes
}

// Leader returns the node that is a ready leader, waiting up to 10s.
func Leader(t testing.TB, nodes []*Node) *Node {
	t.Helper()
	var l *Node
	WaitFor(t, 10*time.Second, func() error {
		for _, nd := range nodes {
			if nd.LeaderReady() {
				l = nd
				return nil
			}
		}
		return fmt.Errorf("no ready leader among %d nodes", len(nodes))
	})
	return l
}

// WaitFor polls cond every 5ms until it returns nil, failing the test
// with cond's last error after d.
func WaitFor(t testing.TB, d time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %v", d, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Clock is a clock a test moves by hand (Advance), safe for concurrent
// use: a store (store.Config.Now) and the loops over it share one, so
// that registration times, lease deadlines and each round's now agree.
type Clock struct {
	mu sync.Mutex
	t  time.Time
}

// NewClock returns a Clock reading at.
func NewClock(at time.Time) *Clock { return &Clock{t: at} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

// Advance moves the clock d forward.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
