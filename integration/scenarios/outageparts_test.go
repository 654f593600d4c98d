package scenarios

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/callers"
	"github.com/cairn-sd/cairn/wire"
)

// The parts of TestControlPlaneOff (outage_test.go): the watch of the
// views, the survivor's answers, the agent restarted, the recovery, and
// the figures of each.

// offPhases are the instants of the scenario.
type offPhases struct {
	start, steady, store, off, agent, back, recovered, end time.Time
}

func (p offPhases) at(t time.Time) float64 { return t.Sub(p.start).Seconds() }

// meanRate is the mean of the per-second error rates of ps (seconds
// since start) whose whole second lies in [from, to), and the number of
// seconds with requests.
func meanRate(ps []callers.Point, start, from, to time.Time) (float64, int) {
	sum, n := 0.0, 0
	for _, p := range ps {
		at := start.Add(time.Duration(p.T * float64(time.Second)))
		if at.Before(from) || at.Add(time.Second).After(to) || math.IsNaN(p.V) {
			continue
		}
		sum, n = sum+p.V, n+1
	}
	if n == 0 {
		return math.NaN(), 0
	}
	return sum / float64(n), n
}

// offErrorFigures adds, per population, the error rate in the outage and
// after the recovery beside the steady one, and the timeline.
func offErrorFigures(res *Result, recs []callers.Record, ph offPhases) {
	rates := callers.ErrorRates(recs, ph.start, ph.end, time.Second)
	tl := Timeline{Title: "Caller error rate per second, control plane off", YLabel: "error rate", Marks: []Mark{
		{T: ph.at(ph.store), Label: "store down (2 of 3 servers killed)"},
		{T: ph.at(ph.off), Label: "every server off"},
		{T: ph.at(ph.agent), Label: "agent restarted"},
		{T: ph.at(ph.back), Label: "servers started again"},
		{T: ph.at(ph.recovered), Label: "recovered"},
	}}
	pct := func(v float64) string { return fmt.Sprintf("%.2f%%", 100*v) }
	for _, k := range offKinds {
		ps := rates[k]
		s := Series{Name: string(k)}
		for _, p := range ps {
			s.Points = append(s.Points, Point{T: p.T, V: p.V})
		}
		tl.Series = append(tl.Series, s)
		base, nb := meanRate(ps, ph.start, ph.steady, ph.store)
		budget := fmt.Sprintf("≤ steady %s + 0.5 pp (steady: mean of %d s)", pct(base), nb)
		judge := func(what string, from, to time.Time) {
			m, n := meanRate(ps, ph.start, from, to)
			res.Add(fmt.Sprintf("%s: error rate, %s (mean of %d s)", k, what, n), budget, pct(m), n > 0 && nb > 0 && m <= base+offSlack)
		}
		if k == callers.DNSDirect {
			judge("the store down, the survivor answering", ph.store, ph.off)
			m, n := meanRate(ps, ph.start, ph.off, ph.back)
			res.Add(fmt.Sprintf("%s: error rate, every server off (mean of %d s)", k, n), "not judged: no authoritative server runs to answer it", pct(m), true)
		} else {
			judge("the whole outage", ph.store, ph.back)
		}
		judge("after the recovery", ph.recovered, ph.end)
	}
	res.Timelines = append(res.Timelines, tl)
}

// offWatch samples, every 500 ms from the population's start, the
// assignment version each Envoy holds and the views each agent holds,
// and notes every sample where one went backwards.
type offWatch struct {
	r       *Region
	pop     *Population
	cluster string
	counts  map[string]int // view name → instances
	cancel  context.CancelFunc
	done    chan struct{}

	mu           sync.Mutex
	envoyLast    map[string]string // zone → version held
	envoyRev     map[string]uint64
	envoyVers    map[string]int // zone → versions held in turn
	envoySamples int
	agentRev     map[string]map[string]uint64 // agent → view → revision
	agentSamples int
	based        time.Time // the baseline: the outage follows
	problems     []string
}

