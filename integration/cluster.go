// Package integration runs cairn as real processes on loopback: it builds
// the binary once per process, starts N servers on free ports (node 1
// bootstraps, the others --join it), waits for /readyz, and lets a test
// kill, stop, pause and restart nodes.
//
// The core (Binary, New, Cluster, Node, Writer) needs no testing.T, so that
// bench/ can reuse it; StartCluster and Eventually are the wrappers for
// tests. Each node's stdout and stderr go to a log file next to its data
// directory, and StartCluster prints the tail of every log when a test
// fails.
package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cairn-sd/cairn/internal/pki"
)

// Config describes a cluster to start.
type Config struct {
	// Nodes is the number of servers; at least 1.
	Nodes int
	// Dir holds each node's data dir and log. Required.
	Dir string
	// Bin is the cairn binary; defaults to Binary().
	Bin string
	// Args are extra `cairn server` flags given to every node.
	Args []string
	// NodeArgs, if set, returns extra `cairn server` flags for node i
	// (from 1), after Args: a node's own --zone, say.
	NodeArgs func(i int) []string
	// ReadyTimeout bounds each wait for /readyz; defaults to 30s.
	ReadyTimeout time.Duration
	// Logf, if set, receives a line for each start, stop and kill.
	Logf func(format string, args ...any)
	// Token is the bearer token of the nodes' clients, for servers run
	// with ACLs (--acl-file in Args), and the --token of a node that
	// joins (it joins and reports with it); empty: none.
	Token string
	// Hosts, if set, runs node i (from 1) in the network namespace of
	// Hosts[i-1], listening on its address rather than on loopback: the
	// hosts of the tests' netlab (netlab.go), for a fault that lives in the network between
	// the servers. The nodes need --insecure-plaintext (or TLS) then.
	Hosts []Host
	// TLS runs every node with --tls-cert, --tls-key and --tls-ca, from a
	// private CA the harness makes in Dir (Cluster.TLS), and its clients
	// over https with a client certificate of that CA.
	TLS bool
	// SharedTLS, if set, is the CA (and files) to run TLS with instead of
	// one of the cluster's own: clusters that trust each other (regions
	// that follow each other's views) share one.
	SharedTLS *TLS
	// Name prefixes the nodes' ids ("n": n1, n2, …), so that clusters
	// sharing a CA's directory write their certificates apart.
	Name string
}

// Host is a network namespace a node runs in, and its address there.
type Host struct{ Netns, Addr string }

// Cluster is a set of cairn server processes on loopback.
type Cluster struct {
	cfg   Config
	Nodes []*Node
	// TLS is the cluster's CA and files when Config.TLS is set.
	TLS *TLS
}

// New prepares a cluster: it picks free loopback ports and lays out the
// data dirs. It starts nothing; call Start, and Close when done.
func New(cfg Config) (*Cluster, error) {
	if cfg.Nodes < 1 {
		return nil, errors.New("integration: Config.Nodes must be at least 1")
	}
	if cfg.Dir == "" {
		return nil, errors.New("integration: Config.Dir is required")
	}
	if cfg.Bin == "" {
		bin, err := Binary()
		if err != nil {
			return nil, err
		}
		cfg.Bin = bin
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	ports, err := FreePorts(4 * cfg.Nodes)
	if err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg}
	if cfg.Name == "" {
		cfg.Name = "n"
	}
	c.cfg.Name = cfg.Name
	switch {
	case cfg.SharedTLS != nil:
		c.TLS = cfg.SharedTLS
	case cfg.TLS:
		if c.TLS, err = NewTLS(filepath.Join(cfg.Dir, "tls")); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Nodes {
		id := fmt.Sprintf("%s%d", cfg.Name, i+1)
		n := &Node{
			Index:   i + 1,
			ID:      id,
			DataDir: filepath.Join(cfg.Dir, id),
			c:       c,
			proc:    proc{name: id, LogPath: filepath.Join(cfg.Dir, id+".log"), logf: cfg.Logf},
		}
		if i < len(cfg.Hosts) {
			n.host = cfg.Hosts[i]
		}
		if err := n.setPorts(ports[4*i : 4*i+4]); err != nil {
			return nil, err
		}
		if c.TLS != nil {
			if n.CertFile, n.KeyFile, err = c.TLS.WriteCert(id, pki.Request{Server: true}); err != nil {
				return nil, err
			}
		}
		c.Nodes = append(c.Nodes, n)
	}
	return c, nil
}

// FreePorts returns n distinct ports that were free on 127.0.0.1 a
// moment ago over both TCP and UDP (a DNS address takes both): it
// listens on 127.0.0.1:0 over TCP and on the same port over UDP n times
// at once, then closes them.
func FreePorts(n int) ([]int, error) {
	var closers []io.Closer
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	var ports []int
	for len(ports) < n {
		if len(closers) > 4*n+20 {
			return nil, fmt.Errorf("integration: no port free over both TCP and UDP")
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("integration: picking a free port: %w", err)
		}
		closers = append(closers, ln)
		port := ln.Addr().(*net.TCPAddr).Port
		pc, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue // taken over UDP: try another
		}
		closers = append(closers, pc)
		ports = append(ports, port)
	}
	return ports, nil
}

