package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/wire"
)

// The client-side bounds of SPEC §5, against real server processes: a
// view older than the one held is never applied, whichever server sends
// it, and a large drop in one step reaches the agent's answers no faster
// than the shrink cap.

// frontAddrs returns the addresses of front's SRV targets as addr
// answers them, sorted, and the answer.
func frontAddrs(addr string) ([]string, *dns.Msg, error) {
	r, err := ask(addr, frontSRV, dns.TypeSRV)
	if err != nil {
		return nil, nil, err
	}
	return addrSet(r.Extra), r, nil
}

// pad makes n writes on c that do not touch front (an instance of
// vacant registered n times over), so that the store's revision moves on.
func pad(ctx context.Context, t *testing.T, c *Cluster, n int) {
	t.Helper()
	for i := range n {
		registerLoopback(ctx, t, c, "vacant", "pad", 8080, func(r *wire.Registration) {
			r.Addresses = []string{fmt.Sprintf("127.0.1.%d", i%200+1)}
			r.RegistrationID = fmt.Sprintf("boot-%d", i)
		})
	}
}

// TestAgentRefusesAnOlderView: an agent that holds server A's view of
// front fails over, when A dies, to server B, whose view of front is
// older (B's cluster stamped it at a lower store revision): B does not
// send it (the version the agent names carries a higher revision than
// B's table), the agent keeps answering A's, not connected, marked
// stale; once B's table passes the revision held, B's view is sent and
// taken.
func TestAgentRefusesAnOlderView(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	a, b := twoClusters(ctx, t)
	// A: front's three instances after 40 other writes; B: two of them,
	// at once. B's view of front is stamped lower than A's.
	pad(ctx, t, a, 40)
	for i := 1; i <= 3; i++ {
		registerFront(ctx, t, a, i)
	}
	for i := 1; i <= 2; i++ {
		registerFront(ctx, t, b, i)
	}
	ag := StartAgent(t, []string{a.Nodes[0].GRPCAddr, b.Nodes[0].GRPCAddr}, "--service", "shop/front", "--stale-after", "1s")
	want := []string{"127.0.0.51", "127.0.0.52", "127.0.0.53"}
	waitFresh(t, ag, "A's", want)
	st, err := ag.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held, _ := st.View(frontView)

	applied, err := ag.Metric(ctx, "cairn_agent_responses_applied_total")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		n, err := ag.Metric(ctx, "cairn_agent_responses_applied_total")
		if err != nil {
			return err
		}
		if st, err = ag.Status(ctx); err != nil {
			return err
		}
		if n <= applied || st.Server != b.Nodes[0].GRPCAddr {
			return fmt.Errorf("B has not answered yet (server %s)", st.Server)
		}
		return nil
	})
	if n, err := ag.Metric(ctx, "cairn_agent_nacks_total"); err != nil || n != 0 {
		t.Fatalf("agent refused %v views (%v); want none: B sends nothing older than the view held", n, err)
	}
	// A's view, still; stale once --stale-after has passed.
	Eventually(t, 30*time.Second, func() error {
		got, r, err := frontAddrs(ag.DNSAddr)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) {
			t.Fatalf("agent after B's older view: targets %v; want A's %v", got, want)
		}
		if !slices.Contains(edeCodes(r), dns.ExtendedErrorCodeStaleAnswer) {
			return fmt.Errorf("agent after B's older view: EDEs %v; want stale (3)", edeCodes(r))
		}
		return nil
	})
	if st, err = ag.Status(ctx); err != nil {
		t.Fatal(err)
	}
	if v, _ := st.View(frontView); v.Revision != held.Revision || st.Server != b.Nodes[0].GRPCAddr || st.Connected {
		t.Fatalf("agent status after B's older view: %+v; want revision %d kept, server %s, not connected", st, held.Revision, b.Nodes[0].GRPCAddr)
	}

	// B moves past A's revision and changes front: taken.
	pad(ctx, t, b, 60)
	registerFront(ctx, t, b, 4)
	waitFresh(t, ag, "B's", []string{"127.0.0.51", "127.0.0.52", "127.0.0.54"})
}

