package integration

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
	"github.com/miekg/dns"
)

// The partition tests put the instances in the network namespaces of
// netlab (netlab.go: hosts sd1..sd3 on a bridge, 10.199.0.0/24),
// and cut them apart from the server with iptables: a fault that lives in
// the network, tested in the network. The server runs in the test's own
// namespace, on loopback, and reaches the bridge through netlab's link
// (root side 10.199.0.254).

// backendEnv makes the test binary an HTTP backend on the addresses it
// lists (comma-separated), answering 200 to everything until killed: the
// instances the servers probe, run inside a namespace.
const backendEnv = "CAIRN_TEST_BACKEND"

// serveBackends is what the test binary does when backendEnv is set.
func serveBackends(addrs string) {
	for _, a := range strings.Split(addrs, ",") {
		ln, err := net.Listen("tcp", a)
		if err != nil {
			fmt.Fprintln(os.Stderr, "backend:", err)
			os.Exit(2)
		}
		go func() {
			_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }))
		}()
	}
	fmt.Println("ready")
	select {}
}

// backends starts an HTTP backend on each address inside host sdN's
// namespace, and stops it when the test ends.
func (l *Netlab) backends(host int, addrs ...string) {
	l.t.Helper()
	self, err := os.Executable()
	if err != nil {
		l.t.Fatal(err)
	}
	cmd := InNetns(host, self, "-test.run=^$")
	cmd.Env = append(childEnv(), backendEnv+"="+strings.Join(addrs, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		l.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	l.t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		l.t.Fatalf("backends in sd%d: %q %v", host, line, err)
	}
	// This namespace reaches them over the bridge.
	Eventually(l.t, 10*time.Second, func() error {
		for _, a := range addrs {
			c, err := net.DialTimeout("tcp", a, time.Second)
			if err != nil {
				return err
			}
			_ = c.Close()
		}
		return nil
	})
}

// TestPartitionFromAZoneIsSilence: the servers of a three-node cluster
// are cut off from one zone's instances by a firewall (their probes time
// out). Those instances go unknown and stay in DNS answers the whole
// time; events name the probers; healing brings them back with no
// withdrawal in between (SPEC §2: a prober cut off is silence, not
// failure).
func TestPartitionFromAZoneIsSilence(t *testing.T) {
	lab := NeedNetlab(t)
	lab.backends(2, LabNet+".2:8081", LabNet+".2:8082")
	lab.backends(3, LabNet+".3:8081", LabNet+".3:8082", LabNet+".3:8083")

	c := StartCluster(t, 3, "--region", "r1", "--zone", "za")
	n := c.Nodes[0]
	ctx := ctxT(t, 3*time.Minute)
	applyDefinition(ctx, t, c, healthService("web", "{type: http, port: http, path: /, interval: 1s, timeout: 500ms}",
		"{lease_ttl: 10m, shrink_cap: 1}"))
	zones := map[string][]string{"za": {"za-1", "za-2"}, "zb": {"zb-1", "zb-2", "zb-3"}}
	host := map[string]string{"za": LabNet + ".2", "zb": LabNet + ".3"}
	var all []string
	for zone, ids := range zones {
		for i, id := range ids {
			registerLoopback(ctx, t, c, "web", id, 8081+i, func(r *wire.Registration) {
				r.Addresses, r.Region, r.Zone = []string{host[zone]}, "r1", zone
			})
			all = append(all, id)
		}
	}
	waitAllHealthy(ctx, t, c.Nodes, "web", all...)
	evs, err := eventsOn(ctx, n, "web")
	if err != nil {
		t.Fatal(err)
	}
	mark := evs[len(evs)-1].Seq

	// Cut zone zb off from the server: its probes go unanswered.
	lab.DropFrom(3, LabServer)
	srv := "_http._tcp.web." + healthNS + ".svc.cairn.internal."
	inDNS := func() (map[string]bool, error) {
		r, err := exchange("udp", n.DNSAddr, srv, dns.TypeSRV, false)
		if err != nil {
			return nil, err
		}
		got := map[string]bool{}
		for _, rr := range r.Answer {
			if s, ok := rr.(*dns.SRV); ok {
				got[strings.SplitN(s.Target, ".", 2)[0]] = true
			}
		}
		return got, nil
	}
	// For the length of the partition (15s: 15 checks of each
	// instance), every zb instance stays in the SRV answer.
	aside := waitEvent(ctx, t, n, "web", mark, "probes_set_aside", func(e wire.Event) bool { return e.Kind == wire.EventProbesSetAside })
	if !strings.Contains(aside.Reason, "prober n") || !strings.Contains(aside.Reason, "r1/zb") {
		t.Errorf("set-aside event %q: want it to name a prober and zone r1/zb", aside.Reason)
	}
	end := time.Now().Add(15 * time.Second)
	for time.Now().Before(end) {
		got, err := inDNS()
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range zones["zb"] {
			if !got[id] {
				t.Fatalf("%s left the SRV answer during the partition: %v\n%s", id, got, c.Logs(40))
			}
		}
		time.Sleep(200 * time.Millisecond) // the cadence of the check, not a wait for a condition
	}
	for _, id := range zones["zb"] {
		e, err := endpointOn(ctx, n, "web", id)
		if err != nil {
			t.Fatal(err)
		}
		if e.Verdict != status.Unknown || !e.Eligible {
			t.Errorf("%s during the partition: %s; want unknown and eligible", id, describe(e))
		}
	}

	// Heal: the probes are answered again.
	lab.Heal(3)
	waitEvent(ctx, t, n, "web", mark, "probes_restored", func(e wire.Event) bool { return e.Kind == wire.EventProbesRestored })
	waitAllHealthy(ctx, t, c.Nodes, "web", all...)
	evs, err = eventsOn(ctx, n, "web")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Seq > mark && e.Kind == wire.EventEligibility && strings.HasPrefix(e.To, "withdrawn") {
			t.Errorf("withdrawn during the partition or the healing: %s", eventLines([]wire.Event{e}))
		}
	}
}
