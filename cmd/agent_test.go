package cmd

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/cmd/internal/agentcmd"
)

// TestAgentStartsWithDefaults: `cairn agent` with no server reachable
// and nothing but its required flags (and loopback ports of its own)
// starts, serves its zone's apex — the NS record with its name server's
// address, the SOA — and stops cleanly.
func TestAgentStartsWithDefaults(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	logw := &tWriter{t: t}
	go func() {
		done <- Run(ctx, []string{"cairn", "agent", "--server", closedAddr(t), "--data-dir", dir,
			"--dns-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"}, io.Discard, logw)
	}()
	defer logw.close()
	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-done
		}
	}()
	var addrs struct{ HTTP, DNS string }
	eventually(t, 30*time.Second, func() error {
		select {
		case code := <-done:
			stopped = true
			t.Fatalf("the agent exited %d before it listened", code)
		default:
		}
		b, err := os.ReadFile(filepath.Join(dir, agentcmd.AddrsFile))
		if err != nil {
			return err
		}
		return json.Unmarshal(b, &addrs)
	})

	q := new(dns.Msg)
	q.SetQuestion("cairn.internal.", dns.TypeNS)
	r, _, err := (&dns.Client{Timeout: 3 * time.Second}).Exchange(q, addrs.DNS)
	if err != nil {
		t.Fatal(err)
	}
	var glue []string
	for _, rr := range r.Extra {
		if a, ok := rr.(*dns.A); ok && a.Hdr.Name == "ns.cairn.internal." {
			glue = append(glue, a.A.String())
		}
	}
	if r.Rcode != dns.RcodeSuccess || !r.Authoritative || len(r.Answer) != 1 || len(glue) != 1 || glue[0] != "127.0.0.1" {
		t.Errorf("NS of the apex: %s aa=%v, answer %v, glue %v; want NOERROR, authoritative, ns.cairn.internal. at 127.0.0.1",
			dns.RcodeToString[r.Rcode], r.Authoritative, r.Answer, glue)
	}
	resp, err := http.Get("http://" + addrs.HTTP + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz: %s", resp.Status)
	}

	cancel()
	stopped = true
	select {
	case code := <-done:
		if code != exitOK {
			t.Errorf("the agent exited %d once stopped; want %d", code, exitOK)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the agent still runs 30s after it was stopped")
	}
}

// TestAgentFlagErrors: bad flags are usage errors (exit 2) that name
// the flag and the rule, before anything is opened.
func TestAgentFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--service", "shop"}, `--service: "shop" is not NAMESPACE/SERVICE`},
		{[]string{"--service", "shop/Not A Label"}, "--service"},
		{[]string{"--stale-after", "24h"}, "--stale-after"},
		{[]string{"--dns-addr", "nowhere"}, "--dns-addr"},
	} {
		args := append([]string{"agent", "--dev", "--server", "127.0.0.1:1"}, tc.args...)
		code, _, stderr := run(t, args...)
		if code != exitUsage || !strings.Contains(stderr, tc.want) {
			t.Errorf("cairn %v: exit %d, %q; want %d naming %q", args, code, stderr, exitUsage, tc.want)
		}
	}
}