// waitFresh waits until the agent answers front's SRV with the targets
// at want (whose, for the message), fresh (no EDE).
func waitFresh(t *testing.T, ag *Agent, whose string, want []string) {
	t.Helper()
	Eventually(t, 30*time.Second, func() error {
		got, r, err := frontAddrs(ag.DNSAddr)
		if err != nil {
			return err
		}
		if !slices.Equal(got, want) || len(edeCodes(r)) != 0 {
			return fmt.Errorf("agent: %s SRV targets %v, EDEs %v; want %s %v, fresh", frontSRV, got, edeCodes(r), whose, want)
		}
		return nil
	})
}

// twoClusters starts two independent one-node --dev clusters, A and B,
// each with agentServices applied: their store revisions, and so the
// revisions of their views, are unrelated.
func twoClusters(ctx context.Context, t *testing.T) (a, b *Cluster) {
	t.Helper()
	a, b = StartCluster(t, 1, "--dev"), StartCluster(t, 1, "--dev")
	for _, c := range []*Cluster{a, b} {
		applyDefinition(ctx, t, c, agentServices)
	}
	return a, b
}

// registerFront registers front-i at 127.0.0.(50+i) on c.
func registerFront(ctx context.Context, t *testing.T, c *Cluster, i int) wire.Registered {
	t.Helper()
	return registerLoopback(ctx, t, c, "front", fmt.Sprintf("front-%d", i), 8080, func(r *wire.Registration) {
		r.Addresses = []string{fmt.Sprintf("127.0.0.%d", 50+i)}
	})
}

// TestAgentCapsADropFromServer: the agent holds server A's view of
// front, ten instances; A dies and the agent fails over to server B,
// whose newer view of front has one (a cluster rebuilt from an old
// backup, say): nine instances vanish in one step. The agent's answers
// lose a third of the ten (⌊0.33 × 10⌋ = 3), hold the other six back,
// marked deferred, and let the next share go only a window later.
// (Deregistrations and drains are not capped, by the agent as by the
// server: those the server would publish as such, not as vanished.)
func TestAgentCapsADropFromServer(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	a, b := twoClusters(ctx, t)
	var all []string
	for i := 1; i <= 10; i++ {
		registerFront(ctx, t, a, i)
		all = append(all, fmt.Sprintf("127.0.0.%d", 50+i))
	}
	slices.Sort(all)
	pad(ctx, t, b, 60)
	registerFront(ctx, t, b, 1)
	ag := StartAgent(t, []string{a.Nodes[0].GRPCAddr, b.Nodes[0].GRPCAddr}, "--service", "shop/front")
	waitFresh(t, ag, "A's ten", all)

	if err := a.Nodes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		st, err := ag.Status(ctx)
		if err != nil {
			return err
		}
		if v, _ := st.View(frontView); v.Instances != 1 {
			return fmt.Errorf("agent: view of %d instances; want B's one", v.Instances)
		}
		return nil
	})
	// B's view of one came; within the window the agent serves seven.
	got, _, err := frontAddrs(ag.DNSAddr)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ag.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := st.View(frontView)
	if len(got) != 7 || v.Eligible != 7 || v.Deferred != 6 {
		t.Fatalf("agent right after the drop: %d targets, %d eligible, %d deferred; want 7, 7 and 6", len(got), v.Eligible, v.Deferred)
	}
	// A window (10 s) later: ⌊0.33 × 7⌋ = 2 more go.
	Eventually(t, 30*time.Second, func() error {
		got, _, err := frontAddrs(ag.DNSAddr)
		if err != nil {
			return err
		}
		if len(got) != 5 {
			return fmt.Errorf("agent: %d targets; want 5 a window after the drop", len(got))
		}
		return nil
	})
}
