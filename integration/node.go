package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/client"
)

// addrsFile is what a server writes to its data dir once it listens
// (cmd.AddrsFile; not imported so that this package links no server code).
const addrsFile = "addrs.json"

// Node is one server. Its ports and data dir stay the same across
// restarts.
type Node struct {
	// Index is the node's position, from 1; node 1 bootstraps.
	Index    int
	ID       string
	DataDir  string
	HTTPAddr string
	RaftAddr string
	// DNSAddr is the node's DNS address, UDP and TCP (--dns-addr); the
	// node has confirmed it in addrs.json once it is ready.
	DNSAddr  string
	GRPCAddr string
	// CertFile and KeyFile are the node's --tls-cert and --tls-key when
	// the cluster runs TLS; rewrite them to rotate.
	CertFile, KeyFile string

	c      *Cluster
	client *client.Client
	host   Host // where it runs; zero: on loopback, in the test's namespace

	// proc is the server process: its log (LogPath), Running, Kill,
	// Stop, Pause, Resume and Tail.
	proc
	started bool // guarded by proc.mu; has been ready once: its ports are its identity from then on
}

// setPorts gives a node that has never run its addresses and a client
// for them.
func (n *Node) setPorts(p []int) error {
	ip := cmp.Or(n.host.Addr, "127.0.0.1")
	n.HTTPAddr = net.JoinHostPort(ip, strconv.Itoa(p[0]))
	n.RaftAddr = net.JoinHostPort(ip, strconv.Itoa(p[1]))
	n.DNSAddr = net.JoinHostPort(ip, strconv.Itoa(p[2]))
	n.GRPCAddr = net.JoinHostPort(ip, strconv.Itoa(p[3]))
	cl, err := client.NewTLS(n.URL(), n.c.cfg.Token, n.c.clientTLS())
	if err != nil {
		return err
	}
	// The harness moves to the next node itself; a client retrying a
	// killed node would only hide how fast the cluster recovers.
	cl.RetryFor = -1
	n.client = cl
	return nil
}

// Client returns an API client for the node. It keeps working across
// restarts (the address does not change).
func (n *Node) Client() *client.Client { return n.client }

// URL returns the node's API base URL.
func (n *Node) URL() string {
	if n.c.TLS != nil {
		return "https://" + n.HTTPAddr
	}
	return "http://" + n.HTTPAddr
}

// Metric reads an unlabelled sample from the node's /metrics.
func (n *Node) Metric(ctx context.Context, name string) (float64, error) {
	hc := n.c.HTTPClient(3 * time.Second)
	defer hc.CloseIdleConnections()
	return scrapeMetric(ctx, hc, n.URL(), n.ID, name)
}

// Metrics returns the samples of the server's /metrics whose series
// (name and labels, as exposed) starts with prefix: a histogram's
// buckets, say.
func (n *Node) Metrics(ctx context.Context, prefix string) (map[string]float64, error) {
	hc := n.c.HTTPClient(3 * time.Second)
	defer hc.CloseIdleConnections()
	return scrapeMetrics(ctx, hc, n.URL(), n.ID, prefix)
}

// args returns the server's command line. Node 1 bootstraps (and resumes
// its state on a restart); any other node joins through a live node,
// node 1 if none other runs.
func (n *Node) args() []string {
	var args []string
	if n.Index > 1 && n.c.cfg.Token != "" {
		args = append(args, "--token", n.c.cfg.Token) // global: before the command
	}
	args = append(args, "server",
		"--data-dir", n.DataDir, "--node-id", n.ID,
		"--http-addr", n.HTTPAddr, "--raft-addr", n.RaftAddr,
		"--dns-addr", n.DNSAddr, "--grpc-addr", n.GRPCAddr,
		"--lame-duck", "0s")
	if n.Index > 1 {
		join := n.c.Nodes[0].HTTPAddr
		for _, o := range n.c.Nodes {
			if o != n && o.Running() {
				join = o.HTTPAddr
				break
			}
		}
		args = append(args, "--join", join)
	}
	if n.c.TLS != nil {
		args = append(args, "--tls-cert", n.CertFile, "--tls-key", n.KeyFile, "--tls-ca", n.c.TLS.CAFile)
	}
	args = append(args, n.c.cfg.Args...)
	if n.c.cfg.NodeArgs != nil {
		args = append(args, n.c.cfg.NodeArgs(n.Index)...)
	}
	return args
}

// Start starts the node's process and waits until /readyz answers 200.
// It fails if the node runs already.
//
// FreePorts' ports were free a moment before: another process (a parallel
// test package) can take one first. A node that has never been ready and
// exits because an address is in use is started again on fresh ports, up
// to three times; a node restarted on its own ports, once they are free.
func (n *Node) Start() error {
	n.mu.Lock()
	restart := n.started
	n.mu.Unlock()
	if restart {
		// A restart keeps its ports (the raft address is in the
		// cluster's configuration): Respawn waits out one taken meanwhile.
		if err := n.Respawn(); err != nil {
			return err
		}
		return n.WaitReady(n.c.cfg.ReadyTimeout)
	}
	for try := 1; ; try++ {
		if err := n.spawn(); err != nil {
			return err
		}
		err := n.WaitReady(n.c.cfg.ReadyTimeout)
		if err == nil {
			n.mu.Lock()
			n.started = true
			n.mu.Unlock()
			return nil
		}
		n.mu.Lock()
		exited := n.done != nil && isClosed(n.done)
		n.mu.Unlock()
		if !exited || try == 3 || !strings.Contains(n.Tail(30), "address already in use") {
			return err
		}
		ports, perr := FreePorts(4)
		if perr != nil {
			return errors.Join(err, perr)
		}
		if perr := n.setPorts(ports); perr != nil {
			return errors.Join(err, perr)
		}
		n.c.cfg.Logf("%s: a port was taken; starting again on fresh ports", n.ID)
	}
}

