package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/wire"
)

// Load reports from real Envoys (SPEC §2, caller-observed outcomes; §4,
// LRS): the shipped bootstrap's load_stats_config sends Envoy's per
// endpoint counts to cairn, which asks for them every second here
// (--load-report-interval 1s) and hands them to the leader as outcome
// evidence from the caller: with ACLs on the token's identity, with them
// off the one anonymous caller, whatever node ids the Envoys claim.
//
// Envoy's own outlier detection, which cairn's clusters enable with the
// policy's max_ejection_percent (10 by default), ejects nothing here:
// one host of three is 33% of the cluster, above 10%, and Envoy ejects
// past the percentage only with always_eject_one_host, which cairn does
// not set. So Envoy keeps sending the failing upstream its share, and a
// load report a second carries its failures. The tests check that
// (lrsNoEjections) rather than assume it: were Envoy to eject the host,
// its reports would stop and the one-caller test would prove nothing.

// lrsInterval is the --load-report-interval the tests run cairn with.
const lrsInterval = time.Second

// lrsPolicy: no slow start, so that a published weight is the base
// weight (100) or, lowered by outcomes, half of it (SPEC §2).
var lrsPolicy = []string{"slow_start: 0s"}

// lrsAdmin is the admin token of the tests that run with ACLs.
const lrsAdmin = "lrs-admin-0123456789abcdefghijk"

// startLRS starts servers (one: --dev) asking for load reports every
// lrsInterval, applies the demo service with lrsPolicy, and registers n
// upstreams on leases that outlast the test (an expired lease would be
// evidence of its own). With readers, ACLs are on: lrsAdmin is the admin
// token (the harness's clients', and every server's to forward load
// reports to the leader with), and each reader a token that may read the
// demo namespace.
func startLRS(ctx context.Context, t *testing.T, servers, n int, readers ...string) (*Cluster, []*upstream) {
	t.Helper()
	args := []string{"--dev", "--load-report-interval", lrsInterval.String()}
	if servers > 1 {
		args[0] = "--allow-loopback-endpoints"
	}
	token := ""
	if len(readers) > 0 {
		acls := fmt.Sprintf("tokens:\n- {secret: %s, scope: admin}\n", lrsAdmin)
		for _, r := range readers {
			acls += fmt.Sprintf("- {secret: %s, scope: reader, namespaces: [%s]}\n", r, demoNS)
		}
		file := filepath.Join(t.TempDir(), "acl.yaml")
		if err := os.WriteFile(file, []byte(acls), 0o600); err != nil {
			t.Fatal(err)
		}
		token = lrsAdmin
		args = append(args, "--acl-file", file, "--probe-token", lrsAdmin)
	}
	c := StartClusterAs(t, token, servers, args...)
	applyDefinition(ctx, t, c, demoDefinition(t, lrsPolicy...))
	us := newUpstreams(t, "web", n)
	registerUpstreams(ctx, t, c, us, nil, func(r *wire.Registration) { r.LeaseTTL = wire.Duration(time.Hour) })
	return c, us
}

// lrsLoad sends requests through Envoys' listeners, one every `every`,
// taking the Envoys in turn, until stopped or for at most limit. It
// counts what Envoy answered itself (no upstream header) and transport
// errors.
type lrsLoad struct {
	stop, done chan struct{}
	mu         sync.Mutex
	sent, errs int
	own        map[int]int
	lastErr    error
}

func startLRSLoad(ctx context.Context, t *testing.T, every, limit time.Duration, es ...*Envoy) *lrsLoad {
	l := &lrsLoad{stop: make(chan struct{}), done: make(chan struct{}), own: map[int]int{}}
	go func() {
		defer close(l.done)
		tk := time.NewTicker(every)
		defer tk.Stop()
		end := time.After(limit)
		for i := 0; ; i++ {
			select {
			case <-l.stop:
				return
			case <-end:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
			}
			code, who, err := get(ctx, es[i%len(es)])
			l.mu.Lock()
			l.sent++
			switch {
			case err != nil:
				l.errs++
				l.lastErr = err
			case who == "":
				l.own[code]++
			}
			l.mu.Unlock()
		}
	}()
	t.Cleanup(l.Stop)
	return l
}

