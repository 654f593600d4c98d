package integration

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Taking an instance out of rotation, as a real Envoy sees it: a drain
// (the CLI), a deregistration (the CLI) and a failed probe each stop
// every new request through Envoy's listener to that instance, while the
// others keep answering; and neither draining two of three nor Envoy's
// outlier ejections below its panic threshold put traffic back on the
// drained ones.

// Windows of the withdrawal tests.
const (
	// settleAfterCairn is how long after cairn has made the change (the
	// CLI returned; the API shows the probe's withdrawal) a request may
	// still reach the instance: cairn pushes the assignment to Envoy on
	// commit (SPEC §2, within 100 ms) and Envoy applies it in
	// milliseconds; 2 s is generous on a shared 2-core machine under
	// -race.
	settleAfterCairn = 2 * time.Second
	// settleAfterEnvoy is the same bound counted from Envoy's admin
	// first showing the change, if that came later: Envoy's main thread
	// applies an assignment before its worker does, and a request the
	// worker had routed already completes.
	settleAfterEnvoy = time.Second
	// observeWindow is how long traffic keeps going after the settle
	// window, with no request to the instance allowed.
	observeWindow = 3 * time.Second
	// changeBound is how long after cairn was done Envoy may take to
	// show the change in /clusters before the test fails: the change
	// takes milliseconds, only an assignment that never arrives breaks
	// 10 s.
	changeBound = 10 * time.Second
	// loadWorkers send GETs through Envoy, each one every loadEvery at
	// most (up to 400 a second in all: every upstream of three gets one
	// about every 10 ms, which is the resolution of the times logged).
	loadWorkers = 4
	loadEvery   = 10 * time.Millisecond
)

// envoyFleet starts a --dev server with the demo service (drain window
// 1h, so a drained instance stays draining, and a 10 m lease, so that no
// instance's lease runs out during the test), n upstreams registered in
// the bootstrap's zone, and an Envoy that holds them all HEALTHY. It
// returns the upstreams' incarnations by id.
func envoyFleet(ctx context.Context, t *testing.T, n int) (*Cluster, *Envoy, []*upstream, map[string]uint64) {
	t.Helper()
	c := StartCluster(t, 1, "--dev")
	def := demoDefinition(t, "drain_window: 1h")
	if !strings.Contains(def, "lease_ttl: 30s") {
		t.Fatal("deploy/demo.yaml no longer sets lease_ttl: 30s; change envoyFleet")
	}
	applyDefinition(ctx, t, c, strings.Replace(def, "lease_ttl: 30s", "lease_ttl: 10m", 1))
	us := newUpstreams(t, "web", n)
	registerUpstreams(ctx, t, c, us, nil, nil)
	eps, err := c.Nodes[0].Client().Endpoints(ctx, demoNS, demoSvc)
	if err != nil {
		t.Fatal(err)
	}
	incs := map[string]uint64{}
	for _, ep := range eps {
		incs[ep.InstanceID] = ep.Incarnation
	}
	for _, u := range us {
		if incs[u.ID] == 0 {
			t.Fatalf("%s is not among the endpoints of %s/%s: %v", u.ID, demoNS, demoSvc, eps)
		}
	}
	e := startEnvoy(t, c, EnvoyConfig{})
	waitHosts(t, e, 60*time.Second, "every upstream probed healthy", hostsAre("HEALTHY", us...))
	return c, e, us, incs
}

// load is a bounded stream of GETs through an Envoy's listener.
type load struct {
	stop    context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	sent    int
	failed  []string // the first few requests that got no upstream's 200
	nFailed int
}

// startLoad sends GETs through e from loadWorkers goroutines, each at
// most one every loadEvery, until Stop or until limit has passed: it
// stops by itself. It is stopped when the test ends.
func startLoad(t *testing.T, e *Envoy, limit time.Duration) *load {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	l := &load{stop: cancel, done: make(chan struct{})}
	var wg sync.WaitGroup
	for range loadWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(loadEvery)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				code, who, err := get(ctx, e)
				if ctx.Err() != nil {
					return
				}
				l.mu.Lock()
				l.sent++
				if err != nil || code != http.StatusOK || who == "" {
					l.nFailed++
					if len(l.failed) < 5 {
						l.failed = append(l.failed, fmt.Sprintf("%s: %d from %q, %v", time.Now().Format("15:04:05.000"), code, who, err))
					}
				}
				l.mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(l.done) }()
	t.Cleanup(l.Stop)
	return l
}

