package integration

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Files of an agent's data dir (agentcmd.AddrsFile, agentcmd.ViewsFile;
// not imported, as for addrsFile).
const (
	agentAddrsFile = "agent-addrs.json"
	// AgentViewsFile holds the views an agent keeps; the previous copy
	// is beside it, with tablefile's ".prev" suffix.
	AgentViewsFile = "views.cairn"
)

// AgentConfig describes an agent to run.
type AgentConfig struct {
	// Dir holds the agent's data dir and log. Required.
	Dir string
	// Servers are the servers' gRPC addresses (--server). At least one.
	Servers []string
	// Bin is the cairn binary; defaults to Binary().
	Bin string
	// AgentBin, if set, is a cairn-agent binary (AgentBinary()) the agent
	// runs as instead of Bin's `cairn agent`: the same flags, --token
	// among them, without the command's name.
	AgentBin string
	// Args are extra `cairn agent` flags.
	Args []string
	// Token is the agent's --token (ACLs on the servers); empty: none.
	Token string
	// Name names the agent in the harness's lines; defaults to "agent".
	Name string
	// ReadyTimeout bounds each wait in Start; defaults to 30s.
	ReadyTimeout time.Duration
	// Logf, if set, receives a line for each start, stop and kill.
	Logf func(format string, args ...any)
}

// Agent is one `cairn agent` (or cairn-agent) process on loopback. Its ports, data dir
// and node id stay the same across restarts, and its views file with
// them.
type Agent struct {
	DataDir  string
	HTTPAddr string
	// DNSAddr is the agent's DNS address, UDP and TCP (--dns-addr).
	DNSAddr string

	cfg AgentConfig
	// proc is the agent process: its log (LogPath), Running, Kill, Stop
	// and Tail.
	proc
	started bool // guarded by proc.mu; has listened once: its ports are its identity from then on
}

