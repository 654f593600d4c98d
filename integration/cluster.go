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
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/internal/certs"
	"github.com/cairn-sd/cairn/internal/pki"
)

// Environment variables the harness reads.
const (
	// EnvBin names a prebuilt cairn binary to use instead of building one.
	EnvBin = "CAIRN_BIN"
	// EnvBinRace, set to 1, builds the binary with -race, so that data
	// races in the server fail the server (and the test) too.
	EnvBinRace = "CAIRN_BIN_RACE"
	// EnvArtifacts names a directory where StartCluster copies every
	// node's log when a test ends, under the test's name.
	EnvArtifacts = "CAIRN_TEST_ARTIFACTS"
)

// addrsFile is what a server writes to its data dir once it listens
// (cmd.AddrsFile; not imported so that this package links no server code).
const addrsFile = "addrs.json"

var build struct {
	once sync.Once
	dir  string // removed by RemoveBinary; empty when EnvBin was used
	bin  string
	err  error
}

// Binary returns the path of the cairn binary: $CAIRN_BIN if set,
// otherwise one built with `go build` into a temporary directory, once per
// process; that needs the go command in PATH and a working directory
// inside the module.
func Binary() (string, error) {
	build.once.Do(func() {
		if p := os.Getenv(EnvBin); p != "" {
			abs, err := filepath.Abs(p)
			if err == nil {
				_, err = os.Stat(abs)
			}
			if err != nil {
				build.err = fmt.Errorf("$%s=%q: %w", EnvBin, p, err)
				return
			}
			build.bin = abs
			return
		}
		dir, err := os.MkdirTemp("", "cairn-integration-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.dir = dir
		bin := filepath.Join(dir, "cairn")
		args := []string{"build", "-o", bin}
		if os.Getenv(EnvBinRace) == "1" {
			args = append(args, "-race")
		}
		args = append(args, "github.com/cairn-sd/cairn/cmd/cairn")
		out, err := exec.Command("go", args...).CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
			return
		}
		build.bin = bin
	})
	return build.bin, build.err
}

// RemoveBinary deletes the binary Binary built (never one named by
// $CAIRN_BIN). Call it once every cluster is closed, from TestMain.
func RemoveBinary() {
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
}

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
	// hosts of the tests' netlab (netlab_test.go), for a fault that lives in the network between
	// the servers. The nodes need --insecure-plaintext (or TLS) then.
	Hosts []Host
	// TLS runs every node with --tls-cert, --tls-key and --tls-ca, from a
	// private CA the harness makes in Dir (Cluster.TLS), and its clients
	// over https with a client certificate of that CA.
	TLS bool
}

// Host is a network namespace a node runs in, and its address there.
type Host struct{ Netns, Addr string }

// TLS is a cluster's private CA and the files made from it.
type TLS struct {
	Dir    string  // where the files are
	CA     pki.PEM // the CA, to sign more certificates with
	CAFile string  // the bundle every node trusts (--tls-ca)
	// ClientCert and ClientKey are a client certificate of the CA (the
	// harness's, and the CLI's in runCLI).
	ClientCert, ClientKey string
	// Client is the harness clients' TLS config: it follows the files
	// on Reload.
	Client *tls.Config
	files  *certs.Files
}

// Reload makes the harness's clients re-read the CA bundle and their
// certificate (after a test rewrote them).
func (t *TLS) Reload() error { return t.files.Reload() }

// WriteCert signs a certificate with the cluster's CA and writes it as
// name.pem and name-key.pem in Dir.
func (t *TLS) WriteCert(name string, req pki.Request) (cert, key string, err error) {
	return WriteCert(t.Dir, name, t.CA, req)
}

// WriteCert signs a certificate with ca and writes it as name.pem and
// name-key.pem in dir. A zero validity is an hour.
func WriteCert(dir, name string, ca pki.PEM, req pki.Request) (cert, key string, err error) {
	if req.Validity == 0 {
		req.Validity = time.Hour
	}
	if req.CommonName == "" {
		req.CommonName = name
	}
	p, err := pki.NewCert(ca, req, time.Now())
	if err != nil {
		return "", "", err
	}
	cert, key = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	// The key first, then the certificate: each file whole (a rename), so
	// that a server re-reading them sees the old pair, a mismatched one
	// it refuses, or the new pair.
	if err := writeAtomic(key, p.Key); err != nil {
		return "", "", err
	}
	return cert, key, writeAtomic(cert, p.Cert)
}

func writeAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// NewTLS makes a private CA in dir, with a client certificate.
func NewTLS(dir string) (*TLS, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := pki.NewCA("cairn integration CA", 24*time.Hour, time.Now())
	if err != nil {
		return nil, err
	}
	t := &TLS{Dir: dir, CA: ca, CAFile: filepath.Join(dir, "ca.pem")}
	if err := writeAtomic(t.CAFile, ca.Cert); err != nil {
		return nil, err
	}
	if t.ClientCert, t.ClientKey, err = t.WriteCert("client", pki.Request{}); err != nil {
		return nil, err
	}
	f, err := certs.Load(certs.Config{CAFile: t.CAFile, CertFile: t.ClientCert, KeyFile: t.ClientKey, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return nil, err
	}
	t.Client, t.files = f.ClientConfig(""), f
	return t, nil
}

// Cluster is a set of cairn server processes on loopback.
type Cluster struct {
	cfg   Config
	Nodes []*Node
	// TLS is the cluster's CA and files when Config.TLS is set.
	TLS *TLS
}

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
	if cfg.TLS {
		if c.TLS, err = NewTLS(filepath.Join(cfg.Dir, "tls")); err != nil {
			return nil, err
		}
	}
	for i := range cfg.Nodes {
		id := fmt.Sprintf("n%d", i+1)
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

// clientTLS is the harness clients' TLS config, nil without TLS.
func (c *Cluster) clientTLS() *tls.Config {
	if c.TLS == nil {
		return nil
	}
	return c.TLS.Client
}

// Metric reads an unlabelled sample from the node's /metrics.
func (n *Node) Metric(ctx context.Context, name string) (float64, error) {
	hc := n.c.HTTPClient(3 * time.Second)
	defer hc.CloseIdleConnections()
	return scrapeMetric(ctx, hc, n.URL(), n.ID, name)
}

// cliTLSArgs are the CLI's global flags for the cluster's TLS (none
// without).
func (c *Cluster) cliTLSArgs() []string {
	if c.TLS == nil {
		return nil
	}
	return []string{"--ca-file", c.TLS.CAFile, "--client-cert", c.TLS.ClientCert, "--client-key", c.TLS.ClientKey}
}

// HTTPClient returns a plain HTTP client for the nodes' APIs (with the
// harness's TLS config when the cluster runs TLS).
func (c *Cluster) HTTPClient(timeout time.Duration) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = c.clientTLS().Clone() // a Transport writes its ALPN protocols into it
	return &http.Client{Timeout: timeout, Transport: tr}
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
	return append(args, n.c.cfg.Args...)
}

// Start starts the node's process and waits until /readyz answers 200.
// It fails if the node runs already.
//
// FreePorts' ports were free a moment before: another process (a parallel
// test package) can take one first. A node that has never been ready and
// exits because an address is in use is started again on fresh ports, up
// to three times.
func (n *Node) Start() error {
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
		fresh, exited := !n.started, n.done != nil && isClosed(n.done)
		n.mu.Unlock()
		if !fresh || !exited || try == 3 || !strings.Contains(n.Tail(30), "address already in use") {
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

// WaitReady polls until the node has written addrs.json naming its own
// addresses (node id, HTTP, raft and DNS) and /readyz answers 200. It
// fails at once if the process exits, and on timeout it reports the last
// state it saw.
func (n *Node) WaitReady(timeout time.Duration) error {
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
			return &stopPolling{fmt.Errorf("%s exited before it was ready: %s", n.ID, n.state())}
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
		return fmt.Errorf("integration: %s not ready: %w\n%s", n.ID, err, n.Tail(30))
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

// stopPolling makes Poll give up at once.
type stopPolling struct{ err error }

func (s *stopPolling) Error() string { return s.err.Error() }

// Poll calls f every interval until it returns nil, or until timeout; the
// error then carries f's last error, the last state observed.
func Poll(timeout, interval time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := f()
		if err == nil {
			return nil
		}
		var stop *stopPolling
		if errors.As(err, &stop) {
			return stop.err
		}
		if !time.Now().Before(deadline) {
			return fmt.Errorf("still failing after %s: %w", timeout, err)
		}
		<-t.C
	}
}

// StartCluster starts an n-node cluster for a test, in the test's temp
// dir. Every process is killed when the test ends; if the test failed,
// the tail of every node's log is printed first. Extra server flags go in
// args.
func StartCluster(t testing.TB, nodes int, args ...string) *Cluster {
	t.Helper()
	return StartClusterAs(t, "", nodes, args...)
}

// StartClusterAs is StartCluster with the nodes' clients sending token.
func StartClusterAs(t testing.TB, token string, nodes int, args ...string) *Cluster {
	t.Helper()
	return StartClusterWith(t, Config{Nodes: nodes, Args: args, Token: token})
}

// StartTLSCluster is StartCluster with TLS on every listener and mutual
// TLS between the servers (Config.TLS).
func StartTLSCluster(t testing.TB, nodes int, args ...string) *Cluster {
	t.Helper()
	return StartClusterWith(t, Config{Nodes: nodes, Args: args, TLS: true})
}

// StartClusterWith starts the cluster cfg describes (Dir and Logf are the
// test's) and stops it when the test ends.
func StartClusterWith(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	nodes := cfg.Nodes
	// Timestamps as in the servers' logs, to line the two up.
	logf := func(format string, args ...any) {
		t.Logf("%s harness: %s", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	cfg.Dir, cfg.Logf = t.TempDir(), logf
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node logs:\n%s", c.Logs(60))
		}
		c.Close()
		if dir := os.Getenv(EnvArtifacts); dir != "" {
			if err := c.CopyLogs(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))); err != nil {
				t.Errorf("keeping the node logs: %v", err)
			}
		}
	})
	if err := c.Start(); err != nil {
		t.Fatalf("starting a %d-node cluster: %v", nodes, err)
	}
	logf("%d-node cluster ready", nodes)
	return c
}

// Eventually polls f every 50ms until it returns nil, and fails the test
// with f's last error if that takes longer than timeout.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	if err := Poll(timeout, 50*time.Millisecond, f); err != nil {
		t.Fatal(err)
	}
}