func startOffWatch(t *testing.T, r *Region, pop *Population, cluster string) *offWatch {
	ctx, cancel := context.WithCancel(context.Background())
	w := &offWatch{r: r, pop: pop, cluster: cluster, counts: map[string]int{}, cancel: cancel, done: make(chan struct{}),
		envoyLast: map[string]string{}, envoyRev: map[string]uint64{}, envoyVers: map[string]int{}, agentRev: map[string]map[string]uint64{}}
	for _, s := range r.Services {
		w.counts[s.Name+"."+Namespace] = s.Count
	}
	go func() {
		defer close(w.done)
		tk := time.NewTicker(500 * time.Millisecond)
		defer tk.Stop()
		for {
			w.sample(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tk.C:
			}
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *offWatch) stop() {
	w.cancel()
	<-w.done
}

// baseline marks the end of the steady traffic.
func (w *offWatch) baseline() {
	w.mu.Lock()
	w.based = time.Now()
	w.mu.Unlock()
}

// revisionOf is the store revision of a version cairn sends: a state of
// the world's "<revision>-<digest>", a delta response's revision alone.
func revisionOf(v string) (uint64, error) {
	head, _, _ := strings.Cut(v, "-")
	return strconv.ParseUint(head, 10, 64)
}

func (w *offWatch) problem(format string, args ...any) {
	w.problems = append(w.problems, time.Now().UTC().Format("15:04:05.000 ")+fmt.Sprintf(format, args...))
}

func (w *offWatch) sample(ctx context.Context) {
	for z, e := range w.pop.Envoys {
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := e.AssignmentVersion(sctx, w.cluster)
		cancel()
		if err != nil {
			continue // its admin interface is busy: no sample
		}
		w.mu.Lock()
		w.envoySamples++
		switch last := w.envoyLast[z]; {
		case v == last:
		case v == "":
			w.problem("envoy-%s lost its assignment version (held %q)", z, last)
		default:
			rev, err := revisionOf(v)
			if err != nil {
				w.problem("envoy-%s holds version %q: no store revision in it", z, v)
			} else if rev < w.envoyRev[z] {
				w.problem("envoy-%s holds version %q, older than the %q it held", z, v, last)
			}
			w.envoyRev[z] = max(w.envoyRev[z], rev)
			w.envoyVers[z]++
		}
		w.envoyLast[z] = v
		w.mu.Unlock()
	}
	for i, a := range w.r.Agents {
		name := "agent-" + Zones()[i]
		st, err := a.Status(ctx)
		if err != nil {
			continue // restarting: no sample
		}
		w.mu.Lock()
		w.agentSamples++
		revs := w.agentRev[name]
		if revs == nil {
			revs = map[string]uint64{}
			w.agentRev[name] = revs
		}
		for vn, count := range w.counts {
			v, ok := st.View(vn)
			switch {
			case !ok && revs[vn] > 0:
				w.problem("%s lost its view of %s (held revision %d)", name, vn, revs[vn])
			case !ok:
			case v.Revision < revs[vn]:
				w.problem("%s holds %s at revision %d, older than the %d it held", name, vn, v.Revision, revs[vn])
			case v.Instances < count:
				w.problem("%s holds %s with %d instances of %d", name, vn, v.Instances, count)
			}
			if ok {
				revs[vn] = max(revs[vn], v.Revision)
			}
		}
		w.mu.Unlock()
	}
}

// figures adds the views' rows: the Envoys' versions and hosts, the
// agents' views, and what the grpc-go callers reached.
func (w *offWatch) figures(res *Result, recs []callers.Record, ph offPhases, grpcSvc ServiceSpec) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var envoyProblems, agentProblems []string
	for _, p := range w.problems {
		if strings.Contains(p, " envoy-") {
			envoyProblems = append(envoyProblems, p)
		} else {
			agentProblems = append(agentProblems, p)
		}
	}
	show := func(ps []string) string {
		if len(ps) == 0 {
			return "none"
		}
		return fmt.Sprintf("%d: %s", len(ps), strings.Join(ps[:min(3, len(ps))], "; "))
	}
	res.Add(fmt.Sprintf("Envoys' assignment versions (%d samples, every 500 ms)", w.envoySamples), "never older, never lost (store revision monotonic)",
		show(envoyProblems), len(envoyProblems) == 0 && w.envoySamples > 0)
	res.Add(fmt.Sprintf("agents' views (%d samples, every 500 ms)", w.agentSamples), "revision never older, no view or instance lost",
		show(agentProblems), len(agentProblems) == 0 && w.agentSamples > 0)

	// The hosts each Envoy caller's Envoy routed to, from the outage on,
	// against what it routed to before.
	fewest, before := math.MaxInt, 0
	for _, rec := range recs {
		if rec.Kind != callers.Envoy {
			continue
		}
		held := 0
		for _, v := range rec.Views {
			if v.At.Before(ph.store) {
				held = len(v.Addrs)
				continue
			}
			fewest = min(fewest, len(v.Addrs))
		}
		before = max(before, held)
		fewest = min(fewest, held)
	}
	res.Add("envoy: hosts each Envoy routes to, from the outage to the end", fmt.Sprintf("never fewer than before (%d)", before),
		fmt.Sprintf("fewest %d", fewest), before > 0 && fewest >= before)

	// grpc-go shows no version (its CSDS does not see a channel made
	// with a bootstrap of its own): what it was given shows in where it
	// sent. Each caller reached in the outage and after every instance
	// it reached in the steady traffic.
	short := 0
	var lost []string
	for _, rec := range recs {
		if rec.Kind != callers.GRPCXDS {
			continue
		}
		reached := func(from, to time.Time) map[string]bool {
			m := map[string]bool{}
			for _, q := range rec.Requests {
				if q.Result == callers.Success && !q.At.Before(from) && q.At.Before(to) {
					m[q.Instance] = true
				}
			}
			return m
		}
		steady, during, after := reached(ph.steady, ph.store), reached(ph.store, ph.back), reached(ph.recovered, ph.end)
		for id := range steady {
			if !during[id] || !after[id] {
				short++
				lost = append(lost, fmt.Sprintf("%s: %s (outage %v, after %v)", rec.Caller, id, during[id], after[id]))
			}
		}
	}
	slices.Sort(lost)
	res.Add(fmt.Sprintf("grpc-xds: instances of %s each caller reached in the outage and after", grpcSvc.Name), "every one it reached before",
		show(lost), short == 0)
}

// askAddrs asks addr for name's A records over UDP (TCP when truncated) and
// returns the addresses, the Extended DNS Error codes and the rcode.
func askAddrs(ctx context.Context, addr, name string, timeout time.Duration) (addrs []string, edes []uint16, rcode int, err error) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	c := &dns.Client{Net: "udp", Timeout: timeout}
	in, _, err := c.ExchangeContext(ctx, m, addr)
	if err == nil && in.Truncated {
		in, _, err = (&dns.Client{Net: "tcp", Timeout: timeout}).ExchangeContext(ctx, m, addr)
	}
	if err != nil {
		return nil, nil, 0, err
	}
	for _, rr := range in.Answer {
		if a, ok := rr.(*dns.A); ok {
			addrs = append(addrs, a.A.String())
		}
	}
	if opt := in.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_EDE); ok {
				edes = append(edes, e.InfoCode)
			}
		}
	}
	return addrs, edes, in.Rcode, nil
}