// Stop stops the load and waits for its last request; it may be called
// more than once.
func (l *lrsLoad) Stop() {
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	<-l.done
}

// String says what the load sent and what went wrong.
func (l *lrsLoad) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprintf("%d requests, %d transport errors (last: %v), answered by Envoy itself: %v", l.sent, l.errs, l.lastErr, l.own)
}

// lrsEndpoints returns demo/web's endpoints as node n serves them, by
// instance id; the leader's carry the evidence.
func lrsEndpoints(ctx context.Context, n *Node) (map[string]wire.Endpoint, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	es, err := n.Client().Endpoints(ctx, demoNS, demoSvc)
	if err != nil {
		return nil, fmt.Errorf("%s: endpoints of %s/%s: %w", n.ID, demoNS, demoSvc, err)
	}
	m := make(map[string]wire.Endpoint, len(es))
	for _, e := range es {
		m[e.InstanceID] = e
	}
	return m, nil
}

// lrsOutcome returns the latest outcome evidence observer gave about e.
func lrsOutcome(e wire.Endpoint, observer string) (wire.ClassEvidence, bool) {
	for _, ev := range e.Evidence {
		if ev.Class == "outcome" && ev.Observer == observer {
			return ev, true
		}
	}
	return wire.ClassEvidence{}, false
}

// lrsDescribe is an endpoint and its outcome evidence, for messages.
func lrsDescribe(e wire.Endpoint) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s verdict=%s eligible=%v weight=%d/%d reasons=%q", e.InstanceID, e.Verdict, e.Eligible, e.Weight, e.BaseWeight, e.Reasons)
	for _, ev := range e.Evidence {
		if ev.Class == "outcome" {
			fmt.Fprintf(&b, "\n    outcome from %s at %s ok=%v: %s", ev.Observer, ev.At.Format("15:04:05.000"), ev.OK, ev.Detail)
		}
	}
	return b.String()
}