// Stop stops the load and waits for its requests to end.
func (l *load) Stop() { l.stop(); <-l.done }

// check fails the test if a request got no upstream's 200: taking one
// instance out of three must cost no request.
func (l *load) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.nFailed > 0 {
		t.Errorf("%d of %d requests through Envoy got no upstream's 200; the first: %s", l.nFailed, l.sent, strings.Join(l.failed, "; "))
	}
}

// watchHosts polls e's hosts of the demo cluster every 10 ms until want
// passes or ctx is done, and then sends when want passed (zero if it did
// not).
func watchHosts(ctx context.Context, e *Envoy, want func([]EnvoyHost) error) <-chan time.Time {
	ch := make(chan time.Time, 1)
	go func() {
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			if hs, err := e.Hosts(ctx, demoCluster); err == nil && want(hs) == nil {
				ch <- time.Now()
				return
			}
			select {
			case <-ctx.Done():
				ch <- time.Time{}
				return
			case <-tick.C:
			}
		}
	}()
	return ch
}

// takeOut is what one test does and expects.
type takeOut struct {
	what string // "drain", "deregister", …, for messages
	// gone are the upstreams taken out; the others must keep answering.
	gone []*upstream
	// act takes them out and returns when cairn has done it: the
	// reference time of the settle window.
	act func() time.Time
	// envoy passes once Envoy's /clusters shows the change; it must
	// still pass when the observation ends.
	envoy func([]EnvoyHost) error
}

// observe runs load through e (all of us in rotation first), does w.act,
// and checks that from the settle window's end on, through a further
// observeWindow of traffic, no request reaches any of w.gone while the
// others keep answering and no request fails. It logs when the last
// request reached each of w.gone and when Envoy showed the change, both
// counted from when act returned, and returns them.
func observe(t *testing.T, e *Envoy, us []*upstream, w takeOut) (lastHit, envoyAt time.Duration) {
	t.Helper()
	l := startLoad(t, e, 2*time.Minute)
	started := time.Now()
	Eventually(t, 30*time.Second, func() error {
		for _, u := range us {
			if n := u.HitsSince(started); n < 20 {
				return fmt.Errorf("%s got %d requests through Envoy so far, want 20 before the %s", u.ID, n, w.what)
			}
		}
		return nil
	})
	watch, stopWatch := context.WithCancel(context.Background())
	defer stopWatch()
	seen := watchHosts(watch, e, w.envoy)
	done := w.act()
	timer := time.AfterFunc(time.Until(done.Add(changeBound)), stopWatch)
	defer timer.Stop()
	shown := <-seen
	if shown.IsZero() {
		hs, err := e.Hosts(context.Background(), demoCluster)
		t.Fatalf("%s: Envoy did not show it within %v after cairn was done: it holds %s (%v)", w.what, changeBound, hostLines(hs), err)
	}
	settled := done.Add(settleAfterCairn)
	if s := shown.Add(settleAfterEnvoy); s.After(settled) {
		settled = s
	}
	end := settled.Add(observeWindow)
	time.Sleep(time.Until(end)) // the length of the observation, not a wait for a condition
	l.Stop()
	l.check(t)
	waitHosts(t, e, time.Second, w.what+" still shown at the end", w.envoy)
	var last time.Time
	for _, u := range w.gone {
		if n := u.HitsSince(settled); n > 0 {
			t.Errorf("%s: %d requests reached %s through Envoy after the settle window (%v after cairn was done, Envoy showed it %+v after)",
				w.what, n, u.ID, settled.Sub(done).Round(time.Millisecond), shown.Sub(done).Round(time.Millisecond))
		}
		if _, at := u.Hits(); at.After(last) {
			last = at
		}
	}
	gone := map[*upstream]bool{}
	for _, u := range w.gone {
		gone[u] = true
	}
	var others []string
	for _, u := range us {
		if !gone[u] {
			n := u.HitsSince(settled)
			// 3 s at up to 400 requests a second: even a starved
			// machine sends more than 20 to each.
			if n < 20 {
				t.Errorf("%s: %s got %d requests in the %v after the settle window; is the load running?", w.what, u.ID, n, observeWindow)
			}
			others = append(others, fmt.Sprintf("%s %d", u.ID, n))
		}
	}
	lastHit, envoyAt = last.Sub(done), shown.Sub(done)
	t.Logf("%s: the last request reached the instance %+v after cairn was done; Envoy's /clusters showed it %+v after; "+
		"settle window %v; then in %v: 0 to it, %s (load: %d requests)",
		w.what, lastHit.Round(time.Millisecond), envoyAt.Round(time.Millisecond), settled.Sub(done).Round(time.Millisecond),
		observeWindow, strings.Join(others, ", "), l.sent)
	return lastHit, envoyAt
}