// addrSet is the addresses of insts.
func addrSet(insts []Instance) map[string]bool {
	m := map[string]bool{}
	for _, in := range insts {
		m[in.Addr] = true
	}
	return m
}

// foreign returns the addresses of addrs not in want.
func foreign(addrs []string, want map[string]bool) []string {
	var out []string
	for _, a := range addrs {
		if !want[a] {
			out = append(out, a)
		}
	}
	return out
}

// survivorProbe asks the survivor's DNS, the store down, and watches its
// zone's Envoy lose its stream.
type survivorProbe struct {
	node  *integration.Node
	name  string
	want  map[string]bool
	envoy *integration.Envoy
	from  time.Time

	asked, good, judged, stale int
	bad                        []string
	envoyOff                   time.Duration // 0: not seen
}

func (p *survivorProbe) sample(ctx context.Context) {
	addrs, edes, rcode, err := askAddrs(ctx, p.node.DNSAddr, p.name, time.Second)
	since := time.Since(p.from)
	p.asked++
	late := since > staleAfter+2*time.Second
	if late {
		p.judged++
	}
	switch {
	case err != nil:
		p.bad = append(p.bad, fmt.Sprintf("at %s: %v", since.Round(time.Millisecond), err))
	case rcode != dns.RcodeSuccess || len(addrs) == 0 || len(foreign(addrs, p.want)) > 0:
		p.bad = append(p.bad, fmt.Sprintf("at %s: %s %v", since.Round(time.Millisecond), dns.RcodeToString[rcode], addrs))
	default:
		p.good++
		if late && slices.Contains(edes, dns.ExtendedErrorCodeStaleAnswer) {
			p.stale++
		}
	}
	if p.envoyOff == 0 && p.envoy != nil {
		v, ok, err := p.envoy.Stat(ctx, "control_plane.connected_state")
		if err == nil && ok && v == 0 {
			p.envoyOff = since
		}
	}
}

