package agentcmd

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/urfave/cli/v2"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/cmd/internal/daemon"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestCairnAgentRuns: cairn-agent, with no server reachable and its
// required flags (loopback ports of its own, a --token, the profiles on
// loopback), starts, serves its zone's apex and its HTTP API, and exits
// 0 once stopped.
func TestCairnAgentRuns(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logw := &tWriter{t: t}
	defer logw.close()
	go func() {
		done <- Run(ctx, []string{"cairn-agent", "--server", closedAddr(t), "--data-dir", dir, "--token", "t0k",
			"--dns-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "127.0.0.1:0"}, io.Discard, logw)
	}()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	var addrs struct{ HTTP, DNS string }
	deadline := time.Now().Add(30 * time.Second)
	tick := time.NewTicker(20 * time.Millisecond) // a poll with a deadline: the file is the signal
	defer tick.Stop()
	for {
		select {
		case code := <-done:
			stopped = true
			t.Fatalf("cairn-agent exited %d before it listened", code)
		default:
		}
		b, err := os.ReadFile(filepath.Join(dir, AddrsFile))
		if err == nil && json.Unmarshal(b, &addrs) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s after 30s: %v", AddrsFile, err)
		}
		<-tick.C
	}

	q := new(dns.Msg)
	q.SetQuestion("cairn.internal.", dns.TypeSOA)
	r, _, err := (&dns.Client{Timeout: 3 * time.Second}).Exchange(q, addrs.DNS)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 1 {
		t.Errorf("SOA of the apex: %s aa=%v, answer %v; want NOERROR, authoritative, one SOA", dns.RcodeToString[r.Rcode], r.Authoritative, r.Answer)
	}
	hc := &http.Client{Timeout: 3 * time.Second}
	defer hc.CloseIdleConnections()
	resp, err := hc.Get("http://" + addrs.HTTP + "/v1/agent/status")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /v1/agent/status: %s", resp.Status)
	}

	cancel()
	stopped = true
	select {
	case code := <-done:
		if code != daemon.ExitOK {
			t.Errorf("cairn-agent exited %d once stopped; want %d", code, daemon.ExitOK)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("cairn-agent still runs 30s after it was stopped")
	}
}

// TestCairnAgentFlags: cairn-agent reads the flags `cairn agent` does,
// and --token (cairn's global flag) as its own, from the flag or
// CAIRN_TOKEN; bad flags are usage errors (exit 2) naming the flag,
// before anything is opened.
func TestCairnAgentFlags(t *testing.T) {
	var got config
	app := App(io.Discard, io.Discard)
	app.Action = func(c *cli.Context) (err error) {
		got, err = configFromFlags(c)
		return err
	}
	if err := app.Run([]string{"cairn-agent", "--dev", "--server", "127.0.0.1:1", "--token", "t0k", "--service", "shop/front",
		"--region", "eu", "--table-capacity", "512"}); err != nil {
		t.Fatal(err)
	}
	if got.Token != "t0k" || len(got.Services) != 1 || got.Region != "eu" || got.TableCapacity != 512 || got.DNSAddr != "127.0.0.1:8054" ||
		got.GCPercent != daemon.DefaultGCPercent {
		t.Errorf("config %+v; want token t0k, service shop/front, region eu, 512 slots, the default DNS address and GOGC", got)
	}
	t.Setenv("CAIRN_TOKEN", "from-env")
	if err := app.Run([]string{"cairn-agent", "--dev", "--server", "127.0.0.1:1"}); err != nil || got.Token != "from-env" {
		t.Errorf("CAIRN_TOKEN: token %q, %v; want from-env", got.Token, err)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--service", "shop"}, `--service: "shop" is not NAMESPACE/SERVICE`},
		{[]string{"--stale-after", "24h"}, "--stale-after"},
		{[]string{"--dns-addr", "nowhere"}, "--dns-addr"},
		{[]string{"--debug-addr", "0.0.0.0:6060"}, "--debug-addr"},
		{[]string{"--gc-percent", "5"}, "--gc-percent"},
		{[]string{"--no-such-flag"}, "no-such-flag"},
	} {
		var stderr strings.Builder
		args := append([]string{"cairn-agent", "--dev", "--server", "127.0.0.1:1"}, tc.args...)
		if code := Run(context.Background(), args, io.Discard, &stderr); code != daemon.ExitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v: exit %d, %q; want %d naming %q", args, code, stderr.String(), daemon.ExitUsage, tc.want)
		}
	}
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// tWriter sends the agent's log to the test's until close: a line
// logged after the test ended would panic.
type tWriter struct {
	mu     sync.Mutex
	t      *testing.T
	closed bool
}

func (w *tWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

func (w *tWriter) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
}