// hostIs passes when Envoy holds exactly us, HEALTHY, and gone, each with
// health status health.
func hostIs(health string, us []*upstream, gone ...*upstream) func([]EnvoyHost) error {
	return func(hs []EnvoyHost) error {
		want := map[string]string{}
		for _, u := range us {
			want[u.Addr] = "HEALTHY"
		}
		for _, u := range gone {
			want[u.Addr] = health
		}
		if len(hs) != len(want) {
			return fmt.Errorf("%d hosts, want %d", len(hs), len(want))
		}
		for _, h := range hs {
			if w, ok := want[h.Addr]; !ok || h.Health != w {
				return fmt.Errorf("host %s is %q, want %q", h.Addr, h.Health, w)
			}
		}
		return nil
	}
}

// drainCLI drains u with `cairn drain` and returns when the CLI did.
func drainCLI(ctx context.Context, t *testing.T, n *Node, u *upstream, inc uint64) time.Time {
	t.Helper()
	return timedCLI(ctx, t, n, "drain", u, inc)
}

// timedCLI runs `cairn VERB` on instance u of the demo service, logs how
// long the CLI took, and returns when it returned.
func timedCLI(ctx context.Context, t *testing.T, n *Node, verb string, u *upstream, inc uint64) time.Time {
	t.Helper()
	start := time.Now()
	runCLI(ctx, t, n, verb, "--instance", u.ID, "--incarnation", strconv.FormatUint(inc, 10), demoNS+"/"+demoSvc)
	done := time.Now()
	t.Logf("cairn %s %s took %v", verb, u.ID, done.Sub(start).Round(time.Millisecond))
	return done
}

// TestEnvoyDrainStopsNewRequests: `cairn drain` of one of three
// upstreams: Envoy holds it DRAINING and sends it no new request, the
// other two take all the traffic, and no request fails.
func TestEnvoyDrainStopsNewRequests(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	c, e, us, incs := envoyFleet(ctx, t, 3)
	observe(t, e, us, takeOut{
		what:  "cairn drain",
		gone:  us[:1],
		act:   func() time.Time { return drainCLI(ctx, t, c.Nodes[0], us[0], incs[us[0].ID]) },
		envoy: hostIs("DRAINING", us[1:], us[0]),
	})
}

// TestEnvoyDeregisterStopsNewRequests: `cairn deregister` of one of
// three upstreams: Envoy no longer holds it and sends it no new request,
// and no request fails.
func TestEnvoyDeregisterStopsNewRequests(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	c, e, us, incs := envoyFleet(ctx, t, 3)
	observe(t, e, us, takeOut{
		what:  "cairn deregister",
		gone:  us[:1],
		act:   func() time.Time { return timedCLI(ctx, t, c.Nodes[0], "deregister", us[0], incs[us[0].ID]) },
		envoy: hostIs("", us[1:]),
	})
}