func (p *survivorProbe) figures(res *Result) {
	res.Add(fmt.Sprintf("survivor %s's DNS, the store down: answers (asked every 500 ms)", p.node.ID), "every one NOERROR with addresses of the service",
		fmt.Sprintf("%d of %d%s", p.good, p.asked, firstOf(p.bad)), p.asked > 0 && p.good == p.asked)
	res.Add("… of them marked stale (EDE 3), from --stale-after + 2 s", "every one",
		fmt.Sprintf("%d of %d", p.stale, p.judged), p.judged > 0 && p.stale == p.judged)
	bound := staleAfter + 10*time.Second
	val := "still connected"
	if p.envoyOff > 0 {
		val = p.envoyOff.Round(100 * time.Millisecond).String()
	}
	res.Add("survivor ends its xDS streams (SPEC §4): its zone's Envoy disconnected, from the kill", "≤ "+bound.String()+" (--stale-after + 10 s)",
		val, p.envoyOff > 0 && p.envoyOff <= bound)
}

func firstOf(bad []string) string {
	if len(bad) == 0 {
		return ""
	}
	return "; first miss " + bad[0]
}

// aloneAnswer is the DNS answer of the first server started again,
// alone: without quorum.
type aloneAnswer struct {
	id    string
	want  map[string]bool
	addrs []string
	edes  []uint16
	rcode int
	err   error
}

func (a aloneAnswer) figure(res *Result) {
	odd := foreign(a.addrs, a.want)
	val := fmt.Sprintf("%s, %d addresses (%d foreign), EDE %v", dns.RcodeToString[a.rcode], len(a.addrs), len(odd), a.edes)
	if a.err != nil {
		val = a.err.Error()
	}
	res.Add(fmt.Sprintf("%s started again alone, no quorum: its DNS answer (SPEC §7)", a.id), "from its kept table: NOERROR, addresses of the service, stale (EDE 3)",
		val, a.err == nil && a.rcode == dns.RcodeSuccess && len(a.addrs) > 0 && len(odd) == 0 && slices.Contains(a.edes, dns.ExtendedErrorCodeStaleAnswer))
}

// agentRestart is an agent killed and started again with every server
// off.
type agentRestart struct {
	name     string
	at       time.Time
	first    time.Duration // start → first DNS answer; 0: none
	addrs    []string
	edes     []uint16
	rcode    int
	want     map[string]bool
	restored bool
	views    []string // what differs from before the kill
	err      error
}

// restartAgent kills a and starts it again, asking its DNS for name
// every 2 ms from the start until it answers, and compares the views it
// then holds with those before the kill.
func restartAgent(ctx context.Context, t *testing.T, a *integration.Agent, name string, want map[string]bool) *agentRestart {
	t.Helper()
	ar := &agentRestart{name: "agent-" + Zones()[0], want: want}
	before, err := a.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Kill(); err != nil {
		t.Fatal(err)
	}
	answered := make(chan struct{})
	ar.at = time.Now()
	go func() {
		defer close(answered)
		deadline := ar.at.Add(30 * time.Second)
		tk := time.NewTicker(2 * time.Millisecond) // a client asking again
		defer tk.Stop()
		for time.Now().Before(deadline) && ctx.Err() == nil {
			addrs, edes, rcode, err := askAddrs(ctx, a.DNSAddr, name, 50*time.Millisecond)
			if err == nil {
				ar.first, ar.addrs, ar.edes, ar.rcode = time.Since(ar.at), addrs, edes, rcode
				return
			}
			<-tk.C
		}
	}()
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	<-answered
	after, err := a.Status(ctx)
	if err != nil {
		ar.err = err
		return ar
	}
	ar.restored = after.Restored
	for _, v := range before.Views {
		got, ok := after.View(v.Name)
		if !ok || got.Revision != v.Revision || got.Instances != v.Instances {
			ar.views = append(ar.views, fmt.Sprintf("%s: revision %d, %d instances before; after %+v (held: %v)", v.Name, v.Revision, v.Instances, got, ok))
		}
	}
	t.Logf("%s restarted: first answer after %s: %s %v EDE %v; restored %v", ar.name, ar.first, dns.RcodeToString[ar.rcode], ar.addrs, ar.edes, ar.restored)
	return ar
}

