package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

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
	c := PrepareCluster(t, cfg)
	if err := c.Start(); err != nil {
		t.Fatalf("starting a %d-node cluster: %v", cfg.Nodes, err)
	}
	c.cfg.Logf("%d-node cluster ready", cfg.Nodes)
	return c
}

// PrepareCluster is StartClusterWith without the start: the cluster's
// ports and directories are known, for the flags of another cluster (a
// region that follows it) before either starts. Start it with Start.
func PrepareCluster(t testing.TB, cfg Config) *Cluster {
	t.Helper()
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
			t.Logf("%s node logs:\n%s", c.cfg.Name, c.Logs(60))
		}
		c.Close()
		if dir := os.Getenv(EnvArtifacts); dir != "" {
			if err := c.CopyLogs(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))); err != nil {
				t.Errorf("keeping the node logs: %v", err)
			}
		}
	})
	return c
}

// Missing skips t for a reason the machine gives (a tool, root, a
// device), prefixed by what needs it, except under CI=true, where
// nothing may skip and t fails instead.
func Missing(t testing.TB, what, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s: %s, and nothing may skip under CI=true", what, why)
	}
	t.Skipf("%s: %s", what, why)
}

// Eventually polls f every 50ms until it returns nil, and fails the test
// with f's last error if that takes longer than timeout.
func Eventually(t testing.TB, timeout time.Duration, f func() error) {
	t.Helper()
	if err := Poll(timeout, 50*time.Millisecond, f); err != nil {
		t.Fatal(err)
	}
}

// NeedProcesses skips a real-process test under -short, except under
// CI=true, where nothing may skip.
func NeedProcesses(t testing.TB) {
	t.Helper()
	if !testing.Short() {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("-short would skip this real-process test, and nothing may skip under CI=true")
	}
	t.Skip("starts real cairn processes; skipped under -short")
}
