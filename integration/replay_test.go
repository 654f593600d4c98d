package integration

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
)

// TestReplayIsWhatCallersGot is issue 33's test: register three
// instances, drain one at T, fail another's probe at T+10 s; replays at
// T−1 s, T+1 s and T+11 s give the DNS answers dig recorded then (A and
// SRV), the assignment an xDS subscriber was sent then, and the failed
// one's probe evidence and observer. Then every node restarts, and the
// history still answers for the time before.
func TestReplayIsWhatCallersGot(t *testing.T) {
	needProcesses(t)
	digBin := needTool(t, "dig", "dnsutils")
	t.Parallel()
	c := StartCluster(t, 3, healthArgs...)
	ctx := ctxT(t, 3*time.Minute)
	const svc = "replayed"
	applyDefinition(ctx, t, c, healthService(svc, "{type: tcp, port: http, interval: 1s, timeout: 500ms}",
		"{lease_ttl: 10m, drain_window: 1h, dns_ttl: 5s, slow_start: 0s, max_unavailable: 2}"))
	addrs := []string{"127.0.0.61", "127.0.0.62", "127.0.0.63"}
	var lns []net.Listener
	Eventually(t, 10*time.Second, func() error {
		var err error
		lns, err = listenAll(addrs)
		return err
	})
	port := lns[0].Addr().(*net.TCPAddr).Port
	for _, ln := range lns {
		go func() {
			for {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				conn.Close()
			}
		}()
		t.Cleanup(func() { ln.Close() })
	}
	ids := []string{"r-a", "r-b", "r-c"}
	incs := map[string]uint64{}
	for i, id := range ids {
		r := registerLoopback(ctx, t, c, svc, id, port, func(r *wire.Registration) { r.Addresses = []string{addrs[i]} })
		incs[id] = r.Incarnation
	}
	waitAllHealthy(ctx, t, c.Nodes, svc, ids...)

	n := c.Nodes[1]
	host := svc + "." + healthNS + ".svc.cairn.internal."
	srvName := "_http._tcp." + host
	sub := startDeltaRecorder(ctx, t, n.GRPCAddr, svc+"."+healthNS+":http")

	// A look is what a caller got at one moment: dig's A and SRV answers,
	// and the assignment the subscriber held, once it agrees with dig.
	type look struct {
		at       time.Time
		a, srv   []string
		version  string
		eligible []string
	}
	lookAt := func(want []string) look {
		t.Helper()
		var l look
		Eventually(t, 20*time.Second, func() error {
			a := dig(t, digBin, n.DNSAddr, "A", host)
			s := dig(t, digBin, n.DNSAddr, "SRV", srvName)
			l = look{at: time.Now(), a: rrSet(a.answer), srv: rrSet(s.answer), eligible: want}
			if got := addrSet(a.answer); !slices.Equal(got, want) {
				return fmt.Errorf("dig at %s: %v, want %v", n.ID, got, want)
			}
			held := sub.held()
			var in []string
			for addr, h := range held {
				if h == corev3.HealthStatus_HEALTHY || h == corev3.HealthStatus_UNKNOWN {
					in = append(in, addr)
				}
			}
			slices.Sort(in)
			if !slices.Equal(in, want) {
				return fmt.Errorf("the subscriber holds %v in rotation, want %v", in, want)
			}
			sub.mu.Lock()
			l.version = sub.version
			sub.mu.Unlock()
			return nil
		})
		return l
	}
	before := lookAt(addrs)
	T := time.Now()
	onAnyNode(t, c, "drain", func(x *Node) error {
		_, err := x.Client().Drain(ctx, wire.InstanceKey{Namespace: healthNS, Service: svc, ID: "r-a"}, incs["r-a"])
		return err
	})
	drained := lookAt(addrs[1:])
	time.Sleep(time.Until(T.Add(10 * time.Second))) // the probe fails at T+10 s, as the issue says
	lns[1].Close()                                  // r-b refuses connections: its probes fail
	failed := lookAt(addrs[2:])

	replayAt := func(at time.Time) wire.Replay {
		t.Helper()
		r, err := n.Client().Replay(ctx, wire.ReplayQuery{Namespace: healthNS, Service: svc, At: at})
		if err != nil {
			t.Fatalf("replay at %s: %v", at.Format(time.RFC3339Nano), err)
		}
		return r
	}
	check := func(when string, l look, r wire.Replay) {
		t.Helper()
		var in []string
		for _, ep := range r.Endpoints {
			if ep.Eligible {
				in = append(in, ep.Addresses...)
			}
		}
		slices.Sort(in)
		if !slices.Equal(in, l.eligible) {
			t.Errorf("%s: replay has %v in rotation, want %v", when, in, l.eligible)
		}
		if got := sortedCopy(r.DNS[0].Answer); r.DNS[0].Type != "A" || !slices.Equal(got, l.a) {
			t.Errorf("%s: replayed A %q; dig recorded %q", when, got, l.a)
		}
		if got := sortedCopy(r.DNS[2].Answer); r.DNS[2].Type != "SRV" || !slices.Equal(got, l.srv) {
			t.Errorf("%s: replayed SRV %q; dig recorded %q", when, got, l.srv)
		}
		_, want := xdsserver.ParseVersion(l.version)
		if _, got := xdsserver.ParseVersion(r.XDS[0].Version); got != want {
			t.Errorf("%s: replayed assignment %s; the subscriber was sent %s", when, r.XDS[0].Version, l.version)
		}
	}
	check("T−1s (before the drain)", before, replayAt(before.at))
	check("T+1s (drained)", drained, replayAt(drained.at))
	r := replayAt(failed.at)
	check("T+11s (probe failed)", failed, r)
	var b *wire.ReplayEndpoint
	for i := range r.Endpoints {
		if r.Endpoints[i].InstanceID == "r-b" {
			b = &r.Endpoints[i]
		}
	}
	if b == nil || b.Transition == nil || b.Transition.Evidence == nil || b.Transition.Evidence.Class != "probe" ||
		!slices.ContainsFunc(c.Nodes, func(x *Node) bool { return x.ID == b.Transition.Evidence.Observer }) {
		t.Errorf("r-b at T+11s: %+v; want its withdrawal with probe evidence from a server", b)
	}

	// The CLI, by revision: the state the subscriber's version came from.
	cmd, err := n.CLI(ctx, "--output", "json", "replay", "--version", failed.version, healthNS+"/"+svc)
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cairn replay --version %s: %v\n%s", failed.version, err, out)
	}
	var byVersion wire.Replay
	if err := json.Unmarshal(out, &byVersion); err != nil {
		t.Fatalf("cairn replay: %v\n%s", err, out)
	}
	if byVersion.Matched == nil || !*byVersion.Matched {
		t.Errorf("replay of the subscriber's version %s: matched %v", failed.version, byVersion.Matched)
	}

	// An agent's answer says the revision of the view it came from
	// (dnsserver.RevisionOption, asked for); replayed by revision, the
	// view has what the agent answered.
	ag := StartAgentWith(t, AgentConfig{Servers: []string{n.GRPCAddr}})
	var agentRev uint64
	var agentAddrs []string
	Eventually(t, 20*time.Second, func() error {
		q := new(dns.Msg)
		q.SetQuestion(host, dns.TypeA)
		q.SetEdns0(1232, false)
		q.IsEdns0().Option = append(q.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: dnsserver.RevisionOption})
		resp, err := dns.Exchange(q, ag.DNSAddr)
		if err != nil {
			return err
		}
		agentAddrs = addrSet(resp.Answer)
		for _, op := range resp.IsEdns0().Option {
			if l, ok := op.(*dns.EDNS0_LOCAL); ok && l.Code == dnsserver.RevisionOption && len(l.Data) == 8 {
				agentRev = binary.BigEndian.Uint64(l.Data)
			}
		}
		if agentRev == 0 || !slices.Equal(agentAddrs, failed.eligible) {
			return fmt.Errorf("the agent answers %v at revision %d; want %v and a revision", agentAddrs, agentRev, failed.eligible)
		}
		return nil
	})
	cmd, err = n.CLI(ctx, "--output", "json", "replay", "--revision", strconv.FormatUint(agentRev, 10), healthNS+"/"+svc)
	if err != nil {
		t.Fatal(err)
	}
	if out, err = cmd.CombinedOutput(); err != nil {
		t.Fatalf("cairn replay --revision %d: %v\n%s", agentRev, err, out)
	}
	var byRevision wire.Replay
	if err := json.Unmarshal(out, &byRevision); err != nil {
		t.Fatalf("cairn replay: %v\n%s", err, out)
	}
	if got := sortedCopy(addrSetOf(byRevision.DNS[0].Answer)); !slices.Equal(got, agentAddrs) {
		t.Errorf("replay of the agent's revision %d answers %v; the agent answered %v", agentRev, got, agentAddrs)
	}

	// Every node restarts: the history answers for the time before.
	for _, x := range c.Nodes {
		if err := x.Stop(); err != nil {
			t.Fatal(err)
		}
	}
	for _, x := range c.Nodes {
		if err := x.Respawn(); err != nil {
			t.Fatal(err)
		}
	}
	Eventually(t, 30*time.Second, func() error {
		_, err := n.Client().Replay(ctx, wire.ReplayQuery{Namespace: healthNS, Service: svc, At: before.at})
		return err
	})
	check("T−1s, after every node restarted", before, replayAt(before.at))
	check("T+11s, after every node restarted", failed, replayAt(failed.at))
}

// addrSetOf is the addresses of A and AAAA records in presentation
// form.
func addrSetOf(rrs []string) []string {
	var out []string
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err == nil {
			out = append(out, addrSet([]dns.RR{rr})...)
		}
	}
	return out
}

func sortedCopy(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
