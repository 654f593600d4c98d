package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/wire"
)

// The agent tests run a `cairn server --dev` and a `cairn agent`
// streaming from it (SPEC §5), and check over DNS and the agent's HTTP
// API that the agent answers as the server does, keeps answering through
// the server's death, from disk after its own restart, and past a
// corrupt views file.

// agentServices: front has three instances and no check, so that they
// are in rotation as registered, at full weight at once (slow start
// 1ms), with a TTL above the 30 s a stale answer is capped at; vacant has
// none.
const agentServices = `namespace: shop
name: front
ports: [{name: http, number: 8080, protocol: tcp}]
capability: {readiness: none}
policy: {dns_ttl: 60s, slow_start: 1ms, lease_ttl: 1h}
---
namespace: shop
name: vacant
ports: [{name: http, number: 8080, protocol: tcp}]
`

const (
	frontName  = "front.shop.svc." + dnsZone
	frontSRV   = "_http._tcp.front.shop.svc." + dnsZone
	frontView  = "front.shop" // the view's resource name, "<svc>.<ns>"
	vacantName = "vacant.shop.svc." + dnsZone
	frontTTL   = 60
)

// agentFixture is a --dev server with agentServices applied and front's
// three instances registered, and an agent of it.
type agentFixture struct {
	c     *Cluster
	srv   *Node
	agent *Agent
	// front are front's addresses, sorted.
	front []string
}

// startAgentFixture starts the server, applies agentServices, registers
// front-1..3 on 127.0.0.51–53, waits until the server answers them at
// full weight, and starts an agent of it with agentArgs.
func startAgentFixture(t *testing.T, agentBin string, agentArgs ...string) *agentFixture {
	t.Helper()
	c := StartCluster(t, 1, "--dev")
	fx := &agentFixture{c: c, srv: c.Nodes[0]}
	ctx := ctxT(t, 2*time.Minute)
	applyDefinition(ctx, t, c, agentServices)
	for i := 1; i <= 3; i++ {
		fx.front = append(fx.front, fmt.Sprintf("127.0.0.%d", 50+i))
		fx.register(ctx, t, i)
	}
	Eventually(t, 30*time.Second, func() error {
		r, err := ask(fx.srv.DNSAddr, frontSRV, dns.TypeSRV)
		if err != nil {
			return err
		}
		for _, rr := range r.Answer {
			if s, ok := rr.(*dns.SRV); !ok || s.Weight != 100 {
				return fmt.Errorf("server: %s SRV %v; want weight 100 once slow start is over", frontSRV, r.Answer)
			}
		}
		if got := addrSet(r.Extra); !slices.Equal(got, fx.front) {
			return fmt.Errorf("server: %s SRV targets at %v; want %v", frontSRV, got, fx.front)
		}
		return nil
	})
	fx.agent = StartAgentWith(t, AgentConfig{Servers: []string{fx.srv.GRPCAddr}, AgentBin: agentBin, Args: agentArgs})
	return fx
}

// register registers front-i at 127.0.0.(50+i).
func (fx *agentFixture) register(ctx context.Context, t *testing.T, i int) {
	t.Helper()
	registerLoopback(ctx, t, fx.c, "front", fmt.Sprintf("front-%d", i), 8080, func(r *wire.Registration) {
		r.Addresses = []string{fmt.Sprintf("127.0.0.%d", 50+i)}
	})
}

// ask asks addr one question over UDP, with EDNS (so that EDEs come
// back) and without RD, as a stub resolver forwarding to it would.
func ask(addr, name string, qtype uint16) (*dns.Msg, error) {
	return exchange("udp", addr, name, qtype, false)
}

// edeCodes returns the Extended DNS Error codes of r, in order.
func edeCodes(r *dns.Msg) []uint16 {
	var out []uint16
	if o := r.IsEdns0(); o != nil {
		for _, op := range o.Option {
			if e, ok := op.(*dns.EDNS0_EDE); ok {
				out = append(out, e.InfoCode)
			}
		}
	}
	return out
}

