package cmd

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/store"
)

// Secrets of the ACL files the tests write.
const (
	testProberN2 = "prober-n2-0123456789abcdef"
	testReader   = "reader-shop-0123456789abcd"
)

// TestServerRefusesBadProbeToken: `cairn server` with another node's
// prober token, or an ACL file that binds a node to a token of another
// scope, stops before it listens or writes anything.
func TestServerRefusesBadProbeToken(t *testing.T) {
	dir := t.TempDir()
	aclFile := filepath.Join(dir, "acl.yaml")
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(aclFile, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name, acl, probeToken string
		code                  int
		want                  string
	}{
		{"another node's prober token", "tokens:\n  - {secret: " + testProberN2 + ", scope: prober, node: n2}\n", testProberN2,
			exitError, "prober token of node n2 may not report as n1"},
		{"node on a reader token", "tokens:\n  - {secret: " + testReader + ", scope: reader, namespaces: [shop], node: n1}\n", "",
			exitUsage, "tokens[0]: node: only a prober token names a node"},
	} {
		t.Run(c.name, func(t *testing.T) {
			write(c.acl)
			data := filepath.Join(t.TempDir(), "data")
			args := []string{"cairn", "server", "--data-dir", data, "--node-id", "n1", "--acl-file", aclFile,
				"--http-addr", "127.0.0.1:0", "--raft-addr", "127.0.0.1:0", "--dns-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}
			if c.probeToken != "" {
				args = append(args, "--probe-token", c.probeToken)
			}
			// Were the token accepted, the server would run until this
			// deadline and the exit code would say so.
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			var out, errb bytes.Buffer
			code := Run(ctx, args, &out, &errb)
			if code != c.code || !strings.Contains(errb.String(), c.want) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, errb.String(), c.code, c.want)
			}
			if c.probeToken != "" && strings.Contains(errb.String(), c.probeToken) {
				t.Errorf("stderr %q repeats the secret", errb.String())
			}
			if ents, err := os.ReadDir(data); err == nil && len(ents) > 0 {
				t.Errorf("the refused server wrote %d entries to its data dir", len(ents))
			}
		})
	}
}

// TestRaftElectionTimeoutFlag: --raft-election-timeout reaches the
// server's config as given, the store's default when unset, and a value
// outside 100ms..10s is refused, naming the flag and the range, before
// the server writes anything.
func TestRaftElectionTimeoutFlag(t *testing.T) {
	parse := func(args ...string) time.Duration {
		t.Helper()
		var got serverConfig
		app := &cli.App{Flags: serverCommand().Flags, Action: func(c *cli.Context) (err error) {
			got, err = serverConfigFromFlags(c)
			return err
		}}
		if err := app.Run(append([]string{"x", "--data-dir", t.TempDir()}, args...)); err != nil {
			t.Fatal(err)
		}
		return got.RaftTimeout
	}
	if got := parse(); got != store.DefaultElectionTimeout {
		t.Errorf("unset: %s, want the store's default %s", got, store.DefaultElectionTimeout)
	}
	if got := parse("--raft-election-timeout", "400ms"); got != 400*time.Millisecond {
		t.Errorf("400ms: got %s", got)
	}
	for _, v := range []string{"99ms", "0s", "11s"} {
		wantServerUsage(t, []string{"--raft-election-timeout", v}, "--raft-election-timeout: "+v+" is not between 100ms and 10s")
	}
}

// TestServerRunsWithoutItsAddrsFile: a server that cannot write
// AddrsFile (here a directory stands at its name; on a full disk, ENOSPC)
// logs so and runs, ready and answering, rather than exiting: a server
// restarted on a full data disk still serves the table it kept.
func TestServerRunsWithoutItsAddrsFile(t *testing.T) {
	data := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(filepath.Join(data, AddrsFile, "in-the-way"), 0o700); err != nil {
		t.Fatal(err)
	}
	httpAddr := closedAddr(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	logs := &lockedBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- Run(ctx, []string{"cairn", "server", "--data-dir", data, "--node-id", "n1", "--http-addr", httpAddr,
			"--raft-addr", "127.0.0.1:0", "--dns-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--lame-duck", "0s"}, io.Discard, logs)
	}()
	eventually(t, 30*time.Second, func() error {
		select {
		case code := <-done:
			done <- code
			t.Fatalf("the server exited %d:\n%s", code, logs.String())
		default:
		}
		resp, err := http.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("/readyz: %d", resp.StatusCode)
		}
		return nil
	})
	if want := "writing the addresses the server bound; serving without the file"; !strings.Contains(logs.String(), want) {
		t.Errorf("the log does not say %q:\n%s", want, logs.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("exit %d after the stop", code)
		}
	case <-time.After(30 * time.Second):
		t.Error("still running 30s after it was stopped")
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent use.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