// Start starts node 1, waits until it is ready (it is then the leader),
// starts the others with --join node 1 and waits until every node is
// ready, all of them name the same leader and every one lists every
// member with its addresses.
func (c *Cluster) Start() error {
	if err := c.Nodes[0].Start(); err != nil {
		return err
	}
	errs := make([]error, len(c.Nodes))
	var wg sync.WaitGroup
	for i, n := range c.Nodes[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i+1] = n.Start()
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if _, err := c.WaitLeader(c.cfg.ReadyTimeout); err != nil {
		return err
	}
	return c.WaitMembers(c.cfg.ReadyTimeout)
}

// WaitMembers polls until every live node lists exactly the cluster's
// nodes, each with the raft and HTTP address the harness gave it. A node
// learns a member's HTTP address when it applies the entry the join wrote,
// a moment after the raft configuration names the member.
func (c *Cluster) WaitMembers(timeout time.Duration) error {
	err := Poll(timeout, 50*time.Millisecond, func() error {
		for _, n := range c.Live() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			ms, err := n.client.Members(ctx)
			cancel()
			if err != nil {
				return fmt.Errorf("%s: %v", n.ID, err)
			}
			if len(ms) != len(c.Nodes) {
				return fmt.Errorf("%s lists %d members; want %d: %+v", n.ID, len(ms), len(c.Nodes), ms)
			}
			for _, m := range ms {
				o := c.Node(m.NodeID)
				if o == nil || m.RaftAddr != o.RaftAddr || m.HTTPAddr != o.HTTPAddr {
					return fmt.Errorf("%s lists member %+v; want one of the cluster's nodes with its addresses", n.ID, m)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("integration: waiting for the membership: %w", err)
	}
	return nil
}

// Close kills every node that still runs (SIGKILL) and waits for it.
func (c *Cluster) Close() {
	for _, n := range c.Nodes {
		if n.Running() {
			n.Kill()
		}
	}
}

// Live returns the nodes whose process runs.
func (c *Cluster) Live() []*Node {
	var out []*Node
	for _, n := range c.Nodes {
		if n.Running() {
			out = append(out, n)
		}
	}
	return out
}

// Node returns the node with the given raft id, or nil.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Leader asks the live nodes in turn for the membership (GET /v1/members)
// and returns the node the first answer names leader.
func (c *Cluster) Leader() (*Node, error) {
	var errs []error
	for _, n := range c.Live() {
		id, err := n.leaderID()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", n.ID, err))
			continue
		}
		if l := c.Node(id); l != nil {
			return l, nil
		}
		errs = append(errs, fmt.Errorf("%s names leader %q, which is not in the cluster", n.ID, id))
	}
	if len(errs) == 0 {
		return nil, errors.New("integration: no node runs")
	}
	return nil, fmt.Errorf("integration: no leader known: %w", errors.Join(errs...))
}

// LeaderAndFollower waits for a leader and returns it with another node
// that runs.
func (c *Cluster) LeaderAndFollower(timeout time.Duration) (leader, follower *Node, err error) {
	leader, err = c.WaitLeader(timeout)
	if err != nil {
		return nil, nil, err
	}
	for _, n := range c.Live() {
		if n != leader {
			return leader, n, nil
		}
	}
	return nil, nil, errors.New("integration: no node runs besides the leader")
}

// WaitLeader polls until every live node names the same leader and that
// leader runs, and returns it. On timeout the error says what each node
// said last.
func (c *Cluster) WaitLeader(timeout time.Duration) (*Node, error) {
	var leader *Node
	err := Poll(timeout, 50*time.Millisecond, func() error {
		live := c.Live()
		if len(live) == 0 {
			return errors.New("no node runs")
		}
		views := make([]string, 0, len(live))
		ids := map[string]bool{}
		for _, n := range live {
			id, err := n.leaderID()
			if err != nil {
				views = append(views, fmt.Sprintf("%s: %v", n.ID, err))
				ids["?"] = true
				continue
			}
			views = append(views, fmt.Sprintf("%s: leader %s", n.ID, id))
			ids[id] = true
		}
		if len(ids) != 1 {
			return fmt.Errorf("nodes disagree: %s", strings.Join(views, "; "))
		}
		for id := range ids {
			leader = c.Node(id)
		}
		if leader == nil || !leader.Running() {
			return fmt.Errorf("the named leader does not run: %s", strings.Join(views, "; "))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("integration: waiting for one leader: %w", err)
	}
	return leader, nil
}

// Logs returns the last lines of every node's log, for a failure report.
func (c *Cluster) Logs(lines int) string {
	var b strings.Builder
	for _, n := range c.Nodes {
		fmt.Fprintf(&b, "----- %s (%s) last %d lines of %s -----\n%s\n", n.ID, n.state(), lines, n.LogPath, n.Tail(lines))
	}
	return b.String()
}

// CopyLogs copies every node's log into dir.
func (c *Cluster) CopyLogs(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, n := range c.Nodes {
		b, err := os.ReadFile(n.LogPath)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(n.LogPath)), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// HTTPClient returns a plain HTTP client for the nodes' APIs (with the
// harness's TLS config when the cluster runs TLS).
func (c *Cluster) HTTPClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = c.clientTLS().Clone() // a Transport writes its ALPN protocols into it
	return &http.Client{Timeout: timeout, Transport: tr}
}