// reply is a DNS answer reduced to what the agent must repeat of the
// server's: the rcode, the AA flag, every record of each section as
// sorted text (TTLs included; the SOA's serial left out, see
// comparable) and the EDE codes.
type reply struct {
	rcode                         string
	aa                            bool
	answer, authority, additional []string
	edes                          []uint16
}

func replyOf(r *dns.Msg) reply {
	return reply{rcode: dns.RcodeToString[r.Rcode], aa: r.Authoritative,
		answer: comparable(r.Answer), authority: comparable(r.Ns), additional: comparable(r.Extra), edes: edeCodes(r)}
}

// comparable is rrs as sorted text, without the OPT record and with SOA
// serials set to 0: an agent's serial is the highest revision of the
// views it holds, the server's its store revision, which later writes to
// services the agent does not hold move on.
func comparable(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch x := rr.(type) {
		case *dns.OPT:
			continue
		case *dns.SOA:
			c := *x
			c.Serial = 0
			rr = &c
		}
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	slices.Sort(out)
	return out
}

func (r reply) equal(o reply) bool {
	return r.rcode == o.rcode && r.aa == o.aa && slices.Equal(r.answer, o.answer) && slices.Equal(r.authority, o.authority) &&
		slices.Equal(r.additional, o.additional) && slices.Equal(r.edes, o.edes)
}

func (r reply) String() string {
	return fmt.Sprintf("%s aa=%v EDE %v\n  answer: %s\n  authority: %s\n  additional: %s", r.rcode, r.aa, r.edes,
		strings.Join(r.answer, " | "), strings.Join(r.authority, " | "), strings.Join(r.additional, " | "))
}

// frontAnswer asks addr for front's A records and returns the
// addresses, the smallest TTL and the reply.
func frontAnswer(addr string) (addrs []string, minTTL uint32, r *dns.Msg, err error) {
	r, err = ask(addr, frontName, dns.TypeA)
	if err != nil {
		return nil, 0, nil, err
	}
	minTTL = ^uint32(0)
	for _, rr := range r.Answer {
		minTTL = min(minTTL, rr.Header().Ttl)
	}
	return addrSet(r.Answer), minTTL, r, nil
}

// notReady reports whether r is SERVFAIL with EDE 14 (Not Ready) and no
// record: the agent's answer for a name it does not hold yet.
func notReady(r *dns.Msg) bool {
	return r.Rcode == dns.RcodeServerFailure && slices.Equal(edeCodes(r), []uint16{dns.ExtendedErrorCodeNotReady}) &&
		len(r.Answer)+len(r.Ns) == 0
}

