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
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/bench/xdssub"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// Experiment 5's layout.
const (
	xrNS        = "xr"
	xrServices  = 40
	xrInstances = 3 // per service; the churn takes one out at a time
	xrWatch     = 4 // services per subscriber
	// xrSubsFile is the file a server keeps its subscriber count in
	// (cmd.XDSSubscribersFile; not imported, so that the scenario links
	// no server code).
	xrSubsFile = "xds-subscribers.json"
)

func xrService(s int) string { return fmt.Sprintf("svc-%02d", s) }
func xrName(s int) string    { return xrService(s) + "." + xrNS + ":http" }

// TestXDSTierRestart is experiment 5: the xDS tier restarted with its
// subscribers attached. A 3-node cluster serves 40 services of 3
// instances each, registered through the Go client; delta subscribers
// (2,000 at full size, 200 short), a third pinned to each node, watch 4
// services each, while a churn deregisters and registers instances
// again. The three servers are restarted at once (the SPEC figure: the
// tier, every server capping its own subscribers' return), and at full
// size then one at a time (a rolling restart). Each subscriber comes
// back naming the versions it holds. Measured per node: the streams
// admitted per 10 s window of the server's cap against SPEC §4's rule
// (5% of the count before the restart, at least 50), the time until
// every subscriber is back, the refusals; per subscriber: any resource
// sent older (by store revision) than the one it held, and any
// assignment sent empty or removed while its service had instances
// (field notes X6).
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
	c := integration.StartClusterWith(t, integration.Config{Nodes: 3, Args: []string{"--allow-loopback-endpoints"}})
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	start := time.Now()
	inc := xrLayout(ctx, t, c)

	r := &xrRun{c: c, start: start, dec: xdstest.NewDecoder(func(rs *discoveryv3.Resource) (xrAssignment, error) {
		cla, err := xdstest.DecodeAssignment(rs)
		if err != nil {
			return xrAssignment{}, err
		}
		a := xrAssignment{inRotation: len(xdstest.InRotation(cla))}
		for _, l := range cla.Endpoints {
			for _, e := range l.LbEndpoints {
				a.endpoints = append(a.endpoints, fmt.Sprintf("%s:%d %s", e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress(),
					e.GetEndpoint().GetAddress().GetSocketAddress().GetPortValue(), e.HealthStatus))
			}
		}
		return a, nil
	})}
	r.waitLayout(ctx, t)
	sctx, stopSubs := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stopSubs(); wg.Wait(); r.closeConns() }()
	r.startSubscribers(sctx, t, subs, &wg)
	integration.Eventually(t, 2*time.Minute, r.allConnected)
	res.Note("%d subscribers attached in %.1f s (%d, %d, %d on n1, n2, n3), each watching %d of %d services",
		subs, time.Since(start).Seconds(), r.perNode[0], r.perNode[1], r.perNode[2], xrWatch, xrServices)

	cctx, stopChurn := context.WithCancel(ctx)
	churned := make(chan xrChurnCount, 1)
	go func() { churned <- xrChurn(cctx, c, inc) }()
	wg.Go(func() { r.sample(sctx) })

	for _, ph := range phases {
		switch ph {
		case "all":
			r.restartAll(ctx, t, res)
		case "rolling":
			for i := range c.Nodes {
				r.restartOne(ctx, t, res, i)
			}
		}
	}
	stopChurn()
	ch := <-churned
	stopSubs()
	wg.Wait()
	r.report(res, ch)
	res.Report(t)
}

