package scenarios

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/bench/xdssub"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// Experiment 5's figures.
const (
	xrWatch = 4 // services per subscriber
	// xrSubsFile is the file a server keeps its subscriber count in
	// (cmd.XDSSubscribersFile; not imported, so that the scenario links
	// no server code).
	xrSubsFile = "xds-subscribers.json"
	// xrChurnRate is the churn's changes a minute: 5 a second, one
	// instance out at a time, so that views change while the servers
	// restart.
	xrChurnRate = 300
)

// TestXDSTierRestart is experiment 5: the xDS tier restarted with its
// subscribers attached, on the simulated region (StartRegion: 3 servers
// with ACLs, 2,000 instances at full size, 200 short). Delta
// subscribers (2,000 at full size, 200 short; StartSubscribers), a
// third in each zone streaming from its zone's server with a reader
// token, watch 4 of the services registered through the Go client each,
// while a churn withdraws and registers those services' instances
// again (churn.go). The three servers are restarted at once (the SPEC
// figure: the tier, every server capping its own subscribers' return),
// and at full size then one at a time (a rolling restart). Each
// subscriber comes back naming the versions it holds. Measured per
// server: the streams admitted per 10 s window of the server's cap
// against SPEC §4's rule (5% of the count before the restart, at least
// 50), the time until every subscriber is back, the refusals; per
// subscriber: any resource sent older (by store revision) than the one
// it held, and any assignment sent empty or removed while its service
// had instances (field notes X6).
func TestXDSTierRestart(t *testing.T) {
	if testing.Short() {
		if os.Getenv("CI") == "true" {
			t.Fatal("-short would skip this real-process scenario, and nothing may skip under CI=true")
		}
		t.Skip("starts real cairn processes; skipped under -short")
	}
	subs, phases := 200, []string{"all"}
	if Full() {
		subs, phases = 2000, []string{"all", "rolling"}
	}
	res := NewResult("xds-tier-restart", fmt.Sprintf("Experiment 5: the xDS tier restarted under %d delta subscribers", subs))
	start := time.Now()
	reg := StartRegion(t, SizeConfig())
	res.Note("region: %d services, %d instances, 3 servers with ACLs; started in %s", len(reg.Services), len(reg.Instances()), reg.StartTimes)
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()

	// The services watched and churned: those registered through the
	// Go client (not the leased one, whose instances live by the CLI's
	// renewals, nor the third party's single instance).
	var watched []ServiceSpec
	for _, s := range reg.Services {
		if s.Registrar == ByClient {
			watched = append(watched, s)
		}
	}
	var churned []Instance
	for _, in := range reg.Instances() {
		if in.Registrar == ByClient {
			churned = append(churned, in)
		}
	}
	r := &xrRun{nodes: reg.Nodes(), start: start, token: reg.CallerToken(reg.Callers - 1), watched: watched}
	r.waitLayout(ctx, t)
	r.subs = make([]*xrSub, subs)
	for i := range subs {
		r.subs[i] = &xrSub{id: i, node: i % len(Zones())}
	}
	attach := time.Now()
	pop := StartSubscribers(t, reg, SubscribersConfig[xrAssignment]{Count: subs, Watch: xrWatch, Services: watched, Token: r.token, Seed: 32,
		Decode: xrDecode, Opened: r.opened, Closed: r.closed, Refused: func(_ *Subscriber, err error) { r.refused(err) },
		Sent: r.sent, Received: r.received})
	for i, z := range Zones() {
		r.perNode[i] = pop.PerZone[z]
	}
	integration.Eventually(t, 2*time.Minute, r.allConnected)
	res.Note("%d subscribers attached in %.1f s (%d, %d, %d on n1, n2, n3, zones a, b, c), each watching %d of the %d services registered through the Go client",
		subs, time.Since(attach).Seconds(), r.perNode[0], r.perNode[1], r.perNode[2], xrWatch, len(watched))

	cctx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	churn, err := NewChurn(time.Now(), ChurnConfig{Phases: []ChurnPhase{{"restarts", xrChurnRate, 14 * time.Minute}},
		Workers: 3, Out: 1, Instances: churned, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	if err := churn.Start(cctx, reg); err != nil {
		t.Fatal(err)
	}
	sctx, stopSample := context.WithCancel(ctx)
	sampled := make(chan struct{})
	go func() { defer close(sampled); r.sample(sctx) }()

	for _, ph := range phases {
		switch ph {
		case "all":
			r.restartAll(ctx, t, res)
		case "rolling":
			for i := range r.nodes {
				r.restartOne(ctx, t, res, i)
			}
		}
	}
	stopChurn()
	ch := churn.Wait()
	pop.Stop()
	stopSample()
	<-sampled
	r.report(res, ch, pop.Counts())
	res.Report(t)
}

// xrRun is the scenario's state: the subscribers and what they saw.
type xrRun struct {
	nodes   []*integration.Node
	start   time.Time
	token   string
	watched []ServiceSpec
	perNode [3]int
	subs    []*xrSub // by subscriber id

	connected [3]atomic.Int64 // streams answered and open, by node
	refusals  sync.Map        // refusal kind → *atomic.Int64

	mu       sync.Mutex
	admits   [3][]xrAdmit // by node: every stream answered, in order
	timeline [4][]Point   // connected by node, then all
	marks    []Mark
}

// xrSub is one subscriber's record; only its goroutine writes it until
// the subscribers have stopped.
type xrSub struct {
	id, node    int
	opens       int
	resumes     int // opens naming versions held
	heldAsked   int // versions named, over the resumes
	resent      int // resources in the resumes' first answers
	regressions []xdssub.Regression
	empties     []string // assignments sent with nothing in rotation, or removed: what, when, how
}

// xrAssignment is a decoded assignment: how many endpoints are in
// rotation, and each endpoint with its health.
type xrAssignment struct {
	inRotation int
	endpoints  []string
}

func xrDecode(cla *endpointv3.ClusterLoadAssignment) (xrAssignment, error) {
	a := xrAssignment{inRotation: len(xdstest.InRotation(cla))}
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			a.endpoints = append(a.endpoints, fmt.Sprintf("%s:%d %s", e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress(),
				e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(), e.HealthStatus))
		}
	}
	return a, nil
}