// TestAgentAnswersAsServer: the agent answers the names of SPEC §3 as
// the server does — the A set (front has fewer instances than
// a_record_limit, so both give all of them), SRV with its additional
// records, an instance's name, NXDOMAIN for an unknown instance of a
// held service, NODATA, the apex — record for record, TTLs included.
// The first query for a name it does not hold waits for its view and is
// answered from it; an unknown service's first query is the server's
// NXDOMAIN once the server has said it does not exist. (Not Ready, when
// no view comes, is TestAgentCorruptViewsFile's.) The agent is
// cairn-agent, the binary an agent is deployed as; the other tests run
// `cairn agent`, the same command in the server's binary.
func TestAgentAnswersAsServer(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	lean, err := AgentBinary()
	if err != nil {
		t.Fatal(err)
	}
	fx := startAgentFixture(t, lean, "--service", "shop/vacant")
	a, srv := fx.agent, fx.srv
	ctx := ctxT(t, time.Minute)
	// Ready: the server answered its subscription to vacant.
	if err := a.WaitReady(10 * time.Second); err != nil {
		t.Fatal(err)
	}

	// front was not asked for: its first query subscribes to it, waits
	// for its view (at most 1 s) and is answered from it; nope's first
	// query waits for the server's word that it does not exist.
	got, _, r, err := frontAnswer(a.DNSAddr)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, fx.front) {
		t.Fatalf("agent: first query of %s A: %v; want NOERROR %v once its view came", frontName, replyOf(r), fx.front)
	}
	r, err = ask(a.DNSAddr, "nope.shop.svc."+dnsZone, dns.TypeA)
	if err != nil {
		t.Fatal(err)
	}
	if r.Rcode != dns.RcodeNameError {
		t.Fatalf("agent: first query of nope.shop A: %v; want NXDOMAIN once the server said it does not exist", replyOf(r))
	}

	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{frontName, dns.TypeA},
		{frontSRV, dns.TypeSRV},
		{"front-2." + frontName, dns.TypeA},
		{"nope." + frontName, dns.TypeA},        // NXDOMAIN: an unknown instance of a held service
		{frontName, dns.TypeAAAA},               // NODATA
		{vacantName, dns.TypeA},                 // NODATA: no instance
		{"nope.shop.svc." + dnsZone, dns.TypeA}, // NXDOMAIN once the server said so
		{dnsZone, dns.TypeSOA},
		{dnsZone, dns.TypeNS},
	} {
		qs := q.name + " " + dns.TypeToString[q.qtype]
		var want, got reply
		err := Poll(10*time.Second, 50*time.Millisecond, func() error {
			rs, err := ask(srv.DNSAddr, q.name, q.qtype)
			if err != nil {
				return err
			}
			ra, err := ask(a.DNSAddr, q.name, q.qtype)
			if err != nil {
				return err
			}
			want, got = replyOf(rs), replyOf(ra)
			if !got.equal(want) {
				return fmt.Errorf("agent:\n%v\nserver:\n%v", got, want)
			}
			return nil
		})
		if err != nil {
			t.Errorf("%s: %v", qs, err)
			continue
		}
		t.Logf("%s: %s, %d answer, %d authority, %d additional records, as the server's", qs, got.rcode,
			len(got.answer), len(got.authority), len(got.additional))
	}

	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := st.View(frontView)
	if !st.Connected || st.Restored || st.Server != srv.GRPCAddr || !ok || v.Stale || v.Instances != 3 || v.Eligible != 3 || v.Revision == 0 ||
		!slices.Equal(st.Absent, []string{"nope.shop"}) {
		t.Errorf("agent status %+v; want connected to %s, not restored, view %s fresh with 3 instances in rotation, absent [nope.shop]",
			st, srv.GRPCAddr, frontView)
	}
	if _, ok := st.View("vacant.shop"); !ok {
		t.Errorf("agent status %+v: no view vacant.shop, which --service subscribed to", st)
	}
}