// TestEnvoyFailedProbeStopsNewRequests: one of three upstreams answers
// /ready with 503 (its requests still succeed): cairn withdraws it after
// its probe failures (3 at a 2 s interval), Envoy no longer holds it and
// sends it no new request, and no request fails. The settle window
// counts from when cairn's API shows the withdrawal.
func TestEnvoyFailedProbeStopsNewRequests(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	c, e, us, _ := envoyFleet(ctx, t, 3)
	var failed, withdrawn time.Time
	lastHit, envoyAt := observe(t, e, us, takeOut{
		what: "a failed probe",
		gone: us[:1],
		act: func() time.Time {
			us[0].Ready.Store(false)
			failed = time.Now()
			// Three failures 2 s apart, and the probe's own timeout and
			// jitter: well under 30 s unless withdrawal is broken.
			Eventually(t, 30*time.Second, func() error {
				ep, err := c.Nodes[0].Client().Endpoints(ctx, demoNS, demoSvc)
				if err != nil {
					return err
				}
				for _, x := range ep {
					if x.InstanceID == us[0].ID && x.Eligible {
						return fmt.Errorf("%s is still eligible: %s", x.InstanceID, describe(x))
					}
				}
				withdrawn = time.Now()
				return nil
			})
			t.Logf("cairn's API showed %s withdrawn %v after /ready began to answer 503", us[0].ID, withdrawn.Sub(failed).Round(time.Millisecond))
			return withdrawn
		},
		envoy: hostIs("", us[1:]),
	})
	t.Logf("from /ready's first 503: cairn withdrew it after %v, Envoy's /clusters dropped it after %v, the last request reached it after %v",
		withdrawn.Sub(failed).Round(time.Millisecond), withdrawn.Add(envoyAt).Sub(failed).Round(time.Millisecond),
		withdrawn.Add(lastHit).Sub(failed).Round(time.Millisecond))
}

// TestEnvoyDrainTwoOfThreeKeepsThemOut: draining two of three upstreams
// leaves one healthy host of three. Envoy routes to every host of a
// priority, whatever its health, when fewer than its panic threshold
// (50% by default) of its hosts are healthy; Envoy 1.40 excludes DRAINING
// hosts from that count (membership_excluded), so this alone does not
// panic it, but cairn must not depend on that: no new request may reach
// either drained upstream (SPEC §2: draining instances never come back
// through the guard).
func TestEnvoyDrainTwoOfThreeKeepsThemOut(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	c, e, us, incs := envoyFleet(ctx, t, 3)
	observe(t, e, us, takeOut{
		what: "cairn drain of two of three",
		gone: us[:2],
		act: func() time.Time {
			drainCLI(ctx, t, c.Nodes[0], us[0], incs[us[0].ID])
			return drainCLI(ctx, t, c.Nodes[0], us[1], incs[us[1].ID])
		},
		envoy: hostIs("DRAINING", us[2:], us[:2]...),
	})
	logClusterStats(ctx, t, e, "membership_excluded", "lb_healthy_panic")
}