// xrRun is the scenario's state: the subscribers and what they saw.
type xrRun struct {
	c       *integration.Cluster
	start   time.Time
	dec     *xdstest.Decoder[xrAssignment]
	conns   [][]*grpc.ClientConn // by node
	perNode [3]int
	subs    []*xrSub

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
	sub         *xdssub.Subscriber
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

// xrLayout applies the services and registers their instances; it
// returns their incarnations by (service, instance).
func xrLayout(ctx context.Context, t *testing.T, c *integration.Cluster) map[[2]int]uint64 {
	var b strings.Builder
	for s := range xrServices {
		// No check: registered instances are in rotation. No slow start
		// or flap limit: each change is one assignment update. No
		// disruption budget: the churn withdraws at will (one at a time).
		fmt.Fprintf(&b, "---\nnamespace: %s\nname: %s\nports: [{name: http, number: 8080, protocol: tcp}]\npolicy:\n  lease_ttl: 1h\n  slow_start: 0s\n  flap_limit: 0\n  max_unavailable: 100%%\n", xrNS, xrService(s))
	}
	if err := xrOnAny(ctx, c, func(n *integration.Node) error {
		_, err := n.Client().Apply(ctx, []byte(b.String()))
		return err
	}); err != nil {
		t.Fatalf("applying the services: %v", err)
	}
	inc := map[[2]int]uint64{}
	for s := range xrServices {
		for i := range xrInstances {
			if err := xrOnAny(ctx, c, func(n *integration.Node) error {
				reg, err := n.Client().Register(ctx, xrNS, xrService(s), xrRegistration(s, i, 0, 0))
				inc[[2]int{s, i}] = reg.Incarnation
				return err
			}); err != nil {
				t.Fatalf("registering %s/%d: %v", xrService(s), i, err)
			}
		}
	}
	return inc
}

// xrRegistration is instance i of service s, its gen-th registration
// (a new registration id each), replacing incarnation replaces.
func xrRegistration(s, i, gen int, replaces uint64) wire.Registration {
	return wire.Registration{ID: fmt.Sprintf("i-%d", i), Addresses: []string{fmt.Sprintf("127.10.%d.%d", s, i+1)},
		Ports: map[string]int{"http": 9000 + gen%1000}, Region: "eu", Zone: "eu-1a",
		RegistrationID: fmt.Sprintf("g%d", gen), Replaces: replaces}
}

// xrOnAny runs f against each live node in turn until one succeeds.
func xrOnAny(ctx context.Context, c *integration.Cluster, f func(n *integration.Node) error) error {
	var last error
	for _, n := range c.Live() {
		err := f(n)
		if err == nil {
			return nil
		}
		last = err
	}
	if last == nil {
		last = fmt.Errorf("no live node")
	}
	return last
}

// waitLayout waits until every node serves every assignment with every
// instance in rotation, so that no subscriber starts from a partial one.
func (r *xrRun) waitLayout(ctx context.Context, t *testing.T) {
	var names []string
	for s := range xrServices {
		names = append(names, xrName(s))
	}
	for _, n := range r.c.Nodes {
		cc, err := xdstest.Dial(n.GRPCAddr)
		if err != nil {
			t.Fatal(err)
		}
		full := map[string]bool{}
		err = integration.Poll(time.Minute, 200*time.Millisecond, func() error {
			sess, err := xdssub.Open(ctx, cc, xdssub.Request{Node: &corev3.Node{Id: "xr-probe"}, Type: resourcev3.EndpointType, Names: names},
				xdssub.Retry{Deadline: time.Now().Add(5 * time.Second)}, rand.New(rand.NewPCG(1, 1)), nil)
			if err != nil {
				return err
			}
			defer sess.Close()
			resp := sess.First
			for {
				for _, rs := range resp.Resources {
					a, err := r.dec.Decode(rs)
					if err != nil {
						return err
					}
					full[rs.Name] = a.inRotation == xrInstances
				}
				ok := 0
				for _, f := range full {
					if f {
						ok++
					}
				}
				if ok == xrServices {
					return nil
				}
				if err := sess.Stream.Ack(resp); err != nil {
					return err
				}
				if resp, err = sess.Stream.Recv(); err != nil {
					return fmt.Errorf("%s: %d of %d assignments complete: %w", n.ID, ok, xrServices, err)
				}
			}
		})
		cc.Close()
		if err != nil {
			t.Fatalf("waiting for the layout on %s: %v", n.ID, err)
		}
	}
}

// startSubscribers starts n subscribers, subscriber i pinned to node
// i mod 3, over connections of at most 200 streams each.
func (r *xrRun) startSubscribers(ctx context.Context, t *testing.T, n int, wg *sync.WaitGroup) {
	for i := range n {
		r.perNode[i%3]++
	}
	for ni, node := range r.c.Nodes {
		var ccs []*grpc.ClientConn
		for range (r.perNode[ni] + 199) / 200 {
			cc, err := xdstest.Dial(node.GRPCAddr)
			if err != nil {
				t.Fatal(err)
			}
			ccs = append(ccs, cc)
		}
		r.conns = append(r.conns, ccs)
	}
	rng := rand.New(rand.NewPCG(5, 32))
	for i := range n {
		s := &xrSub{id: i, node: i % 3}
		var names []string
		for _, svc := range rng.Perm(xrServices)[:xrWatch] {
			names = append(names, xrName(svc))
		}
		s.sub = &xdssub.Subscriber{
			Request: xdssub.Request{Node: &corev3.Node{Id: fmt.Sprintf("xr-%d", i), Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"}},
				Type: resourcev3.EndpointType, Names: names},
			Retry: xdssub.Retry{Min: 250 * time.Millisecond, Max: 5 * time.Second},
			Rand:  rand.New(rand.NewPCG(uint64(i), 7)),
		}
		s.sub.Refused = r.refused
		s.sub.Opened = func(sess *xdssub.Session, held map[string]string) {
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
		s.sub.Closed = func(error) { r.connected[s.node].Add(-1) }
		s.sub.Received = func(resp *discoveryv3.DeltaDiscoveryResponse, reg []xdssub.Regression, removed []string) {
			s.regressions = append(s.regressions, reg...)
			at := time.Since(r.start).Seconds()
			for _, name := range removed {
				s.empties = append(s.empties, fmt.Sprintf("%s removed at %.1f s (stream opened %d times)", name, at, s.opens))
			}
			for _, rs := range resp.Resources {
				if a, err := r.dec.Decode(rs); err != nil || a.inRotation == 0 {
					s.empties = append(s.empties, fmt.Sprintf("%s %s at %.1f s (stream opened %d times): %v %v", rs.Name, rs.Version, at, s.opens, a.endpoints, err))
				}
			}
		}
		r.subs = append(r.subs, s)
		ccs := r.conns[s.node]
		cc := ccs[(i/3)%len(ccs)]
		wg.Go(func() { s.sub.Run(ctx, cc) })
	}
}

func (r *xrRun) closeConns() {
	for _, ccs := range r.conns {
		for _, cc := range ccs {
			cc.Close()
		}
	}
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
		b, err := os.ReadFile(filepath.Join(r.c.Nodes[i].DataDir, xrSubsFile))
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
	for i := range r.c.Nodes {
		kept[i] = r.waitPersisted(t, i)
	}
	before := r.snapshot()
	r.mark("all three restarted")
	stopped := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, n := range r.c.Nodes {
		wg.Go(func() { errs[i] = n.Stop() })
	}
	wg.Wait()
	ready := make([]time.Time, 3)
	for i, n := range r.c.Nodes {
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
	for i := range r.c.Nodes {
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
	n := r.c.Nodes[i]
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
	n := r.c.Nodes[i]
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
	want := r.perNode[i]
	rule := xrCap(want)
	res.Add(fmt.Sprintf("%s: %s expected count read at start", phase, n.ID), fmt.Sprintf("= %d attached (kept %d)", want, kept),
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
func (r *xrRun) report(res *Result, ch xrChurnCount) {
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
	val = fmt.Sprintf("%d (%d subscribers)", empty, emptySubs)
	if firstEmpty != "" {
		val += "; first: " + firstEmpty
	}
	res.Add("assignments sent empty or removed while the service had instances (X6)", "0", val, empty == 0)
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
	res.Note("churn: %d deregistrations and %d registrations committed, %d calls failed (the servers away)", ch.out, ch.in, ch.failed)
	r.mu.Lock()
	defer r.mu.Unlock()
	tl := Timeline{Title: "Subscribers connected, by server", YLabel: "streams open", Marks: r.marks}
	for i, name := range []string{"n1", "n2", "n3", "all"} {
		tl.Series = append(tl.Series, Series{Name: name, Points: r.timeline[i]})
	}
	res.Timelines = append(res.Timelines, tl)
}

// xrChurnCount is what the churn did.
type xrChurnCount struct{ out, in, failed int }

// xrChurn takes one instance out (deregistered) and puts it back (a new
// registration), in turn, 5 changes a second, until ctx is done: every
// service keeps at least two instances in rotation, failed calls
// included (an instance whose deregistration failed is registered back
// all the same).
func xrChurn(ctx context.Context, c *integration.Cluster, inc map[[2]int]uint64) xrChurnCount {
	var n xrChurnCount
	rng := rand.New(rand.NewPCG(3, 2))
	gen := 0
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var out *[2]int
	for {
		select {
		case <-ctx.Done():
			return n
		case <-tick.C:
		}
		if out == nil {
			k := [2]int{rng.IntN(xrServices), rng.IntN(xrInstances)}
			err := xrOnAny(ctx, c, func(nd *integration.Node) error {
				cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				_, err := nd.Client().Deregister(cctx, wire.InstanceKey{Namespace: xrNS, Service: xrService(k[0]), ID: fmt.Sprintf("i-%d", k[1])}, inc[k])
				return err
			})
			if err != nil {
				// It may have committed all the same (an answer lost
				// with a server going away): the registration below
				// puts the instance back either way, replacing what
				// it has.
				n.failed++
			} else {
				n.out++
			}
			out = &k
			continue
		}
		k := *out
		err := xrOnAny(ctx, c, func(nd *integration.Node) error {
			cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
			defer cancel()
			// The same registration id until it is answered: a retry of
			// one that committed unanswered returns the committed
			// record.
			reg, err := nd.Client().Register(cctx, xrNS, xrService(k[0]), xrRegistration(k[0], k[1], gen+1, inc[k]))
			if err == nil {
				inc[k] = reg.Incarnation
			}
			return err
		})
		if err != nil {
			n.failed++
			continue
		}
		n.in++
		gen++
		out = nil
	}
}

// xrMax is the largest of v; 0 when empty.
func xrMax(v []int) int {
	m := 0
	for _, x := range v {
		m = max(m, x)
	}
	return m
}
