package integration

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// renewerEnv makes the test binary an instance that renews its own lease
// every second until killed: "http-addr ns/svc/id incarnation".
const renewerEnv = "CAIRN_TEST_RENEWER"

// renew is what the test binary does when renewerEnv is set.
func renew(spec string) {
	f := strings.Fields(spec)
	parts := strings.Split(f[1], "/")
	inc, _ := strconv.ParseUint(f[2], 10, 64)
	cl, err := client.New(f[0], "")
	if err != nil {
		fmt.Fprintln(os.Stderr, "renewer:", err)
		os.Exit(2)
	}
	key := wire.InstanceKey{Namespace: parts[0], Service: parts[1], ID: parts[2]}
	fmt.Println("ready")
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, _ = cl.Renew(ctx, key, inc)
		cancel()
		time.Sleep(time.Second) // the renewal cadence of a real instance
	}
}

// TestCrashedSelfReportingInstanceExpires: an instance of a
// readiness: self service that renews its lease and reports ready is
// killed with SIGKILL and never deregisters. Its lease runs out (silence:
// it stays in DNS), and at its hard expiry, 5 × lease_ttl after its last
// renewal, it is terminated: out of DNS, with an audit event that says
// why (SPEC §2: crash detection never depends on a graceful
// deregistration).
func TestCrashedSelfReportingInstanceExpires(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 1, healthArgs...)
	n := c.Nodes[0]
	ctx := ctxT(t, 2*time.Minute)
	const svc, ttl = "selfy", 5 * time.Second
	applyDefinition(ctx, t, c, fmt.Sprintf("namespace: %s\nname: %s\nports: [{name: http, number: 8080, protocol: tcp}]\n"+
		"capability: {readiness: self}\npolicy: {lease_ttl: %s}\n", healthNS, svc, ttl))
	var regs []uint64
	for i, a := range []string{"127.0.0.51", "127.0.0.52"} {
		r := registerLoopback(ctx, t, c, svc, fmt.Sprintf("s-%d", i), 8080, func(r *wire.Registration) { r.Addresses = []string{a} })
		regs = append(regs, r.Incarnation)
		key := wire.InstanceKey{Namespace: healthNS, Service: svc, ID: r.ID}
		if _, err := n.Client().Report(ctx, key, r.Incarnation, true, nil); err != nil {
			t.Fatal(err)
		}
	}
	// s-0 is a process that renews its lease; s-1 renews from here.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	proc := exec.Command(self, "-test.run=^$")
	proc.Env = append(childEnv(), fmt.Sprintf("%s=%s %s/%s/s-0 %d", renewerEnv, n.HTTPAddr, healthNS, svc, regs[0]))
	out, err := proc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proc.Process.Kill(); _ = proc.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("renewer: %q %v", line, err)
	}
	keep := time.NewTicker(time.Second)
	defer keep.Stop()
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-keep.C:
				_, _ = n.Client().Renew(ctx, wire.InstanceKey{Namespace: healthNS, Service: svc, ID: "s-1"}, regs[1])
			}
		}
	}()
	name := svc + "." + healthNS + ".svc.cairn.internal."
	answer := func() ([]string, error) {
		r, err := exchange("udp", n.DNSAddr, name, dns.TypeA, false)
		if err != nil {
			return nil, err
		}
		return addrSet(r.Answer), nil
	}
	Eventually(t, 15*time.Second, func() error {
		got, err := answer()
		if err != nil || !slices.Equal(got, []string{"127.0.0.51", "127.0.0.52"}) {
			return fmt.Errorf("answer %v (%v), want both", got, err)
		}
		return nil
	})
	// Run through a few renewals, then crash.
	time.Sleep(2 * ttl / 5) // two renewals of the process: the scenario, not a wait for a condition
	if err := proc.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	var gone time.Duration
	Eventually(t, 5*ttl+15*time.Second, func() error {
		got, err := answer()
		if err != nil {
			return err
		}
		if slices.Contains(got, "127.0.0.51") {
			return fmt.Errorf("s-0 still answered %v after %v", got, time.Since(killed).Round(time.Second))
		}
		gone = time.Since(killed)
		return nil
	})
	// Not before the hard expiry: an expired lease alone is silence.
	if gone < 5*ttl-2*time.Second {
		t.Errorf("the crashed instance left DNS %v after the kill; want at its hard expiry, about %v", gone.Round(time.Millisecond), 5*ttl)
	}
	got, err := answer()
	if err != nil || !slices.Equal(got, []string{"127.0.0.52"}) {
		t.Errorf("after the hard expiry the answer is %v (%v), want the live s-1 only", got, err)
	}
	ev := waitEvent(ctx, t, n, svc, 0, "expiry of s-0", func(e wire.Event) bool {
		return e.Kind == wire.EventExpired && e.Instance == "s-0"
	})
	if !strings.Contains(ev.Reason, "hard expiry") || ev.To != status.Terminated.String() {
		t.Errorf("expiry event %+v: want to terminated, the hard expiry as the reason", ev)
	}
	t.Logf("s-0 killed; out of DNS %v later: %s", gone.Round(time.Millisecond), ev.Reason)
}