// TestAgentServesThroughOutage: with its server killed, the agent keeps
// answering, every query; past --stale-after its answers carry EDE 3
// with TTLs capped at 30 s, and its status says stale and not connected.
// Restarted while the server is still down, it answers from its views
// file within a second of its start, marked stale, and reports the views
// restored; once the server is back, its answers are fresh again.
func TestAgentServesThroughOutage(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	const staleAfter = time.Second
	fx := startAgentFixture(t, "", "--service", "shop/front", "--stale-after", staleAfter.String())
	a := fx.agent
	ctx := ctxT(t, 2*time.Minute)
	Eventually(t, 10*time.Second, func() error {
		got, ttl, r, err := frontAnswer(a.DNSAddr)
		if err != nil {
			return err
		}
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, fx.front) || ttl != frontTTL || len(edeCodes(r)) != 0 {
			return fmt.Errorf("agent: %v; want NOERROR %v, TTL %d, no EDE", replyOf(r), fx.front, frontTTL)
		}
		return nil
	})

	// Taken before the signal: the agent cannot see the server die
	// earlier, so no stale mark may come less than --stale-after after.
	killed := time.Now()
	if err := fx.srv.Kill(); err != nil {
		t.Fatal(err)
	}
	// Every answer from the kill on has the addresses; the first one
	// marked stale comes no earlier than --stale-after.
	var staleAt time.Duration
	var answers int
	err := Poll(10*time.Second, 50*time.Millisecond, func() error {
		got, ttl, r, err := frontAnswer(a.DNSAddr)
		if err != nil {
			return &stopPolling{fmt.Errorf("agent, %v after the server's death: %w", time.Since(killed), err)}
		}
		answers++
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, fx.front) {
			return &stopPolling{fmt.Errorf("agent, %v after the server's death: %v; want NOERROR %v", time.Since(killed), replyOf(r), fx.front)}
		}
		if !slices.Contains(edeCodes(r), dns.ExtendedErrorCodeStaleAnswer) {
			return fmt.Errorf("answers not marked stale yet: %v", replyOf(r))
		}
		staleAt = time.Since(killed)
		if ttl > 30 {
			return &stopPolling{fmt.Errorf("stale answer with TTL %d; want at most 30 (RFC 8767)", ttl)}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("server killed: %d answers, the first marked stale %v after the kill", answers, staleAt.Round(time.Millisecond))
	if staleAt < staleAfter {
		t.Errorf("answers marked stale %v after the server's death; want no earlier than --stale-after (%v)", staleAt, staleAfter)
	}
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{frontSRV, dns.TypeSRV}, {"front-3." + frontName, dns.TypeA}} {
		r, err := ask(a.DNSAddr, q.name, q.qtype)
		if err != nil {
			t.Fatal(err)
		}
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 || !slices.Contains(edeCodes(r), dns.ExtendedErrorCodeStaleAnswer) {
			t.Errorf("agent, server dead: %s %s: %v; want NOERROR with records and EDE 3", q.name, dns.TypeToString[q.qtype], replyOf(r))
		}
	}
	st, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, ok := st.View(frontView)
	if st.Connected || st.Restored || !ok || !v.Stale || v.AgeSeconds < staleAfter.Seconds() || v.Eligible != 3 {
		t.Errorf("agent status, server dead: %+v; want not connected, view %s stale, at least %v old, 3 in rotation", st, frontView, staleAfter)
	}
	if c, err := a.Metric(ctx, "cairn_agent_connected"); err != nil || c != 0 {
		t.Errorf("cairn_agent_connected = %v (%v); want 0", c, err)
	}

	// The agent restarted, the server still dead: from disk, at once.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := a.spawn(); err != nil {
		t.Fatal(err)
	}
	var first time.Duration
	err = Poll(10*time.Second, 10*time.Millisecond, func() error {
		got, _, r, err := frontAnswer(a.DNSAddr)
		if err != nil {
			return err // not listening yet
		}
		first = time.Since(start)
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, fx.front) || !slices.Contains(edeCodes(r), dns.ExtendedErrorCodeStaleAnswer) {
			return &stopPolling{fmt.Errorf("restarted agent's first answer, %v after its start: %v; want NOERROR %v with EDE 3", first, replyOf(r), fx.front)}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%v\n%s", err, a.Tail(20))
	}
	t.Logf("agent restarted with the server down: first answer %v after the process started", first.Round(time.Millisecond))
	if first > time.Second {
		t.Errorf("restarted agent answered %v after its start; want within 1s", first)
	}
	if err := a.WaitReady(5 * time.Second); err != nil {
		t.Errorf("restarted agent holding views from disk: %v; want ready", err)
	}
	st, err = a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	v, ok = st.View(frontView)
	if !st.Restored || st.Connected || !ok || !v.Stale || v.Eligible != 3 {
		t.Errorf("restarted agent's status: %+v; want restored, not connected, view %s stale with 3 in rotation", st, frontView)
	}

	// The server back: fresh answers, the views no longer restored.
	if err := fx.srv.Restart(); err != nil {
		t.Fatal(err)
	}
	Eventually(t, 30*time.Second, func() error {
		got, ttl, r, err := frontAnswer(a.DNSAddr)
		if err != nil {
			return err
		}
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, fx.front) || ttl != frontTTL || len(edeCodes(r)) != 0 {
			return fmt.Errorf("agent, server back: %v; want NOERROR %v, TTL %d, no EDE", replyOf(r), fx.front, frontTTL)
		}
		st, err := a.Status(ctx)
		if err != nil {
			return err
		}
		if v, ok := st.View(frontView); !st.Connected || st.Restored || !ok || v.Stale {
			return fmt.Errorf("agent status, server back: %+v; want connected, not restored, %s fresh", st, frontView)
		}
		return nil
	})
}

