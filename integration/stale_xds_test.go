package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/wire"
)

// TestStaleServerLetsItsAgentGo: three servers, each in a network
// namespace of its own (netlab's hosts sd1..sd3), and an agent for each,
// in the test's namespace, configured with all three servers, its own
// first. A follower is cut off from the other two servers (iptables in
// its namespace; the agents still reach it): past --stale-after it ends
// its agent's stream (SPEC §4), and that agent is on a fresh server,
// answering fresh, within --stale-after + the reconnect backoff (plus
// the time it takes the cut to show and a connection); from then on its
// answers stay fresh (no EDE 3) while the server it left answers stale.
// The other agents stay on their own servers throughout.
func TestStaleServerLetsItsAgentGo(t *testing.T) {
	lab := NeedNetlab(t)
	const staleAfter = 2 * time.Second
	var hosts []Host
	for i := 1; i <= LabHosts; i++ {
		hosts = append(hosts, Host{Netns: LabHost(i), Addr: LabAddr(i)})
	}
	// Beyond loopback a server wants ACLs on.
	const admin = "admin-stale-0123456789abcdefghij"
	c := StartClusterWith(t, Config{Nodes: 3, Hosts: hosts, Token: admin,
		Args: []string{"--insecure-plaintext", "--acl-bootstrap-token", admin, "--allow-loopback-endpoints", "--stale-after", staleAfter.String()}})
	ctx := ctxT(t, 3*time.Minute)
	applyDefinition(ctx, t, c, agentServices)
	var front []string
	for i := 1; i <= 3; i++ {
		addr := fmt.Sprintf("127.0.0.%d", 50+i)
		front = append(front, addr)
		registerLoopback(ctx, t, c, "front", fmt.Sprintf("front-%d", i), 8080, func(r *wire.Registration) { r.Addresses = []string{addr} })
	}
	// Every server answers them, fresh: its table is built (an xDS
	// stream opened before that is refused, and the agent would start on
	// the next server).
	for _, n := range c.Nodes {
		Eventually(t, 30*time.Second, func() error {
			got, _, edes, _, err := staleAnswer(n, frontName)
			if err != nil || !slices.Equal(got, front) || len(edes) != 0 {
				return fmt.Errorf("%s answers %v EDE %v (%v); want %v, fresh", n.ID, got, edes, err, front)
			}
			return nil
		})
	}
	_, cut, err := c.LeaderAndFollower(20 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	agents := map[*Node]*Agent{}
	for _, n := range c.Nodes {
		servers := []string{n.GRPCAddr}
		for _, o := range c.Nodes {
			if o != n {
				servers = append(servers, o.GRPCAddr)
			}
		}
		agents[n] = StartAgentWith(t, AgentConfig{Name: "agent-" + n.ID, Servers: servers, Token: admin,
			Args: []string{"--service", "shop/front", "--stale-after", staleAfter.String()}})
	}
	// fresh checks that a answers front's three addresses, not stale, from
	// a server other than not (nil: any).
	fresh := func(a *Agent, on, not *Node) error {
		st, err := a.Status(ctx)
		if err != nil {
			return err
		}
		v, ok := st.View(frontView)
		switch {
		case !st.Connected || on != nil && st.Server != on.GRPCAddr || not != nil && st.Server == not.GRPCAddr:
			return fmt.Errorf("agent on %q, connected %v", st.Server, st.Connected)
		case !ok || v.Stale || v.Eligible != 3:
			return fmt.Errorf("agent's view %+v; want fresh, 3 in rotation", v)
		}
		got, _, r, err := frontAnswer(a.DNSAddr)
		if err != nil {
			return err
		}
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, front) || len(edeCodes(r)) != 0 {
			return fmt.Errorf("agent answers %v; want NOERROR %v, no EDE", replyOf(r), front)
		}
		return nil
	}
	for n, a := range agents {
		Eventually(t, 30*time.Second, func() error { return fresh(a, n, nil) })
	}

	// Cut the follower off from the other two servers.
	t.Logf("cutting %s (%s) off from the other servers", cut.ID, hosts[cut.Index-1].Netns)
	start := time.Now()
	for _, o := range c.Nodes {
		if o != cut {
			lab.Isolate(cut.Index, o.Index)
		}
	}
	a := agents[cut]
	err = Poll(30*time.Second, 20*time.Millisecond, func() error { return fresh(a, nil, cut) })
	if err != nil {
		t.Fatalf("the cut server's agent: %v\n%s", err, cut.Tail(20))
	}
	moved := time.Since(start)
	// The first reconnection waits under Backoff.Min (1 s, full jitter);
	// 2 s more for the cut to show (the last heartbeat), the server's
	// check (100 ms) and a connection, under -race on a shared machine.
	bound := staleAfter + time.Second + 2*time.Second
	t.Logf("the cut server's agent answers fresh from another server %v after the cut (bound %v)", moved.Round(time.Millisecond), bound)
	if moved > bound {
		t.Errorf("the agent moved %v after the cut; want within %v", moved, bound)
	}
	// The server it left is stale (the cut held), and the agent answers
	// fresh while it is, every answer.
	Eventually(t, 10*time.Second, func() error {
		_, _, edes, _, err := staleAnswer(cut, frontName)
		if err != nil || !slices.Contains(edes, dns.ExtendedErrorCodeStaleAnswer) {
			return fmt.Errorf("the cut server answers EDE %v (%v); want stale", edes, err)
		}
		return nil
	})
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		if err := fresh(a, nil, cut); err != nil {
			t.Fatalf("the cut server's agent, moved: %v", err)
		}
		time.Sleep(100 * time.Millisecond) // the cadence of the check, not a wait for a condition
	}
	for n, o := range agents {
		if n != cut {
			if err := fresh(o, n, nil); err != nil {
				t.Errorf("agent of %s, not cut: %v", n.ID, err)
			}
		}
	}
	if v, err := cut.Metric(ctx, "cairn_xds_stale"); err != nil || v != 1 {
		t.Errorf("the cut server's cairn_xds_stale = %v (%v); want 1", v, err)
	}
}