// waitLayout waits until every server serves every watched assignment
// with every instance in rotation, so that no subscriber starts from a
// partial one.
func (r *xrRun) waitLayout(ctx context.Context, t *testing.T) {
	var names []string
	want := map[string]int{}
	for _, s := range r.watched {
		names = append(names, AssignmentName(s))
		want[AssignmentName(s)] = s.Count
	}
	for _, n := range r.nodes {
		cc, err := xdstest.Dial(n.GRPCAddr)
		if err != nil {
			t.Fatal(err)
		}
		full := map[string]bool{}
		err = integration.Poll(2*time.Minute, 200*time.Millisecond, func() error {
			sess, err := xdssub.Open(ctx, cc, xdssub.Request{Node: &corev3.Node{Id: "xr-probe"}, Token: r.token, Type: resourcev3.EndpointType, Names: names},
				xdssub.Retry{Deadline: time.Now().Add(5 * time.Second)}, rand.New(rand.NewPCG(1, 1)), nil)
			if err != nil {
				return err
			}
			defer sess.Close()
			resp := sess.First
			for {
				for _, rs := range resp.Resources {
					cla, err := xdstest.DecodeAssignment(rs)
					if err != nil {
						return err
					}
					full[rs.Name] = len(xdstest.InRotation(cla)) == want[rs.Name]
				}
				ok := 0
				for _, f := range full {
					if f {
						ok++
					}
				}
				if ok == len(names) {
					return nil
				}
				if err := sess.Stream.Ack(resp); err != nil {
					return err
				}
				if resp, err = sess.Stream.Recv(); err != nil {
					return fmt.Errorf("%s: %d of %d assignments complete: %w", n.ID, ok, len(names), err)
				}
			}
		})
		cc.Close()
		if err != nil {
			t.Fatalf("waiting for the layout on %s: %v", n.ID, err)
		}
	}
}

// opened records a stream answered: the admission, and whether it
// resumed naming the versions held.
func (r *xrRun) opened(p *Subscriber, sess *xdssub.Session, held map[string]string) {
	s := r.subs[p.ID]
	s.opens++
	if held != nil {
		s.resumes++
		s.heldAsked += len(held)
		s.resent += len(sess.First.Resources)
	}
	r.connected[s.node].Add(1)
	r.mu.Lock()
	r.admits[s.node] = append(r.admits[s.node], xrAdmit{sent: sess.Sent, answered: sess.Answered})
	r.mu.Unlock()
}

func (r *xrRun) closed(p *Subscriber, _ error) { r.connected[r.subs[p.ID].node].Add(-1) }