// NewAgent prepares an agent on free loopback ports. It starts nothing;
// call Start.
func NewAgent(cfg AgentConfig) (*Agent, error) {
	if cfg.Dir == "" {
		return nil, errors.New("integration: AgentConfig.Dir is required")
	}
	if len(cfg.Servers) == 0 {
		return nil, errors.New("integration: AgentConfig.Servers names no server")
	}
	if cfg.Bin == "" {
		bin, err := Binary()
		if err != nil {
			return nil, err
		}
		cfg.Bin = bin
	}
	if cfg.Name == "" {
		cfg.Name = "agent"
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	a := &Agent{DataDir: filepath.Join(cfg.Dir, cfg.Name), cfg: cfg,
		proc: proc{name: cfg.Name, LogPath: filepath.Join(cfg.Dir, cfg.Name+".log"), logf: cfg.Logf}}
	if err := a.setPorts(); err != nil {
		return nil, err
	}
	return a, nil
}

func (a *Agent) setPorts() error {
	ports, err := FreePorts(2)
	if err != nil {
		return err
	}
	a.HTTPAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
	a.DNSAddr = fmt.Sprintf("127.0.0.1:%d", ports[1])
	return nil
}

// URL returns the agent's HTTP base URL.
func (a *Agent) URL() string { return "http://" + a.HTTPAddr }

// ViewsPath returns the path of the agent's views file.
func (a *Agent) ViewsPath() string { return filepath.Join(a.DataDir, AgentViewsFile) }

func (a *Agent) args() []string {
	var args []string
	if a.cfg.Token != "" {
		args = append(args, "--token", a.cfg.Token) // cairn's global flag: before the command
	}
	if a.cfg.AgentBin == "" {
		args = append(args, "agent")
	}
	args = append(args, "--data-dir", a.DataDir, "--node-id", a.cfg.Name,
		"--dns-addr", a.DNSAddr, "--http-addr", a.HTTPAddr)
	for _, s := range a.cfg.Servers {
		args = append(args, "--server", s)
	}
	return append(args, a.cfg.Args...)
}

// Start starts the agent and waits until it listens (WaitListening): an
// agent with no view and no server is not ready, yet it runs and
// answers. It fails if the agent runs already. An agent that has never
// listened and exits because an address is in use is started again on
// fresh ports, up to three times (see Node.Start).
func (a *Agent) Start() error {
	for try := 1; ; try++ {
		if err := a.spawn(); err != nil {
			return err
		}
		err := a.WaitListening(a.cfg.ReadyTimeout)
		if err == nil {
			a.mu.Lock()
			a.started = true
			a.mu.Unlock()
			return nil
		}
		a.mu.Lock()
		fresh, exited := !a.started, a.done != nil && isClosed(a.done)
		a.mu.Unlock()
		if !fresh || !exited || try == 3 || !strings.Contains(a.Tail(30), "address already in use") {
			return err
		}
		if perr := a.setPorts(); perr != nil {
			return errors.Join(err, perr)
		}
		a.logf("%s: a port was taken; starting again on fresh ports", a.name)
	}
}

// spawn starts the process and returns at once.
func (a *Agent) spawn() error {
	if a.Running() {
		return fmt.Errorf("integration: %s runs already (%s)", a.name, a.state())
	}
	if err := os.MkdirAll(a.DataDir, 0o700); err != nil {
		return err
	}
	// A stale agent-addrs.json would let WaitListening trust another
	// process on our port.
	if err := os.Remove(filepath.Join(a.DataDir, agentAddrsFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return a.start(cmp.Or(a.cfg.AgentBin, a.cfg.Bin), a.args(), fmt.Sprintf("dns %s, http %s", a.DNSAddr, a.HTTPAddr))
}

// WaitListening polls until the agent has written agent-addrs.json
// naming its own addresses and /healthz answers 200. It fails at once if
// the process exits.
func (a *Agent) WaitListening(timeout time.Duration) error {
	return a.waitHTTP(timeout, "/healthz")
}

// WaitReady is WaitListening, then until /readyz answers 200: the agent
// holds views (from a server or from its file) or a server has
// answered.
func (a *Agent) WaitReady(timeout time.Duration) error {
	return a.waitHTTP(timeout, "/readyz")
}

func (a *Agent) waitHTTP(timeout time.Duration, path string) error {
	a.mu.Lock()
	done := a.done
	a.mu.Unlock()
	if done == nil {
		return fmt.Errorf("integration: %s was never started", a.name)
	}
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	err := Poll(timeout, 20*time.Millisecond, func() error {
		if isClosed(done) {
			return &stopPolling{fmt.Errorf("%s exited: %s", a.name, a.state())}
		}
		b, err := os.ReadFile(filepath.Join(a.DataDir, agentAddrsFile))
		if err != nil {
			return fmt.Errorf("%s not written yet", agentAddrsFile)
		}
		var got struct {
			NodeID string `json:"node_id"`
			HTTP   string `json:"http"`
			DNS    string `json:"dns"`
		}
		if err := json.Unmarshal(b, &got); err != nil {
			return fmt.Errorf("%s: %v", agentAddrsFile, err)
		}
		if got.NodeID != a.cfg.Name || got.HTTP != a.HTTPAddr || got.DNS != a.DNSAddr {
			return &stopPolling{fmt.Errorf("%s says %s; want node %s, http %s, dns %s", agentAddrsFile, b, a.cfg.Name, a.HTTPAddr, a.DNSAddr)}
		}
		resp, err := hc.Get(a.URL() + path)
		if err != nil {
			return fmt.Errorf("GET %s: %v", path, err)
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("integration: %s: %w\n%s", a.name, err, a.Tail(30))
	}
	return nil
}

// AgentStatus is GET /v1/agent/status, as a client reads it: declared
// here rather than taken from package agent, so that a change of the
// JSON's names breaks these tests as it would break its readers.
type AgentStatus struct {
	Server    string            `json:"server"`
	Connected bool              `json:"connected"`
	Restored  bool              `json:"restored"`
	Views     []AgentViewStatus `json:"views"`
	Absent    []string          `json:"absent"`
}

// AgentViewStatus is one view of an AgentStatus.
type AgentViewStatus struct {
	Name       string    `json:"name"`
	Revision   uint64    `json:"revision"`
	Received   time.Time `json:"received"`
	Refreshed  time.Time `json:"refreshed"`
	AgeSeconds float64   `json:"age_seconds"`
	Stale      bool      `json:"stale"`
	Instances  int       `json:"instances"`
	Eligible   int       `json:"eligible"`
	Deferred   int       `json:"deferred"`
}

// View returns the view named name ("<svc>.<ns>"), if the status holds
// it.
func (s AgentStatus) View(name string) (AgentViewStatus, bool) {
	for _, v := range s.Views {
		if v.Name == name {
			return v, true
		}
	}
	return AgentViewStatus{}, false
}

// Status returns GET /v1/agent/status.
func (a *Agent) Status(ctx context.Context) (AgentStatus, error) {
	var st AgentStatus
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL()+"/v1/agent/status", nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, fmt.Errorf("%s /v1/agent/status: %w", a.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s /v1/agent/status: %s", a.name, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return st, fmt.Errorf("%s /v1/agent/status: %w", a.name, err)
	}
	return st, nil
}

// Metric reads an unlabelled sample from the agent's /metrics.
func (a *Agent) Metric(ctx context.Context, name string) (float64, error) {
	return scrapeMetric(ctx, http.DefaultClient, a.URL(), a.name, name)
}

// scrapeMetric reads an unlabelled sample from base's /metrics with hc;
// who names the process in errors.
func scrapeMetric(ctx context.Context, hc *http.Client, base, who, name string) (float64, error) {
	var f float64
	found := false
	err := scrape(ctx, hc, base, who, func(line string) (bool, error) {
		v, ok := strings.CutPrefix(line, name+" ")
		if !ok {
			return true, nil
		}
		var err error
		f, err = strconv.ParseFloat(v, 64)
		found = err == nil
		return false, err
	})
	if err == nil && !found {
		err = fmt.Errorf("%s /metrics has no sample %s", who, name)
	}
	return f, err
}

// scrapeMetrics returns the samples of base's /metrics whose series (name
// and labels, as exposed) starts with prefix.
func scrapeMetrics(ctx context.Context, hc *http.Client, base, who, prefix string) (map[string]float64, error) {
	out := map[string]float64{}
	err := scrape(ctx, hc, base, who, func(line string) (bool, error) {
		if !strings.HasPrefix(line, prefix) {
			return true, nil
		}
		i := strings.LastIndexByte(line, ' ')
		f, err := strconv.ParseFloat(line[i+1:], 64)
		out[line[:max(i, 0)]] = f
		return true, err
	})
	return out, err
}

// scrape reads base's /metrics, a line at a time, while each says go on.
func scrape(ctx context.Context, hc *http.Client, base, who string, each func(line string) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s /metrics: %w", who, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		more, err := each(sc.Text())
		if err != nil {
			return fmt.Errorf("%s /metrics: %q: %v", who, sc.Text(), err)
		}
		if !more {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s /metrics: %w", who, err)
	}
	return nil
}

// StartAgent starts an agent of servers for a test, in the test's temp
// dir, with extra `cairn agent` flags in args, and waits until it
// listens. It is killed when the test ends; if the test failed, the
// tail of its log is printed first (and the log kept under
// $CAIRN_TEST_ARTIFACTS, as StartCluster does).
func StartAgent(t testing.TB, servers []string, args ...string) *Agent {
	t.Helper()
	return StartAgentWith(t, AgentConfig{Servers: servers, Args: args})
}

// StartAgentWith is StartAgent for the agent cfg describes (Dir and Logf
// are the test's): one of several in a test (Name), or with a Token.
func StartAgentWith(t testing.TB, cfg AgentConfig) *Agent {
	t.Helper()
	cfg.Logf = func(format string, args ...any) {
		t.Logf("%s harness: %s", time.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
	cfg.Dir = t.TempDir()
	a, err := NewAgent(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("----- %s (%s) last 60 lines of %s -----\n%s", a.name, a.state(), a.LogPath, a.Tail(60))
		}
		if a.Running() {
			a.Kill()
		}
		if art := os.Getenv(EnvArtifacts); art != "" {
			if err := copyFile(a.LogPath, filepath.Join(art, strings.ReplaceAll(t.Name(), "/", "_"), filepath.Base(a.LogPath))); err != nil {
				t.Errorf("keeping the agent's log: %v", err)
			}
		}
	})
	if err := a.Start(); err != nil {
		t.Fatalf("starting an agent: %v", err)
	}
	return a
}

// copyFile copies src to dst, making dst's directory; a missing src is
// no error.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