// TestEnvoyEjectionBelowPanicThresholdKeepsDrainedOut: a rolling deploy
// under the demo's policy (max_ejection_percent 10, the default): 17 of
// 20 upstreams draining, and 2 of the 3 left answer every request with
// 503 (their /ready still passes). Envoy's outlier detection ejects those
// two (2 of 20 hosts is its 10%), which leaves 1 healthy host of the 3 it
// counts, below its default panic threshold: in panic Envoy routes to
// every host, the excluded DRAINING ones too. cairn decides fail-open
// itself, so no request may reach a drained upstream, and the healthy one
// takes the traffic.
func TestEnvoyEjectionBelowPanicThresholdKeepsDrainedOut(t *testing.T) {
	needEnvoy(t)
	t.Parallel()
	ctx := ctxT(t, 4*time.Minute)
	c, e, us, incs := envoyFleet(ctx, t, 20)
	drained, failing, good := us[:17], us[17:19], us[19]
	for _, u := range drained {
		runCLI(ctx, t, c.Nodes[0], "drain", "--instance", u.ID, "--incarnation", strconv.FormatUint(incs[u.ID], 10), demoNS+"/"+demoSvc)
	}
	waitHosts(t, e, changeBound, "17 of 20 draining", hostIs("DRAINING", us[17:], drained...))
	l := startLoad(t, e, 2*time.Minute)
	started := time.Now()
	Eventually(t, 30*time.Second, func() error {
		for _, u := range us[17:] {
			if n := u.HitsSince(started); n < 20 {
				return fmt.Errorf("%s got %d requests through Envoy so far, want 20", u.ID, n)
			}
		}
		return nil
	})
	for _, u := range failing {
		u.Code.Store(http.StatusServiceUnavailable)
	}
	failed := time.Now()
	// Five 503s in a row eject a host at once (Envoy's consecutive_5xx);
	// at ~130 requests a second to each, 30 s is only broken if Envoy
	// does not eject.
	waitHosts(t, e, 30*time.Second, "the two failing upstreams ejected", func(hs []EnvoyHost) error {
		for _, h := range hs {
			for _, u := range failing {
				if h.Addr == u.Addr && !slices.Contains(h.Flags, "failed_outlier_check") {
					return fmt.Errorf("%s (%s) is not ejected", u.ID, h.Addr)
				}
			}
		}
		return nil
	})
	ejected := time.Now()
	// The test's premise: Envoy counts fewer than half of the hosts it
	// does not exclude as healthy, so its default panic threshold (50%)
	// would send traffic to every host, the drained ones too. Without it
	// the test would pass whatever cairn sends.
	total, excluded, healthy := clusterStat(ctx, t, e, "membership_total"), clusterStat(ctx, t, e, "membership_excluded"),
		clusterStat(ctx, t, e, "membership_healthy")
	if 2*healthy >= total-excluded {
		t.Fatalf("Envoy counts %d healthy of %d hosts (%d excluded): not below its default panic threshold, so this proves nothing", healthy, total, excluded)
	}
	// Envoy ejects a host for 30 s (base_ejection_time); the window ends
	// well before, on any machine that ran the test this far.
	settled := ejected.Add(settleAfterEnvoy)
	time.Sleep(time.Until(settled.Add(observeWindow))) // the length of the observation, not a wait for a condition
	l.Stop()
	var to []string
	for _, u := range drained {
		if n := u.HitsSince(settled); n > 0 {
			to = append(to, fmt.Sprintf("%s %d", u.ID, n))
		}
	}
	n := good.HitsSince(settled)
	if len(to) > 0 {
		t.Errorf("in the %v after the settle window, requests reached drained upstreams through Envoy: %s (the healthy %s got %d)",
			observeWindow, strings.Join(to, ", "), good.ID, n)
	} else if n < 20 {
		t.Errorf("the healthy %s got %d requests in the %v after the settle window; is the load running?", good.ID, n, observeWindow)
	}
	t.Logf("Envoy showed both failing upstreams ejected %v after they began to fail; settle window %v; then in %v: %s got %d requests, drained ones %d (load: %d requests)",
		ejected.Sub(failed).Round(time.Millisecond), settleAfterEnvoy, observeWindow, good.ID, n, len(to), l.sent)
	logClusterStats(ctx, t, e, "membership_excluded", "membership_healthy", "lb_healthy_panic", "outlier_detection.ejections_active")
}

// clusterStat returns one of Envoy's stats of the demo cluster, failing
// the test if Envoy has no such stat.
func clusterStat(ctx context.Context, t *testing.T, e *Envoy, name string) int64 {
	t.Helper()
	full := "cluster." + strings.ReplaceAll(demoCluster, ":", "_") + "." + name
	v, ok, err := e.Stat(ctx, full)
	if err != nil || !ok {
		t.Fatalf("Envoy's stat %s: present %v, %v", full, ok, err)
	}
	return v
}

// logClusterStats logs some of Envoy's stats of the demo cluster.
func logClusterStats(ctx context.Context, t *testing.T, e *Envoy, names ...string) {
	t.Helper()
	var b strings.Builder
	for _, name := range names {
		v, ok, err := e.Stat(ctx, "cluster."+strings.ReplaceAll(demoCluster, ":", "_")+"."+name)
		fmt.Fprintf(&b, " %s=%d", name, v)
		if !ok || err != nil {
			fmt.Fprintf(&b, "(%v %v)", ok, err)
		}
	}
	t.Logf("Envoy's stats of %s:%s", demoCluster, b.String())
}