func (ar *agentRestart) figures(res *Result) {
	val := "no answer in 30 s"
	if ar.first > 0 {
		val = ar.first.Round(time.Millisecond).String()
	}
	res.Add(fmt.Sprintf("%s killed and started again, every server off: start → first DNS answer", ar.name), "≤ "+agentAtOnce.String()+" (from disk, at once)",
		val, ar.first > 0 && ar.first <= agentAtOnce)
	odd := foreign(ar.addrs, ar.want)
	res.Add("… that first answer", "NOERROR, addresses of the service only",
		fmt.Sprintf("%s, %d addresses (%d foreign), EDE %v", dns.RcodeToString[ar.rcode], len(ar.addrs), len(odd), ar.edes),
		ar.first > 0 && ar.rcode == dns.RcodeSuccess && len(ar.addrs) > 0 && len(odd) == 0)
	val = fmt.Sprintf("restored %v; %d views differ", ar.restored, len(ar.views))
	if ar.err != nil {
		val = ar.err.Error()
	} else if len(ar.views) > 0 {
		val += ": " + ar.views[0]
	}
	res.Add("… its views after the start", "restored from disk: every view at the revision and with the instances held before the kill",
		val, ar.err == nil && ar.restored && len(ar.views) == 0)
}

// recovery is how the region came back.
type recovery struct {
	served, agents, envoys, renewed time.Duration
	errs                            []string
	failsAt                         int
	rounds                          int
}

// recoverBound bounds each part of the recovery, from the restart.
const recoverBound = 2 * time.Minute

// recoverRegion waits, from the servers' restart at back, until every
// server serves every instance eligible, every agent is connected with
// every view fresh and whole, every Envoy is connected, and two rounds
// of `cairn renew` ran.
func recoverRegion(ctx context.Context, t *testing.T, r *Region, pop *Population, back time.Time) *recovery {
	t.Helper()
	rc := &recovery{}
	if err := r.WaitServed(ctx, recoverBound); err != nil {
		rc.errs = append(rc.errs, err.Error())
	} else {
		rc.served = time.Since(back)
	}
	err := integration.Poll(recoverBound, 250*time.Millisecond, func() error {
		for i, a := range r.Agents {
			st, err := a.Status(ctx)
			if err != nil {
				return err
			}
			if !st.Connected {
				return fmt.Errorf("agent-%s not connected", Zones()[i])
			}
			for _, s := range r.Services {
				v, ok := st.View(s.Name + "." + Namespace)
				if !ok || v.Stale || v.Instances != s.Count || v.Eligible != s.Count {
					return fmt.Errorf("agent-%s holds %s as %+v; want fresh, %d instances, all eligible", Zones()[i], s.Key(), v, s.Count)
				}
			}
		}
		return nil
	})
	if err != nil {
		rc.errs = append(rc.errs, err.Error())
	} else {
		rc.agents = time.Since(back)
	}
	err = integration.Poll(recoverBound, 250*time.Millisecond, func() error {
		for z, e := range pop.Envoys {
			v, ok, err := e.Stat(ctx, "control_plane.connected_state")
			if err != nil || !ok || v != 1 {
				return fmt.Errorf("envoy-%s: connected_state %d (%v, %v)", z, v, ok, err)
			}
		}
		return nil
	})
	if err != nil {
		rc.errs = append(rc.errs, err.Error())
	} else {
		rc.envoys = time.Since(back)
	}
	rounds := r.RenewRounds()
	err = integration.Poll(3*r.LeaseTTL+time.Minute, 250*time.Millisecond, func() error {
		if got := r.RenewRounds(); got < rounds+2 {
			return fmt.Errorf("%d rounds of cairn renew since the servers were back; want 2", got-rounds)
		}
		return nil
	})
	if err != nil {
		rc.errs = append(rc.errs, err.Error())
	} else {
		rc.renewed = time.Since(back)
	}
	rc.failsAt, _ = r.RenewFailures()
	rc.rounds = r.RenewRounds()
	for _, e := range rc.errs {
		t.Log(e)
	}
	return rc
}