// sent records what a response regressed and removed.
func (r *xrRun) sent(p *Subscriber, _ *discoveryv3.DeltaDiscoveryResponse, reg []xdssub.Regression, removed []string, at time.Time) {
	s := r.subs[p.ID]
	s.regressions = append(s.regressions, reg...)
	for _, name := range removed {
		s.empties = append(s.empties, fmt.Sprintf("%s removed at %.1f s (stream opened %d times)", name, at.Sub(r.start).Seconds(), s.opens))
	}
}

// received records an assignment sent with nothing in rotation: the
// churn keeps every watched service with instances.
func (r *xrRun) received(p *Subscriber, wi int, a xrAssignment, at time.Time) {
	if a.inRotation > 0 {
		return
	}
	s := r.subs[p.ID]
	s.empties = append(s.empties, fmt.Sprintf("%s at %.1f s (stream opened %d times): %v", p.Names[wi], at.Sub(r.start).Seconds(), s.opens, a.endpoints))
}

// refused counts an attempt that failed, by what the server said.
func (r *xrRun) refused(err error) {
	kind := "other"
	st := grpcstatus.Convert(err)
	switch {
	case st.Code() == codes.Unavailable && strings.Contains(st.Message(), "admitting reconnecting subscribers gradually"):
		kind = "UNAVAILABLE, admission cap"
	case st.Code() == codes.Unavailable && strings.Contains(st.Message(), "xdsserver:"):
		kind = "UNAVAILABLE, server not ready or stale"
	case st.Code() == codes.Unavailable:
		kind = "UNAVAILABLE, server away (connection)"
	default:
		kind = st.Code().String()
	}
	v, _ := r.refusals.LoadOrStore(kind, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
}

// allConnected reports an error until every subscriber has a stream.
func (r *xrRun) allConnected() error {
	for i := range r.perNode {
		if got := r.connected[i].Load(); got != int64(r.perNode[i]) {
			return fmt.Errorf("n%d has %d of its %d subscribers connected", i+1, got, r.perNode[i])
		}
	}
	return nil
}

// sample records the connected subscribers every 500 ms until ctx is
// done.
func (r *xrRun) sample(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		at := time.Since(r.start).Seconds()
		var all int64
		r.mu.Lock()
		for i := range r.perNode {
			v := r.connected[i].Load()
			all += v
			r.timeline[i] = append(r.timeline[i], Point{T: at, V: float64(v)})
		}
		r.timeline[3] = append(r.timeline[3], Point{T: at, V: float64(all)})
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (r *xrRun) mark(label string) {
	r.mu.Lock()
	r.marks = append(r.marks, Mark{T: time.Since(r.start).Seconds(), Label: label})
	r.mu.Unlock()
}

// waitPersisted waits until node i's kept subscriber count names every
// subscriber pinned to it (written every 10 s), and returns it.
func (r *xrRun) waitPersisted(t *testing.T, i int) int {
	var count int
	integration.Eventually(t, 40*time.Second, func() error {
		b, err := os.ReadFile(filepath.Join(r.nodes[i].DataDir, xrSubsFile))
		if err != nil {
			return err
		}
		var f struct {
			Subscribers int `json:"subscribers"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			return err
		}
		if count = f.Subscribers; count < r.perNode[i] {
			return fmt.Errorf("n%d keeps %d subscribers; %d are attached", i+1, count, r.perNode[i])
		}
		return nil
	})
	return count
}

// restartAll stops the three servers and starts them again at once.
func (r *xrRun) restartAll(ctx context.Context, t *testing.T, res *Result) {
	kept := make([]int, 3)
	for i := range r.nodes {
		kept[i] = r.waitPersisted(t, i)
	}
	before := r.snapshot()
	r.mark("all three restarted")
	stopped := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, n := range r.nodes {
		wg.Go(func() { errs[i] = n.Stop() })
	}
	wg.Wait()
	ready := make([]time.Time, 3)
	for i, n := range r.nodes {
		wg.Go(func() {
			if err := n.Start(); err != nil {
				errs[i] = err
			}
			ready[i] = time.Now()
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	r.waitBack(t, stopped)
	var tierCertain []int
	capSum := 0
	for i := range r.nodes {
		certain := r.judgeNode(ctx, t, res, "at once", i, kept[i], stopped, ready[i], before[i])
		for k, v := range certain {
			for len(tierCertain) <= k {
				tierCertain = append(tierCertain, 0)
			}
			tierCertain[k] += v
		}
		capSum += xrCap(r.perNode[i])
	}
	res.Add("at once: tier, most admitted in a 10 s window (the three servers' windows k)",
		fmt.Sprintf("≤ %d (the three caps)", capSum), fmt.Sprintf("%d (windows: %s)", xrMax(tierCertain), xrInts(tierCertain)),
		xrMax(tierCertain) <= capSum)
	res.Add("at once: every subscriber back after the restart", "—", fmt.Sprintf("%.1f s", r.lastBack(stopped).Sub(stopped).Seconds()), true)
}

// restartOne stops node i and starts it again.
func (r *xrRun) restartOne(ctx context.Context, t *testing.T, res *Result, i int) {
	kept := r.waitPersisted(t, i)
	before := r.snapshot()
	n := r.nodes[i]
	r.mark(n.ID + " restarted")
	stopped := time.Now()
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	ready := time.Now()
	r.waitBack(t, stopped)
	r.judgeNode(ctx, t, res, "rolling", i, kept, stopped, ready, before[i])
}

// snapshot returns how many admissions each node has had so far.
func (r *xrRun) snapshot() [3]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return [3]int{len(r.admits[0]), len(r.admits[1]), len(r.admits[2])}
}

// waitBack waits until every subscriber is connected again; the cap
// takes ⌈n/cap⌉ windows.
func (r *xrRun) waitBack(t *testing.T, since time.Time) {
	most := 0
	for _, n := range r.perNode {
		most = max(most, n/xrCap(n)+1)
	}
	integration.Eventually(t, time.Duration(most+3)*xrWindow+30*time.Second, r.allConnected)
	r.mark("all back")
}

// lastBack returns when the last stream admitted since since answered.
func (r *xrRun) lastBack(since time.Time) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	last := since
	for _, as := range r.admits {
		for _, a := range as {
			if a.answered.After(last) {
				last = a.answered
			}
		}
	}
	return last
}

// judgeNode adds node i's figures for one restart: the count it read,
// its admissions per window against the cap, how long its subscribers
// took to come back, and its refusals; it returns the certain counts
// per window.
func (r *xrRun) judgeNode(ctx context.Context, t *testing.T, res *Result, phase string, i, kept int, stopped, ready time.Time, from int) []int {
	n := r.nodes[i]
	r.mu.Lock()
	as := append([]xrAdmit(nil), r.admits[i][from:]...)
	r.mu.Unlock()
	log, err := os.ReadFile(n.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	at, expected, per, err := xrAdmissionStart(log, stopped)
	if err != nil {
		res.Add(fmt.Sprintf("%s: %s started with a restart cap", phase, n.ID), "logged", err.Error(), false)
		at = stopped
	}
	// The server counts every stream it had: the scenario's subscribers
	// and the region's own (an agent's), so the count it kept is the
	// figure, and the rule is applied to it.
	want := kept
	rule := xrCap(want)
	res.Add(fmt.Sprintf("%s: %s expected count read at start", phase, n.ID), fmt.Sprintf("= %d kept (%d subscribers of the scenario, %d of the region's agents)", kept, r.perNode[i], kept-r.perNode[i]),
		fmt.Sprintf("%d (cap %d per 10 s)", expected, per), expected == want && per == rule)
	certain, possible := xrWindowCounts(as, at)
	which := "5%"
	if int(math.Ceil(xrFraction*float64(want))) < xrFloor {
		which = "the floor of 50"
	}
	res.Add(fmt.Sprintf("%s: %s most admitted in a 10 s window", phase, n.ID),
		fmt.Sprintf("≤ max(5%% of %d, 50) = %d (%s)", want, rule, which),
		fmt.Sprintf("%d (windows: %s)", xrMax(certain), xrInts(certain)), xrMax(certain) <= rule)
	res.Note("%s, %s: %d streams back; per window, possibly (admitted across a boundary) %s; most in any sliding 10 s: %d (fixed windows allow up to twice the cap there)",
		phase, n.ID, len(as), xrInts(possible), xrSlidingMax(as))
	var last time.Time
	for _, a := range as {
		if a.answered.After(last) {
			last = a.answered
		}
	}
	windows := (want + rule - 1) / rule
	back := last.Sub(ready)
	res.Add(fmt.Sprintf("%s: %s all its subscribers back, after ready", phase, n.ID),
		fmt.Sprintf("≤ %d s (⌈%d/%d⌉ windows)", windows*10, want, rule),
		fmt.Sprintf("%.1f s (%.1f s after the stop)", back.Seconds(), last.Sub(stopped).Seconds()), back <= time.Duration(windows)*xrWindow)
	capped, _ := n.Metric(ctx, `cairn_xds_streams_refused_total{reason="admission_cap"}`)
	notReady, _ := n.Metric(ctx, `cairn_xds_streams_refused_total{reason="not_ready"}`)
	stale, _ := n.Metric(ctx, `cairn_xds_streams_refused_total{reason="stale"}`)
	engaged := want <= rule || capped > 0
	res.Add(fmt.Sprintf("%s: %s refused with UNAVAILABLE (admission cap; not ready, stale)", phase, n.ID),
		"> 0 when more than a window's worth return", fmt.Sprintf("%.0f (%.0f, %.0f)", capped, notReady, stale), engaged)
	return certain
}

// report adds the per-subscriber figures, the refusals the clients saw,
// the churn and the timeline.
func (r *xrRun) report(res *Result, ch ChurnStats, counts SubscriberCounts) {
	var regressed, regressions, empty, emptySubs, opens, resumes, heldAsked, resent int
	var firstReg, firstEmpty string
	for _, s := range r.subs {
		opens += s.opens
		resumes, heldAsked, resent = resumes+s.resumes, heldAsked+s.heldAsked, resent+s.resent
		if len(s.regressions) > 0 {
			regressed++
			regressions += len(s.regressions)
			if firstReg == "" {
				g := s.regressions[0]
				firstReg = fmt.Sprintf("subscriber %d (n%d): %s held %s, sent %s", s.id, s.node+1, g.Name, g.Held, g.Got)
			}
		}
		if len(s.empties) > 0 {
			emptySubs++
			empty += len(s.empties)
			if firstEmpty == "" {
				firstEmpty = fmt.Sprintf("subscriber %d (n%d): %s", s.id, s.node+1, s.empties[0])
			}
		}
	}
	val := fmt.Sprintf("%d (%d subscribers)", regressions, regressed)
	if firstReg != "" {
		val += "; first: " + firstReg
	}
	res.Add("resources sent older than held (store revision), all subscribers", "0", val, regressions == 0)
	val = fmt.Sprintf("%d (%d subscribers; %d assignments undecodable)", empty, emptySubs, counts.Undecodable)
	if firstEmpty != "" {
		val += "; first: " + firstEmpty
	}
	res.Add("assignments sent empty or removed while the service had instances (X6)", "0", val, empty == 0 && counts.Undecodable == 0)
	if empty > 0 {
		seen := map[string]bool{}
		for _, s := range r.subs {
			for _, e := range s.empties {
				key, _, _ := strings.Cut(e, " at ")
				if !seen[key] && len(seen) < 8 {
					seen[key] = true
					res.Note("empty: subscriber %d (n%d): %s", s.id, s.node+1, e)
				}
			}
		}
		r.mu.Lock()
		res.Note("marks: %v", r.marks)
		r.mu.Unlock()
	}
	var kinds []string
	r.refusals.Range(func(k, v any) bool {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v.(*atomic.Int64).Load()))
		return true
	})
	res.Note("streams opened %d times by %d subscribers; attempts refused, as clients saw them: %s", opens, len(r.subs), strings.Join(kinds, "; "))
	res.Note("%d streams resumed naming %d versions held; their first answers carried %d resources (what changed while away)", resumes, heldAsked, resent)
	issued, withdrawals := 0, 0
	for _, p := range ch.Phases {
		issued, withdrawals = issued+p.Issued, withdrawals+p.Withdrawal
	}
	res.Note("churn: %d changes issued (%d withdrawals, %d registrations again), %d calls failed (the servers away; first: %q)",
		issued, withdrawals, issued-withdrawals, ch.Failed, ch.FirstError)
	r.mu.Lock()
	defer r.mu.Unlock()
	tl := Timeline{Title: "Subscribers connected, by server", YLabel: "streams open", Marks: r.marks}
	for i, name := range []string{"n1", "n2", "n3", "all"} {
		tl.Series = append(tl.Series, Series{Name: name, Points: r.timeline[i]})
	}
	res.Timelines = append(res.Timelines, tl)
}

// xrMax is the largest of v; 0 when empty.
func xrMax(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
