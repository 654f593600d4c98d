package integration

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestEnvoyOverTLS: a TLS cairn server and real Envoys from the shipped
// bootstrap with its TLS block, their client certificates made by the
// CLI (`cairn tls cert create --client --name envoy`). One with a
// certificate of cairn's CA takes the demo cluster and routes to the
// upstreams. One with a certificate of another CA (`cairn tls ca
// create`) is refused: for 5 s and until three connections to cairn
// have failed at TLS, it completes no handshake and never holds the
// cluster. One that trusts
// another CA than cairn's refuses the server: its verification of
// cairn's certificate fails, and it never holds the cluster either.
func TestEnvoyOverTLS(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	c := StartClusterWith(t, Config{Nodes: 1, Args: []string{"--allow-loopback-endpoints"}, TLS: true})
	ctx := ctxT(t, 3*time.Minute)
	applyDefinition(ctx, t, c, demoDefinition(t))
	us := newUpstreams(t, "web", 2)
	registerUpstreams(ctx, t, c, us, nil, nil)

	// cairn's CA, its key on disk as `cairn tls ca create` leaves it
	// (the harness's CA is valid for a day: the certificate for 12 h),
	// and another CA made by the CLI.
	ours := t.TempDir()
	caKey := filepath.Join(ours, "cairn-ca-key.pem")
	if err := os.WriteFile(caKey, c.TLS.CA.Key, 0o600); err != nil {
		t.Fatal(err)
	}
	theirs := t.TempDir()
	tlsCLI(ctx, t, "ca", "create", "--dir", theirs, "--common-name", "another CA")
	theirCA, theirKey := filepath.Join(theirs, "cairn-ca.pem"), filepath.Join(theirs, "cairn-ca-key.pem")
	tlsCLI(ctx, t, "cert", "create", "--client", "--name", "envoy", "--ca", c.TLS.CAFile, "--ca-key", caKey, "--dir", ours, "--validity", "12h")
	tlsCLI(ctx, t, "cert", "create", "--client", "--name", "envoy", "--ca", theirCA, "--ca-key", theirKey, "--dir", theirs)
	ourCert, ourKey := filepath.Join(ours, "envoy.pem"), filepath.Join(ours, "envoy-key.pem")
	theirCert, theirCertKey := filepath.Join(theirs, "envoy.pem"), filepath.Join(theirs, "envoy-key.pem")

	t.Run("a certificate of cairn's CA", func(t *testing.T) {
		e := startEnvoy(t, c, EnvoyConfig{Node: "envoy-tls", TLS: &EnvoyTLS{CA: c.TLS.CAFile, Cert: ourCert, Key: ourKey}})
		waitHosts(t, e, time.Minute, "the demo cluster over TLS", hostsAre("", us...))
		waitConnected(t, e, 1, 30*time.Second, "over TLS")
		by, own, err := spread(ctx, e, 20)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range us {
			if by[u.ID] < 5 {
				t.Errorf("%s answered %d of 20 requests through Envoy (all: %v; Envoy itself: %v)", u.ID, by[u.ID], by, own)
			}
		}
		if hs, ok, err := e.Stat(ctx, "cluster.cairn.ssl.handshake"); err != nil || !ok || hs < 1 {
			t.Errorf("cluster.cairn.ssl.handshake = %d (%v, %v); want the TLS handshakes Envoy made with cairn", hs, ok, err)
		}
	})

	for _, tc := range []struct {
		name, node string
		tls        EnvoyTLS
		// failures is the stat of cairn's cluster in Envoy that counts
		// the refusals.
		failures string
	}{
		{"a certificate of another CA", "envoy-foreign", EnvoyTLS{CA: c.TLS.CAFile, Cert: theirCert, Key: theirCertKey}, "cluster.cairn.ssl.connection_error"},
		{"a server of another CA", "envoy-untrusting", EnvoyTLS{CA: theirCA, Cert: ourCert, Key: ourKey}, "cluster.cairn.ssl.fail_verify_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := startEnvoy(t, c, EnvoyConfig{Node: tc.node, TLS: &tc.tls})
			// Refused while it tries, for 5 s and until three connections
			// failed at TLS: every 100 ms, no cluster from cairn and no
			// TLS handshake completed. (Its control_plane.connected_state
			// is 1 for a moment at each attempt: Envoy sets it when it
			// opens a stream, before the connection is up.)
			start := time.Now()
			err := Poll(time.Minute, 100*time.Millisecond, func() error {
				if hs, err := e.Hosts(ctx, demoCluster); err != nil || len(hs) > 0 {
					return &stopPolling{fmt.Errorf("it holds %s (%v); want no cluster from cairn", hostLines(hs), err)}
				}
				if n, _, err := e.Stat(ctx, "cluster.cairn.ssl.handshake"); err != nil || n != 0 {
					return &stopPolling{fmt.Errorf("cluster.cairn.ssl.handshake = %d (%v); want none", n, err)}
				}
				tries, _, err := e.Stat(ctx, "cluster.cairn.upstream_cx_total")
				if err != nil {
					return err
				}
				failed, _, err := e.Stat(ctx, tc.failures)
				if err != nil {
					return err
				}
				if tries < 3 || failed < 3 || time.Since(start) < 5*time.Second {
					return fmt.Errorf("%d connections to cairn, %s = %d; watching for 5 s and three refused", tries, tc.failures, failed)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("%s: %v\n%s", e.name, err, envoyStats(ctx, e, "cluster.cairn.(ssl|upstream_cx)|control_plane"))
			}
			t.Logf("%s after %s: %s", e.name, time.Since(start).Round(time.Millisecond),
				strings.ReplaceAll(envoyStats(ctx, e, `^(cluster\.cairn\.(upstream_cx_total|ssl\.(handshake|connection_error|fail_verify_error))|control_plane\.connected_state)$`), "\n", ", "))
		})
	}
}

// tlsCLI runs `cairn tls ARGS`, the real CLI, failing the test if it
// fails.
func tlsCLI(ctx context.Context, t *testing.T, args ...string) {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"tls"}, args...)...)
	cmd.Env = childEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("cairn tls %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
}

// envoyStats returns Envoy's stats whose names match the regular
// expression re, one a line, for a failure's message.
func envoyStats(ctx context.Context, e *Envoy, re string) string {
	b, err := e.AdminGet(ctx, "/stats?filter="+url.QueryEscape(re))
	if err != nil {
		return err.Error()
	}
	return strings.TrimSpace(string(b))
}