// TestAgentCorruptViewsFile: an agent whose views file is corrupt still
// starts, says so in its log and in cairn_agent_file_load_errors_total,
// and resubscribes once a server is up. With only views.cairn corrupt it
// serves the previous copy meanwhile (stale, and what the copy holds,
// not the server's later view); with both corrupt it holds nothing, and
// a name is Not Ready (SERVFAIL, EDE 14) — never NXDOMAIN — until the
// server answers.
func TestAgentCorruptViewsFile(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	fx := startAgentFixture(t, "") // no --service: the first query subscribes
	a := fx.agent
	ctx := ctxT(t, 2*time.Minute)
	frontFresh := func(want []string) func() error {
		return func() error {
			got, _, r, err := frontAnswer(a.DNSAddr)
			if err != nil {
				return err
			}
			if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, want) || len(edeCodes(r)) != 0 {
				return fmt.Errorf("agent: %v; want NOERROR %v, no EDE", replyOf(r), want)
			}
			return nil
		}
	}
	Eventually(t, 10*time.Second, frontFresh(fx.front))
	prev := a.ViewsPath() + tablefile.PreviousSuffix
	Eventually(t, 10*time.Second, func() error {
		if n, err := keptInstances(a.ViewsPath(), "shop/front"); err != nil || n != 3 {
			return fmt.Errorf("%s holds %d instances of shop/front (%v); want 3", AgentViewsFile, n, err)
		}
		return nil
	})
	// Stopped, the agent writes its views once more (the time they were
	// last current), the file it replaces becoming the previous copy:
	// both hold front's three.
	if err := a.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{a.ViewsPath(), prev} {
		if n, err := keptInstances(path, "shop/front"); err != nil || n != 3 {
			t.Fatalf("%s holds %d instances of shop/front (%v); want 3", filepath.Base(path), n, err)
		}
	}
	// A fourth instance while the agent is down: the server's view moves
	// on from the one kept.
	fx.register(ctx, t, 4)
	all := append(slices.Clone(fx.front), "127.0.0.54")

	// down kills the server, corrupts the files named and starts the
	// agent, which must say what it could not read.
	down := func(t *testing.T, corrupt ...string) {
		t.Helper()
		if err := fx.srv.Kill(); err != nil {
			t.Fatal(err)
		}
		for _, p := range corrupt {
			flipBytes(t, p)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		log := lastRunLog(t, a)
		for _, p := range corrupt {
			if !strings.Contains(log, p) {
				t.Errorf("the agent's log does not name the corrupt file %s:\n%s", p, log)
			}
		}
		if n, err := a.Metric(ctx, "cairn_agent_file_load_errors_total"); err != nil || n < 1 {
			t.Errorf("cairn_agent_file_load_errors_total = %v (%v); want at least 1", n, err)
		}
	}
	// up restarts the server: the agent resubscribes and serves its
	// current view, fresh.
	up := func(t *testing.T) {
		t.Helper()
		if err := fx.srv.Restart(); err != nil {
			t.Fatal(err)
		}
		Eventually(t, 30*time.Second, frontFresh(all))
		// The server, back, first serves the table it kept on disk,
		// stale; caught up, it ends the streams it served stale so
		// that their subscribers resubscribe: the agent may be between
		// two streams when its answer is already fresh.
		Eventually(t, 30*time.Second, func() error {
			st, err := a.Status(ctx)
			if err != nil {
				return err
			}
			if v, ok := st.View(frontView); !st.Connected || st.Restored || !ok || v.Stale || v.Instances != 4 {
				return fmt.Errorf("agent status, server back: %+v; want connected, %s fresh with 4 instances", st, frontView)
			}
			return nil
		})
	}

	t.Run("views.cairn corrupt: the previous copy serves", func(t *testing.T) {
		down(t, a.ViewsPath())
		got, _, r, err := frontAnswer(a.DNSAddr)
		if err != nil {
			t.Fatal(err)
		}
		if r.Rcode != dns.RcodeSuccess || !slices.Equal(got, fx.front) || !slices.Contains(edeCodes(r), dns.ExtendedErrorCodeStaleAnswer) {
			t.Errorf("agent from the previous copy: %v; want NOERROR %v (the three it kept) with EDE 3", replyOf(r), fx.front)
		}
		if st, err := a.Status(ctx); err != nil || !st.Restored {
			t.Errorf("agent status from the previous copy: %+v (%v); want restored", st, err)
		}
		up(t)
	})
	if t.Failed() {
		return
	}
	t.Run("both corrupt: Not Ready until the server answers", func(t *testing.T) {
		if err := a.Stop(); err != nil {
			t.Fatal(err)
		}
		down(t, a.ViewsPath(), prev)
		r, err := ask(a.DNSAddr, frontName, dns.TypeA)
		if err != nil {
			t.Fatal(err)
		}
		if !notReady(r) {
			t.Errorf("agent with no view and no server: %s A: %v; want SERVFAIL with EDE 14 and no record", frontName, replyOf(r))
		}
		if err := a.WaitReady(200 * time.Millisecond); err == nil {
			t.Error("agent with no view and no server: /readyz answers 200; want not ready")
		}
		up(t)
	})
}