// portsFree reports an error while one of the node's TCP ports cannot
// be listened on.
func (n *Node) portsFree() error {
	for _, addr := range []string{n.HTTPAddr, n.RaftAddr, n.DNSAddr, n.GRPCAddr} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return err
		}
		ln.Close()
	}
	return nil
}

// Restart starts a node that was killed or stopped, with the same data
// dir and ports, and waits until it is ready.
func (n *Node) Restart() error { return n.Start() }

func (n *Node) spawn() error {
	args := n.args()
	if n.Running() {
		return fmt.Errorf("integration: %s runs already (%s)", n.ID, n.state())
	}
	if err := os.MkdirAll(n.DataDir, 0o700); err != nil {
		return err
	}
	// A stale addrs.json would let WaitReady trust another process on
	// our port; the server writes a fresh one once it listens.
	if err := os.Remove(filepath.Join(n.DataDir, addrsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	bin := n.c.cfg.Bin
	if n.host.Netns != "" {
		// ip execs the server in the namespace: the process is the
		// server's, and its signals reach it.
		bin, args = "ip", append([]string{"netns", "exec", n.host.Netns, bin}, args...)
	}
	return n.start(bin, args, fmt.Sprintf("http %s, raft %s", n.HTTPAddr, n.RaftAddr))
}

// Respawn starts a node that ran before again on its own ports, and
// waits only until it listens: alone, or serving a table it kept, it may
// never be ready. While it was down, one of its ports may have served
// as another connection's ephemeral port; Respawn waits until they are
// free, and starts it once more if it still exits on a taken port (three
// tries). Start restarts a node through it.
func (n *Node) Respawn() error {
	for try := 1; ; try++ {
		if n.host.Netns == "" {
			if err := Poll(10*time.Second, 100*time.Millisecond, n.portsFree); err != nil {
				return fmt.Errorf("integration: %s's ports: %w", n.ID, err)
			}
		}
		if err := n.spawn(); err != nil {
			return err
		}
		err := n.waitUp(n.c.cfg.ReadyTimeout, false)
		if err == nil || try == 3 || n.host.Netns != "" || !strings.Contains(n.Tail(5), "address already in use") {
			return err
		}
		n.c.cfg.Logf("%s: a port was taken; starting again on the same ports once free", n.ID)
	}
}

// WaitReady polls until the node has written addrs.json naming its own
// addresses (node id, HTTP, raft and DNS) and /readyz answers 200. It
// fails at once if the process exits, and on timeout it reports the last
// state it saw.
func (n *Node) WaitReady(timeout time.Duration) error { return n.waitUp(timeout, true) }

// waitUp is WaitReady, and without ready only waits for addrs.json: the
// server writes it once every listener is bound.
func (n *Node) waitUp(timeout time.Duration, ready bool) error {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return fmt.Errorf("integration: %s was never started", n.ID)
	}
	hc := n.c.HTTPClient(time.Second)
	defer hc.CloseIdleConnections()
	err := Poll(timeout, 50*time.Millisecond, func() error {
		if isClosed(done) {
			return &stopPolling{fmt.Errorf("%s exited before it was up: %s", n.ID, n.state())}
		}
		b, err := os.ReadFile(filepath.Join(n.DataDir, addrsFile))
		if err != nil {
			return fmt.Errorf("%s not written yet", addrsFile)
		}
		var a struct {
			NodeID string `json:"node_id"`
			HTTP   string `json:"http"`
			Raft   string `json:"raft"`
			DNS    string `json:"dns"`
		}
		if err := json.Unmarshal(b, &a); err != nil {
			return fmt.Errorf("%s: %v", addrsFile, err)
		}
		if a.NodeID != n.ID || a.HTTP != n.HTTPAddr || a.Raft != n.RaftAddr || a.DNS != n.DNSAddr {
			return &stopPolling{fmt.Errorf("%s says %s; want node %s, http %s, raft %s, dns %s", addrsFile, b, n.ID, n.HTTPAddr, n.RaftAddr, n.DNSAddr)}
		}
		if !ready {
			return nil
		}
		resp, err := hc.Get(n.URL() + "/readyz")
		if err != nil {
			return fmt.Errorf("GET /readyz: %v", err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET /readyz: %d %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return nil
	})
	if err != nil {
		what := "ready"
		if !ready {
			what = "listening"
		}
		return fmt.Errorf("integration: %s not %s: %w\n%s", n.ID, what, err, n.Tail(30))
	}
	return nil
}

// leaderID asks the node for the membership and returns the id it names
// leader.
func (n *Node) leaderID() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ms, err := n.client.Members(ctx)
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.Leader {
			return m.NodeID, nil
		}
	}
	return "", fmt.Errorf("no leader among %d members", len(ms))
}

// CLI returns the command that runs the cairn binary as a client of the
// node (--addr, the cluster's token and its TLS files when it has them) with args,
// bounded by ctx; its environment is the test's without CAIRN_*
// variables.
func (n *Node) CLI(ctx context.Context, args ...string) (*exec.Cmd, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	global := append([]string{"--addr", n.URL()}, n.c.cliTLSArgs()...)
	if tok := n.c.cfg.Token; tok != "" {
		global = append(global, "--token", tok)
	}
	cmd := exec.CommandContext(ctx, bin, append(global, args...)...)
	cmd.Env = childEnv()
	cmd.SysProcAttr = SysProcAttr()
	return cmd, nil
}