func (rc *recovery) figures(ctx context.Context, t *testing.T, res *Result, r *Region, from time.Time) {
	t.Helper()
	took := func(d time.Duration) string {
		if d == 0 {
			return "not within " + recoverBound.String()
		}
		return d.Round(100 * time.Millisecond).String()
	}
	budget := "≤ " + recoverBound.String() + " from the restart"
	res.Add("servers back: every server serves every instance, eligible", budget, took(rc.served), rc.served > 0)
	res.Add("agents back: connected, every view fresh with every instance eligible", budget, took(rc.agents), rc.agents > 0)
	res.Add("Envoys connected again (control_plane.connected_state 1)", budget, took(rc.envoys), rc.envoys > 0)

	// Nothing removed: every instance on every server, the incarnation
	// it was registered with, in rotation.
	total, missing := 0, []string{}
	for _, n := range r.Nodes() {
		for _, s := range r.Services {
			eps, err := n.Client().Endpoints(ctx, Namespace, s.Name)
			if err != nil {
				missing = append(missing, fmt.Sprintf("%s %s: %v", n.ID, s.Key(), err))
				continue
			}
			byID := map[string]wire.Endpoint{}
			for _, e := range eps {
				byID[e.InstanceID] = e
			}
			for _, in := range r.InstancesOf(s.Name) {
				total++
				e, ok := byID[in.ID]
				if !ok || e.Incarnation != in.Incarnation || !e.Eligible {
					missing = append(missing, fmt.Sprintf("%s %s: held %v, incarnation %d (registered %d), eligible %v", n.ID, in.ID, ok, e.Incarnation, in.Incarnation, e.Eligible))
				}
			}
		}
	}
	res.Add(fmt.Sprintf("instances removed or out of rotation at the end (%d instances on each of %d servers, the CLI-leased ones included)", total/len(r.Nodes()), len(r.Nodes())), "0",
		fmt.Sprintf("%d%s", len(missing), firstOf(missing)), total > 0 && len(missing) == 0)

	// And no registration ended or instance withdrawn since the outage
	// began, as the audit trail says.
	var ended, withdrawn []string
	for _, s := range r.Services {
		var evs []wire.Event
		err := r.clientOp(ctx, "events of "+s.Key(), func(ctx context.Context, cl *client.Client) error {
			var err error
			evs, err = cl.Events(ctx, Namespace, s.Name, 1000)
			return err
		})
		if err != nil {
			ended = append(ended, err.Error())
			continue
		}
		for _, e := range evs {
			if e.At.Before(from) {
				continue
			}
			switch {
			case e.Kind == wire.EventExpired, e.Kind == wire.EventExpiryHeld, e.Kind == wire.EventTerminated, e.Kind == wire.EventDeregistered:
				ended = append(ended, fmt.Sprintf("%s %s %s: %s", e.Kind, e.Instance, e.At.Format("15:04:05"), e.Reason))
			case e.Kind == wire.EventEligibility && (e.To == "unhealthy" || e.To == "quarantined"):
				withdrawn = append(withdrawn, fmt.Sprintf("%s %s→%s %s: %s", e.Instance, e.From, e.To, e.At.Format("15:04:05"), e.Reason))
			}
		}
	}
	res.Add("registrations ended since the outage began (expired, expiry held, terminated, deregistered events)", "0",
		fmt.Sprintf("%d%s", len(ended), firstOf(ended)), len(ended) == 0)
	res.Add("instances withdrawn since the outage began (eligibility events)", "0",
		fmt.Sprintf("%d%s", len(withdrawn), firstOf(withdrawn)), len(withdrawn) == 0)

	fails, last := r.RenewFailures()
	val := fmt.Sprintf("%s; %d runs failed since", took(rc.renewed), fails-rc.failsAt)
	if fails > rc.failsAt {
		val += fmt.Sprintf(" (%v)", last)
	}
	res.Add(fmt.Sprintf("CLI-leased instances (%d): two rounds of cairn renew accepted after the restart", len(r.InstancesOf("leased"))),
		fmt.Sprintf("≤ 3 × lease TTL (%s) + 1 min; no failure after", r.LeaseTTL), val, rc.renewed > 0 && fails == rc.failsAt)
}