// keptInstances counts the instances of service ("ns/svc") in the
// views file at path.
func keptInstances(path, service string) (int, error) {
	s, err := tablefile.Load(path)
	if err != nil || s == nil {
		return 0, fmt.Errorf("loading %s: %v", path, err)
	}
	id := slices.Index(s.Services, service) + 1 // ids count from 1
	n := 0
	for _, e := range s.Entries {
		if id > 0 && e.Entry.Service == uint32(id) {
			n++
		}
	}
	return n, nil
}

// flipBytes inverts 16 bytes in the middle of the body of the file at
// path (past its header line), as a bad sector or a torn write would.
func flipBytes(t *testing.T, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	head := bytes.IndexByte(b, '\n') + 1
	mid := head + (len(b)-head)/2
	if head <= 0 || mid+16 > len(b) {
		t.Fatalf("%s: %d bytes, too short to corrupt its body", path, len(b))
	}
	for i := mid; i < mid+16; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// lastRunLog returns what the agent's current run has logged so far:
// its log from the harness's last start line on.
func lastRunLog(t *testing.T, a *Agent) string {
	t.Helper()
	b, err := os.ReadFile(a.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	if i := strings.LastIndex(s, "=== harness "); i >= 0 {
		s = s[i:]
	}
	return s
}

// TestAgentThroughCoreDNS: CoreDNS with the forward plugin, configured
// by deploy/coredns/Corefile and forwarding to an agent instead of a
// server, passes on the agent's answers as TestDNSThroughCoreDNS checks
// it passes on the server's.
func TestAgentThroughCoreDNS(t *testing.T) {
	needProcesses(t)
	t.Parallel()
	bin := corednsBinary(t)
	fx := startDNSFixture(t)
	a := StartAgent(t, []string{fx.node.GRPCAddr}, "--service", "shop/web", "--service", "shop/empty")
	// The agent holds what the checks ask for: web and empty, and the
	// server's word that nope does not exist (its first query subscribes
	// to it).
	Eventually(t, 30*time.Second, func() error {
		r, err := ask(a.DNSAddr, webName, dns.TypeA)
		if err != nil {
			return err
		}
		if got := addrSet(r.Answer); r.Rcode != dns.RcodeSuccess || !slices.Equal(got, fx.webA) || len(edeCodes(r)) != 0 {
			return fmt.Errorf("agent: %s A: %v; want NOERROR %v", webName, replyOf(r), fx.webA)
		}
		r, err = ask(a.DNSAddr, webSRV, dns.TypeSRV)
		if err != nil {
			return err
		}
		if got := srvSet(r.Answer); !slices.Equal(got, fx.webSRV) {
			return fmt.Errorf("agent: %s SRV %v; want the server's %v", webSRV, got, fx.webSRV)
		}
		r, err = ask(a.DNSAddr, nopeName, dns.TypeA)
		if err != nil {
			return err
		}
		if r.Rcode != dns.RcodeNameError {
			return fmt.Errorf("agent: %s A: %v; want NXDOMAIN once the server said it does not exist", nopeName, replyOf(r))
		}
		return nil
	})
	fx.checkThrough(t, startCoreDNS(t, bin, corednsSnippet{path: "coredns/Corefile", addr: dnsDefaultAddr, block: "cairn.internal {"}, a.DNSAddr))
}
