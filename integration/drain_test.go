package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/wire"
	"github.com/miekg/dns"
)

// caller is a client of a service that resolves its name through one
// node's DNS every 10ms and sends one HTTP request to an address of each
// answer, as the seed's dead-address experiment did.
type caller struct {
	mu  sync.Mutex
	log []call
}

// call is one resolution: when its query was sent, what it answered, and
// the address the request then went to ("" if none).
type call struct {
	sent    time.Time
	answer  []string
	request string
}

// run resolves name at dnsAddr every 10ms until ctx is done, and sends a
// GET to port on one address of each answer, in turn.
func (c *caller) run(ctx context.Context, dnsAddr, name string, port int) {
	hc := &http.Client{Timeout: 200 * time.Millisecond}
	defer hc.CloseIdleConnections()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		cl := call{sent: time.Now()}
		r, err := exchange("udp", dnsAddr, name, dns.TypeA, false)
		if err == nil {
			cl.answer = addrSet(r.Answer)
		}
		if len(cl.answer) > 0 {
			cl.request = cl.answer[i%len(cl.answer)]
			if resp, err := hc.Get("http://" + net.JoinHostPort(cl.request, strconv.Itoa(port)) + "/"); err == nil {
				resp.Body.Close()
			}
		}
		c.mu.Lock()
		c.log = append(c.log, cl)
		c.mu.Unlock()
	}
}

// after returns the calls whose query was sent at or after t.
func (c *caller) after(t time.Time) (before, after []call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, cl := range c.log {
		if cl.sent.Before(t) {
			before = append(before, cl)
		} else {
			after = append(after, cl)
		}
	}
	return before, after
}

// TestDrainLeavesDNSBeforeTheCallReturns: a caller resolving every 10ms
// through one node never gets, and never sends a request to, an instance
// from a query sent after `cairn drain` returned from that node — through
// a follower that forwarded the drain, and through the leader (SPEC §2:
// withdrawals are published on commit, and the call returns once the
// answering node's table no longer serves the instance).
func TestDrainLeavesDNSBeforeTheCallReturns(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	c := StartCluster(t, 3, healthArgs...)
	ctx := ctxT(t, 2*time.Minute)
	const svc = "drainy"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}",
		// max_unavailable: not a test of budgets; two of the four drain.
		"{lease_ttl: 10m, drain_window: 1h, dns_ttl: 1s, slow_start: 0s, max_unavailable: 2}"))
	// Four backends on four loopback addresses, one port.
	addrs := []string{"127.0.0.41", "127.0.0.42", "127.0.0.43", "127.0.0.44"}
	port := serveAll(t, addrs, func(ln net.Listener) func() {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {})}
		go func() { _ = srv.Serve(ln) }()
		return func() { _ = srv.Close() }
	})
	regs := map[string]uint64{}
	var ids []string
	for i, a := range addrs {
		id := fmt.Sprintf("d-%d", i)
		r := registerLoopback(ctx, t, c, svc, id, port, func(r *wire.Registration) { r.Addresses = []string{a} })
		regs[id], ids = r.Incarnation, append(ids, id)
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)
	leader, follower, err := c.LeaderAndFollower(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	name := svc + "." + healthNS + ".svc.cairn.internal."
	for _, tc := range []struct {
		via  *Node
		id   string
		addr string
	}{{follower, "d-0", addrs[0]}, {leader, "d-1", addrs[1]}} {
		cctx, stop := context.WithCancel(ctx)
		var cl caller
		done := make(chan struct{})
		go func() { defer close(done); cl.run(cctx, tc.via.DNSAddr, name, port) }()
		// A second of calls with the instance in the answers.
		Eventually(t, 10*time.Second, func() error {
			before, _ := cl.after(time.Now())
			seen := 0
			for _, x := range before {
				if x.request == tc.addr {
					seen++
				}
			}
			if seen < 5 {
				return fmt.Errorf("%d requests to %s so far", seen, tc.addr)
			}
			return nil
		})
		runCLI(ctx, t, tc.via, "drain", "--instance", tc.id, "--incarnation", strconv.FormatUint(regs[tc.id], 10), healthNS+"/"+svc)
		returned := time.Now()
		// Two seconds of calls after the drain returned: twice the
		// evaluation interval, so a table built once a second would show.
		time.Sleep(2 * time.Second) // the length of the observation, not a wait for a condition
		stop()
		<-done
		_, after := cl.after(returned)
		if len(after) < 50 {
			t.Fatalf("drain via %s: only %d resolutions after the drain returned", tc.via.ID, len(after))
		}
		for _, x := range after {
			for _, a := range x.answer {
				if a == tc.addr {
					t.Fatalf("drain via %s: a query sent %v after `cairn drain` returned answered %s with the drained %s (%s)",
						tc.via.ID, x.sent.Sub(returned).Round(time.Millisecond), name, tc.id, tc.addr)
				}
			}
			if x.request == tc.addr {
				t.Fatalf("drain via %s: a request went to the drained %s", tc.via.ID, tc.addr)
			}
		}
		t.Logf("drain of %s via %s: %d resolutions after it returned, none with it", tc.id, tc.via.ID, len(after))
	}
}

// serveAll serves on the same free port of every address, with serve
// (which takes the listener and returns how to stop), until the test
// ends, and returns the port. A port free on the first address but
// taken on another is retried.
func serveAll(t *testing.T, addrs []string, serve func(net.Listener) (stop func())) int {
	t.Helper()
	var port int
	Eventually(t, 10*time.Second, func() error {
		lns, err := listenAll(addrs)
		if err != nil {
			return err
		}
		port = lns[0].Addr().(*net.TCPAddr).Port
		for _, ln := range lns {
			t.Cleanup(serve(ln))
		}
		return nil
	})
	return port
}

// listenAll listens on the same free port on every address, or fails.
func listenAll(addrs []string) ([]net.Listener, error) {
	first, err := net.Listen("tcp", net.JoinHostPort(addrs[0], "0"))
	if err != nil {
		return nil, err
	}
	lns := []net.Listener{first}
	port := strconv.Itoa(first.Addr().(*net.TCPAddr).Port)
	for _, a := range addrs[1:] {
		ln, err := net.Listen("tcp", net.JoinHostPort(a, port))
		if err != nil {
			for _, l := range lns {
				_ = l.Close()
			}
			return nil, err
		}
		lns = append(lns, ln)
	}
	return lns, nil
}