// waitLRS polls the leader's endpoints until want passes for every
// upstream (want gets the upstream and its endpoint), and returns them.
func waitLRS(ctx context.Context, t *testing.T, c *Cluster, us []*upstream, timeout time.Duration, what string, want func(*upstream, wire.Endpoint) error) map[string]wire.Endpoint {
	t.Helper()
	var es map[string]wire.Endpoint
	err := Poll(timeout, 100*time.Millisecond, func() error {
		leader, err := c.Leader()
		if err != nil {
			return err
		}
		if es, err = lrsEndpoints(ctx, leader); err != nil {
			return err
		}
		for _, u := range us {
			e, ok := es[u.ID]
			if !ok {
				return fmt.Errorf("%s is not listed", u.ID)
			}
			if err := want(u, e); err != nil {
				return fmt.Errorf("%s: %v", lrsDescribe(e), err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	return es
}

// reportsOK passes when every observer's latest outcome window about the
// endpoint is a passing one with calls in it, and the endpoint is
// eligible at its full base weight.
func reportsOK(observers ...string) func(*upstream, wire.Endpoint) error {
	return func(_ *upstream, e wire.Endpoint) error {
		for _, o := range observers {
			ev, ok := lrsOutcome(e, o)
			switch {
			case !ok:
				return fmt.Errorf("no outcome evidence from %s", o)
			case !ev.OK || strings.HasPrefix(ev.Detail, "0 ok"):
				return fmt.Errorf("%s's latest window is not one of successes: %s", o, ev.Detail)
			}
		}
		if !e.Eligible || e.Weight != e.BaseWeight {
			return fmt.Errorf("not eligible at its base weight")
		}
		return nil
	}
}

// shortOfQuorum matches the reason of an instance whose weight callers'
// outcomes lowered without a quorum: how many failing, and the quorum
// (single digits here).
var shortOfQuorum = regexp.MustCompile(`^(\d) of \d+ callers report failures, short of the quorum \((\d),`)

// lrsNoEjections fails the test if Envoy's outlier detection ejected a
// host of the demo cluster (see the top of this file).
func lrsNoEjections(ctx context.Context, t *testing.T, e *Envoy) {
	t.Helper()
	// Envoy's stat names have the cluster name's ':' as '_'.
	prefix := "cluster." + strings.ReplaceAll(demoCluster, ":", "_") + ".outlier_detection."
	name := prefix + "ejections_enforced_total"
	detected, _, _ := e.Stat(ctx, prefix+"ejections_detected_consecutive_5xx")
	overflow, _, _ := e.Stat(ctx, prefix+"ejections_overflow")
	t.Logf("%s: outlier detection: %d consecutive-5xx outliers detected, ejections_overflow %d", e.name, detected, overflow)
	switch v, ok, err := e.Stat(ctx, name); {
	case err != nil || !ok:
		t.Errorf("%s: %s: %v (known: %v)", e.name, name, err, ok)
	case v != 0:
		t.Errorf("%s: %s = %d: Envoy ejected the failing host itself, so its load reports say little about it", e.name, name, v)
	}
}

// TestEnvoyLoadReportsOneCaller runs two Envoys from the shipped
// bootstrap, with different node ids, in front of three upstreams, ACLs
// off: a node id is whatever a client says, so both are one caller,
// "anonymous" (docs/decisions.md, "With ACLs off, callers are one").
//  1. The Envoys' load reports reach cairn: after traffic, the leader's
//     endpoints view holds passing outcome evidence from "anonymous"
//     about each upstream they sent requests to, and none before.
//  2. One upstream answers the Envoys 503 (its /ready stays 200, so
//     probes pass): the failures are taken as that caller's outcomes
//     about that instance only, and, one caller being short of
//     outcome_quorum (2), they halve its published weight, in the view
//     and in both Envoys, and do nothing else: it stays eligible for
//     lrsHold while failing windows keep coming, more than enough to
//     withdraw it were the two node ids two callers (3 failing windows,
//     WithdrawAfter, about 3 s at one report a second; two callers
//     withdraw it in about 6 s, see TestEnvoyLoadReportsQuorum).
func TestEnvoyLoadReportsOneCaller(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	c, us := startLRS(ctx, t, 1, 3)
	leader := c.Nodes[0]
	var envoys []*Envoy
	for _, node := range []string{"envoy-lrs-one", "envoy-lrs-two"} {
		envoys = append(envoys, startEnvoy(t, c, EnvoyConfig{Node: node}))
	}
	const observer = "anonymous"
	for _, e := range envoys {
		waitHosts(t, e, 30*time.Second, "the demo cluster from cairn", hostsAre("HEALTHY", us...))
	}
	// Envoy reports loads from now on; none carried a call yet.
	es, err := lrsEndpoints(ctx, leader)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range us {
		if ev, ok := lrsOutcome(es[u.ID], observer); ok {
			t.Fatalf("%s: outcome evidence before any traffic: %+v", u.ID, ev)
		}
	}

	// About 40 requests a second, 20 through each Envoy, about 7 to each
	// upstream through each: every one-second report has calls to each.
	load := startLRSLoad(ctx, t, 25*time.Millisecond, 2*time.Minute, envoys...)
	start := time.Now()
	waitLRS(ctx, t, c, us, 30*time.Second, "the Envoys' load reports as outcome evidence", func(u *upstream, e wire.Endpoint) error {
		if n, _ := u.Hits(); n == 0 {
			return fmt.Errorf("no request reached %s yet", u.ID)
		}
		return reportsOK(observer)(u, e)
	})
	t.Logf("passing outcome evidence from %s about all three upstreams %s after the traffic began", observer, time.Since(start).Round(time.Millisecond))

	sick, well := us[0], us[1:]
	sick.Code.Store(503)
	start = time.Now()
	var base int
	waitLRS(ctx, t, c, us, 30*time.Second, "one caller's failures lower the weight", func(u *upstream, e wire.Endpoint) error {
		if u != sick {
			return reportsOK(observer)(u, e)
		}
		ev, ok := lrsOutcome(e, observer)
		switch {
		case !ok || ev.OK:
			return fmt.Errorf("%s's latest window is not a failing one", observer)
		case !e.Eligible:
			return fmt.Errorf("withdrawn on one caller's word")
		case e.Weight != e.BaseWeight/2:
			return fmt.Errorf("weight %d, want half of %d", e.Weight, e.BaseWeight)
		}
		base = e.BaseWeight
		return nil
	})
	t.Logf("weight of %s halved %s after it began to fail", sick.ID, time.Since(start).Round(time.Millisecond))
	// The Envoys get the lowered weight: cairn's assignment changed, not
	// only its view.
	for _, e := range envoys {
		waitHosts(t, e, 30*time.Second, "the lowered weight in Envoy", func(hs []EnvoyHost) error {
			if err := hostsAre("HEALTHY", us...)(hs); err != nil {
				return err
			}
			for _, h := range hs {
				want := base
				if h.Addr == sick.Addr {
					want = base / 2
				}
				if h.Weight != want {
					return fmt.Errorf("host %s has weight %d, want %d", h.Addr, h.Weight, want)
				}
			}
			return nil
		})
	}

	// Hold: the instance stays eligible, at half weight, in the Envoys'
	// hosts, while that caller's failing windows keep coming.
	const lrsHold = 20 * time.Second
	failing := map[time.Time]bool{}
	holdStart := time.Now()
	for time.Since(holdStart) < lrsHold {
		es, err := lrsEndpoints(ctx, leader)
		if err != nil {
			t.Fatal(err)
		}
		se := es[sick.ID]
		if !se.Eligible || se.Weight != base/2 {
			t.Fatalf("%s after %s of failures from one caller: %s", sick.ID, time.Since(holdStart).Round(time.Millisecond), lrsDescribe(se))
		}
		for _, w := range well {
			if err := reportsOK(observer)(w, es[w.ID]); err != nil {
				t.Fatalf("%s: %v (only %s fails)", lrsDescribe(es[w.ID]), err, sick.ID)
			}
		}
		if ev, ok := lrsOutcome(se, observer); ok && !ev.OK && !ev.At.Before(holdStart) {
			failing[ev.At] = true
		}
		for _, e := range envoys {
			hs, err := e.Hosts(ctx, demoCluster)
			if err != nil {
				t.Fatal(err)
			}
			if err := hostsAre("HEALTHY", us...)(hs); err != nil {
				t.Fatalf("%s after %s: %v; holds %s", e.name, time.Since(holdStart).Round(time.Millisecond), err, hostLines(hs))
			}
		}
		select {
		case <-ctx.Done():
			t.Fatal(ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
	load.Stop()
	// One window a second for 20 s: 20 expected; 8 is plenty to have
	// withdrawn it (3) and leaves room for a slow machine.
	if len(failing) < 8 {
		t.Errorf("%d failing outcome windows from %s reached the leader in %s; want at least 8, or holding means little", len(failing), observer, lrsHold)
	}
	for _, e := range envoys {
		lrsNoEjections(ctx, t, e)
	}
	if load.errs > 0 || len(load.own) > 0 {
		t.Errorf("load: %s", load)
	}
	t.Logf("%s stayed eligible at weight %d for %s while %d failing windows from one caller came; load: %s", sick.ID, base/2, lrsHold, len(failing), load)
}

// TestEnvoyLoadReportsQuorum runs two Envoys with tokens of their own
// (ACLs on: two callers, outcome_quorum's default) in front of three
// upstreams, both sending traffic, on a cluster of three servers: each Envoy talks
// to a different follower only, whose xDS server forwards its load
// reports to the leader (TestEnvoyLoadReportsOneCaller covers a leader
// taking them itself). When one upstream answers 503 to both, each
// Envoy's reports fail it, the callers reach the quorum (2 of the 2
// that report on it, above a third) and the leader withdraws it on
// outcomes alone (its probes pass): not eligible in the view, and gone
// from both Envoys' hosts, after which no request reaches it and Envoy
// never answers itself. The other two keep their full weight.
func TestEnvoyLoadReportsQuorum(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	readers := []string{"lrs-reader-1-0123456789abcdefg", "lrs-reader-2-0123456789abcdefg"}
	c, us := startLRS(ctx, t, 3, 3, readers...)
	var leader *Node
	Eventually(t, 30*time.Second, func() (err error) {
		leader, err = c.Leader()
		return err
	})
	var followers []*Node
	for _, n := range c.Nodes {
		if n != leader {
			followers = append(followers, n)
		}
	}
	var envoys []*Envoy
	var observers []string
	for i, node := range []string{"envoy-lrs-q1", "envoy-lrs-q2"} {
		envoys = append(envoys, startEnvoy(t, c, EnvoyConfig{Node: node, Servers: []string{followers[i].GRPCAddr}, Token: readers[i]}))
		// The caller is the token's identity, as cairn names it.
		observers = append(observers, "reader:"+acl.AccessorOf(acl.DigestOf(readers[i])))
	}
	for _, e := range envoys {
		waitHosts(t, e, 30*time.Second, "the demo cluster from cairn", hostsAre("HEALTHY", us...))
	}
	// 40 requests a second in all, 20 through each Envoy, about 7 to
	// each upstream through each.
	load := startLRSLoad(ctx, t, 25*time.Millisecond, 2*time.Minute, envoys...)
	waitLRS(ctx, t, c, us, 30*time.Second, "both Envoys' load reports as outcome evidence", func(u *upstream, e wire.Endpoint) error {
		return reportsOK(observers...)(u, e)
	})

	sick, well := us[0], us[1:]
	sick.Code.Store(503)
	start := time.Now()
	// On its way out the instance is degraded, at half weight, while the
	// callers' failing windows add up to a withdrawal; its reason must
	// not call callers who are a quorum short of one.
	var contradictions []string
	met := ""
	waitLRS(ctx, t, c, us, 30*time.Second, "a quorum of callers withdraws the failing upstream", func(u *upstream, e wire.Endpoint) error {
		if u != sick {
			return reportsOK(observers...)(u, e)
		}
		for _, r := range e.Reasons {
			if strings.Contains(r, "a quorum (") {
				met = r
			}
			if m := shortOfQuorum.FindStringSubmatch(r); m != nil && m[1] >= m[2] && !slices.Contains(contradictions, r) {
				contradictions = append(contradictions, r)
			}
		}
		for _, o := range observers {
			if ev, ok := lrsOutcome(e, o); !ok || ev.OK {
				return fmt.Errorf("%s has not reported it failing", o)
			}
		}
		switch {
		case e.Eligible:
			return fmt.Errorf("still eligible")
		case !strings.Contains(strings.Join(e.Reasons, "; "), "quorum of callers report failures"):
			return fmt.Errorf("withdrawn, but not for its callers' outcomes")
		}
		return nil
	})
	withdrawn := time.Since(start)
	if len(contradictions) > 0 {
		t.Errorf("reasons of %s call a quorum short of the quorum: %q", sick.ID, contradictions)
	}
	// The state between is ~2 s long and polled every 100 ms: a poll
	// that never saw it checked nothing above.
	if met == "" {
		t.Error("no poll saw the instance with the quorum met and not yet withdrawn")
	}
	t.Logf("on its way out: %q", met)
	for _, e := range envoys {
		waitHosts(t, e, 30*time.Second, "the withdrawal in Envoy", hostsAre("HEALTHY", well...))
	}
	inEnvoys := time.Since(start)
	// From now on the Envoys hold only the two well upstreams: a second
	// of traffic reaches neither the sick one nor Envoy's own 503.
	gone := time.Now()
	for _, e := range envoys {
		by, own, err := spread(ctx, e, 20)
		if err != nil {
			t.Fatal(err)
		}
		if by[sick.ID] > 0 || len(own) > 0 || by[well[0].ID]+by[well[1].ID] != 20 {
			t.Errorf("%s after the withdrawal: upstreams %v, Envoy itself %v", e.name, by, own)
		}
	}
	load.Stop()
	if n := sick.HitsSince(gone); n > 0 {
		t.Errorf("%d requests reached %s after both Envoys dropped it", n, sick.ID)
	}
	for _, e := range envoys {
		lrsNoEjections(ctx, t, e)
	}
	if load.errs > 0 || len(load.own) > 0 {
		t.Errorf("load: %s", load)
	}
	t.Logf("%s withdrawn by the leader %s after it began to fail, out of both Envoys after %s; load: %s",
		sick.ID, withdrawn.Round(time.Millisecond), inEnvoys.Round(time.Millisecond), load)
}
