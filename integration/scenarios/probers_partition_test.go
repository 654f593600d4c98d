package scenarios

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/miekg/dns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/callers"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// Experiment 6: the probers partitioned from one zone. Sizes: the
// partition's length, the steady traffic before it, the callers.
const (
	ppZone          = "c"
	ppShortPartLen  = 30 * time.Second
	ppFullPartLen   = 5 * time.Minute
	ppSteady        = 8 * time.Second
	ppShortCallers  = 3 // one per zone
	ppFullCallers   = 6
	ppRate          = 10
	ppStatePoll     = time.Second            // the leader's verdicts, per instance
	ppEligiblePoll  = 500 * time.Millisecond // every server's eligible counts
	ppDNSPoll       = time.Second            // every server's SRV answers
	ppEventPoll     = 3 * time.Second        // the leader's audit trail
	ppAfterHealthy  = 5 * time.Second        // watched after the zone is healthy again
	ppErrorRateSlip = 0.005                  // "unchanged": within half a percentage point
)

// ppKinds are the populations: DNS direct and DNS via the agents call an
// http service, grpc-go xDS a grpc one.
var ppKinds = []callers.Kind{callers.DNSDirect, callers.DNSAgent, callers.GRPCXDS}

// ppBudgets derives the scenario's budgets from the region's check
// (interval I, timeout T) and the policy's defaults (SPEC §2): silence
// is no fresh evidence within the freshness window (3 × I), so the last
// passing probe before the partition (at most at the fault) stops
// counting within 3 × I, and the verdict unknown is committed and
// published within two evaluation rounds (1 s each: a round's cadence,
// and its hold-back of the newest results). Back from unknown, one
// passing probe makes an instance healthy (a class that never failed
// needs no run of successes): the next probe of each target is due
// within 1.1 × I (the schedule's jitter) and one caught in flight by
// the heal takes its timeout T, then two rounds.
func ppBudgets(cfg Config) (unknown, healthy time.Duration, unknownWhy, healthyWhy string) {
	const round = time.Second
	i := cfg.CheckInterval
	t := min(2*time.Second, i/2)
	unknown = 3*i + 2*round
	// A probe in flight at the heal may still time out, and a held
	// timeout holds the passes after it for an interval and a round
	// (health: samples).
	healthy = i + i/10 + t + (i + round) + 2*round
	return unknown, healthy,
		fmt.Sprintf("freshness 3 × %s + 2 rounds", i),
		fmt.Sprintf("1.1 × %s + timeout %s + a held timeout's %s and a round + 2 rounds", i, t, i)
}

// TestProbersPartitioned is experiment 6: the servers' probes to one
// zone's instances are dropped by a firewall inside the zone's network
// namespace (netzone.go), while a population of callers keeps calling
// those instances from an address the rule lets through. The zone's
// instances must become unknown (SPEC §2: a prober cut off is silence,
// not failure), stay eligible on every server, in DNS answers and in
// xDS assignments the whole time, with the callers' error rate
// unchanged; healing brings them back to healthy with no withdrawal in
// between (field-notes H6).
func TestProbersPartitioned(t *testing.T) {
	cfg := SizeConfig()
	cfg.NetlabZone = ppZone
	per, partLen := ppShortCallers, ppShortPartLen
	if Full() {
		per, partLen = ppFullCallers, ppFullPartLen
	}
	cfg.Callers = max(cfg.Callers, per*len(ppKinds)+len(Zones()))
	res := NewResult("probers-partitioned", "The probers partitioned from one zone (experiment 6)")
	r := StartRegion(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), partLen+5*time.Minute)
	defer cancel()
	res.Note("%s", r.StartTimes)
	if err := r.WaitHealthy(ctx, 3*time.Minute); err != nil {
		t.Fatal(err)
	}

	// The called services, and one no caller calls (quiet): its
	// instances of the zone go silent, and its answers show them so.
	httpSvc, grpcSvc := r.CalledServices()
	var quietSvc ServiceSpec
	for _, s := range r.Services {
		if s.Registrar == ByClient && s.Name != httpSvc.Name && s.Name != grpcSvc.Name && quietSvc.Name == "" {
			quietSvc = s
		}
	}
	svcOf := ServiceOf(httpSvc, grpcSvc)
	// The zone's instances: those with a check are probed (the
	// third-party one is not, and is only counted as never withdrawn);
	// of those, the silent ones are of services no caller calls: the
	// callers' outcomes are fresh evidence of the others (SPEC §2), which
	// keeps them healthy while their callers reach them.
	zoned, checked, silent := map[string]Instance{}, map[string]bool{}, map[string]bool{}
	elsewhere := map[string]bool{} // the probed instances of the other zones
	for _, in := range r.Instances() {
		if in.Zone != ppZone {
			if s, _ := r.Service(in.Name); s.Check != "" {
				elsewhere[in.ID] = true
			}
			continue
		}
		zoned[in.ID] = in
		if s, _ := r.Service(in.Name); s.Check != "" {
			checked[in.ID] = true
			silent[in.ID] = in.Name != httpSvc.Name && in.Name != grpcSvc.Name
		}
	}

	if n := countTrue(silent); len(checked) == 0 || n == 0 {
		// waitAll would match on its first poll and time nothing.
		t.Fatalf("zone %s has %d probed instances, %d of them of services no caller calls: the figures need both", ppZone, len(checked), n)
	}
	pop := StartPopulation(t, r, PopulationConfig{Kinds: ppKinds, Per: per, Rate: ppRate, Service: svcOf})
	mark := ppLastSeq(ctx, t, r)
	w := startPPWatch(ctx, t, r, zoned, checked, silent, elsewhere, []ServiceSpec{httpSvc, grpcSvc, quietSvc}, per*len(ppKinds), mark)
	if _, err := pop.WaitSteady(ppRate, ppSteady, 40*time.Second); err != nil {
		t.Fatal(err)
	}
	skipped := ppSkipped(ctx, r)

	fault := time.Now()
	r.PartitionProbers(t)
	unknownBudget, healthyBudget, unknownWhy, healthyWhy := ppBudgets(cfg)
	allUnknown := w.waitAll(ctx, status.Unknown, fault, unknownBudget+30*time.Second)
	// The partition lasts its length from the fault, whatever came;
	// half way, one instance of the zone as the leader tells it.
	until := func(d time.Duration) {
		t.Helper()
		if err := integration.Poll(d+time.Minute, 250*time.Millisecond, func() error {
			if since := time.Since(fault); since < d {
				return fmt.Errorf("partitioned for %s of %s", since.Round(time.Second), d)
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	until(partLen / 2)
	res.Note("half way through the partition, %s", ppDescribe(ctx, r, zoned, checked))
	until(partLen)
	heal := time.Now()
	skippedPart := ppSkipped(ctx, r)
	r.HealProbers(t)
	allHealthy := w.waitAll(ctx, status.Healthy, heal, healthyBudget+30*time.Second)
	// Watched a little longer: a withdrawal after the healing would show.
	tail := time.Now().Add(ppAfterHealthy)
	_ = integration.Poll(ppAfterHealthy+time.Second, 250*time.Millisecond, func() error {
		if time.Now().Before(tail) {
			return fmt.Errorf("watching")
		}
		return nil
	})
	end := time.Now()
	pop.Stop()
	w.stop()
	w.pollEvents(ctx) // the last ones

	res.Add(fmt.Sprintf("zone %s's %d probed instances that no caller calls all unknown, from the partition", ppZone, w.silentCount()),
		fmt.Sprintf("≤ %s (%s)", unknownBudget, unknownWhy), ppDur(allUnknown), allUnknown >= 0 && allUnknown <= unknownBudget)
	res.Add(fmt.Sprintf("zone %s's instances back to healthy, from the heal", ppZone),
		fmt.Sprintf("≤ %s (%s)", healthyBudget, healthyWhy), ppDur(allHealthy), allHealthy >= 0 && allHealthy <= healthyBudget)
	w.figures(res, quietSvc, fault, heal)
	ppEventFigures(res, r, zoned, w.eventList(), fault)
	ppCallerFigures(res, pop, zoned, fault, heal, end)
	for _, n := range r.Nodes() {
		res.Note("%s: %.0f probes skipped with every worker busy before the partition, %.0f during it", n.ID, skipped[n.ID], skippedPart[n.ID]-skipped[n.ID])
	}

	res.Note("partition: inside netlab host %s (zone %s's instances, %s), iptables drops every packet from the servers' address %s to them; the callers' requests leave from %s and pass; %s partitioned, from %.1fs",
		integration.LabHost(netlabHost(ppZone)), ppZone, NetlabSubnet(ppZone), integration.LabServer, CallerSource, partLen, fault.Sub(pop.Start).Seconds())
	res.Note("check interval %s, timeout %s; callers: %d per population at %d req/s (one zone in three each), DNS ones calling %s, grpc-go ones %s",
		cfg.CheckInterval, min(2*time.Second, cfg.CheckInterval/2), per, ppRate, httpSvc.Key(), grpcSvc.Key())
	res.Report(t)
}

// ppDescribe tells one probed instance of the zone as the leader does:
// its verdict, reasons and evidence.
func ppDescribe(ctx context.Context, r *Region, zoned map[string]Instance, checked map[string]bool) string {
	var ids []string
	for id := range checked {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return "no probed instance in the zone"
	}
	in := zoned[ids[len(ids)/2]]
	leader, err := r.Cluster.Leader()
	if err != nil {
		return err.Error()
	}
	eps, err := leader.Client().Endpoints(ctx, Namespace, in.Name)
	if err != nil {
		return err.Error()
	}
	for _, e := range eps {
		if e.InstanceID != in.ID {
			continue
		}
		var ev []string
		for _, c := range e.Evidence {
			ev = append(ev, fmt.Sprintf("%s/%s ok=%v %q %s ago", c.Class, c.Observer, c.OK, c.Detail, time.Since(c.At).Round(100*time.Millisecond)))
		}
		return fmt.Sprintf("%s on %s: %s, eligible %v, reasons %q, evidence [%s]", in.ID, leader.ID, e.Verdict, e.Eligible, e.Reasons, strings.Join(ev, "; "))
	}
	return in.ID + " not listed"
}

// ppSkipped reads every server's count of probes skipped because every
// worker was busy (cairn_probe_skipped_total{reason="busy"}).
func ppSkipped(ctx context.Context, r *Region) map[string]float64 {
	out := map[string]float64{}
	for _, n := range r.Nodes() {
		v, err := n.Metric(ctx, `cairn_probe_skipped_total{reason="busy"}`)
		if err != nil {
			v = math.NaN()
		}
		out[n.ID] = v
	}
	return out
}

// ppDur shows a measured time, or that it never came.
func ppDur(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.Round(10 * time.Millisecond).String()
}

// ppLastSeq is the newest audit event's sequence number on the leader.
func ppLastSeq(ctx context.Context, t *testing.T, r *Region) uint64 {
	t.Helper()
	leader, err := r.Cluster.Leader()
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	for _, s := range r.Services {
		evs, err := leader.Client().Events(ctx, Namespace, s.Name, store.AuditCapacity)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			last = max(last, e.Seq)
		}
	}
	return last
}

// ppEventFigures reads the audit trail from the steady traffic on (the
// watch reads it every few seconds: the leader keeps the last
// store.AuditCapacity events, fewer than a full region's partition
// makes): no withdrawal at all, no guard engaged, and the probers whose
// timeouts about the zone were set aside.
func ppEventFigures(res *Result, r *Region, zoned map[string]Instance, evs []wire.Event, fault time.Time) {
	var withdrawals, disregarded []string
	toUnknown := 0
	aside, restored := map[string]bool{}, map[string]bool{}
	for _, e := range evs {
		if e.At.Before(fault) {
			continue
		}
		switch e.Kind {
		case wire.EventEligibility:
			if strings.HasPrefix(e.To, "withdrawn") {
				withdrawals = append(withdrawals, fmt.Sprintf("%s %s→%s (%s)", e.Instance, e.From, e.To, e.Reason))
			}
			if _, ok := zoned[e.Instance]; ok && strings.HasSuffix(e.To, "/"+status.Unknown.String()) {
				toUnknown++
			}
		case wire.EventHealthDisregarded:
			disregarded = append(disregarded, e.Service+": "+e.Reason)
		case wire.EventProbesSetAside:
			aside[ppObserver(e.Reason)] = true
		case wire.EventProbesRestored:
			restored[ppObserver(e.Reason)] = true
		}
	}
	res.Note("audit trail: %d events read from the steady traffic on", len(evs))
	res.Add("withdrawal events (any instance), partition through healing", "0",
		fmt.Sprintf("%d %s", len(withdrawals), ppFirst(withdrawals)), len(withdrawals) == 0)
	res.Add("health_disregarded events (the guard need not engage: unknown is eligible)", "0",
		fmt.Sprintf("%d %s", len(disregarded), ppFirst(disregarded)), len(disregarded) == 0)
	var servers []string
	for _, n := range r.Nodes() {
		servers = append(servers, n.ID)
	}
	res.Add(fmt.Sprintf("probers whose timeouts about zone %s were set aside (probes_set_aside)", ppZone),
		fmt.Sprintf("every server %v", servers), fmt.Sprint(ppKeys(aside)), slices.Equal(ppKeys(aside), servers))
	res.Add("probers restored after the heal (probes_restored)", fmt.Sprintf("every server %v", servers),
		fmt.Sprint(ppKeys(restored)), slices.Equal(ppKeys(restored), servers))
	res.Note("audit trail: %d verdict transitions of zone %s's instances to unknown after the partition", toUnknown, ppZone)
}

// ppObserver is the prober a probes_set_aside or probes_restored
// event's detail names ("prober n2 ...").
func ppObserver(detail string) string {
	f := strings.Fields(detail)
	if len(f) > 1 && f[0] == "prober" {
		return f[1]
	}
	return "?"
}

func ppKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func ppFirst(s []string) string {
	if len(s) == 0 {
		return ""
	}
	return "(first: " + s[0] + ")"
}

// ppCallerFigures: per population, the error rate before, during and
// after the partition, and the share of requests the zone's instances
// answered before and during it; and the error rate per second as a
// timeline.
func ppCallerFigures(res *Result, pop *Population, zoned map[string]Instance, fault, heal, end time.Time) {
	recs := pop.Snap()
	byKind := callers.ByKind(recs)
	tl := Timeline{Title: fmt.Sprintf("Caller error rate per second, probers partitioned from zone %s", ppZone), YLabel: "error rate",
		Marks: []Mark{{T: fault.Sub(pop.Start).Seconds(), Label: "partition"}, {T: heal.Sub(pop.Start).Seconds(), Label: "heal"}}}
	rates := callers.ErrorRates(recs, pop.Start, end, time.Second)
	for _, k := range ppKinds {
		type tally struct{ sent, failed, zone int }
		var before, during, after tally
		for _, rec := range byKind[k] {
			for _, q := range rec.Requests {
				var t *tally
				switch {
				case q.At.Before(fault):
					t = &before
				case q.At.Before(heal):
					t = &during
				case q.At.Before(end):
					t = &after
				default:
					continue
				}
				t.sent++
				if q.Result != callers.Success {
					t.failed++
				}
				if _, ok := zoned[q.Instance]; ok && q.Result == callers.Success {
					t.zone++
				}
			}
		}
		rate := func(a, b int) float64 {
			if b == 0 {
				return math.NaN()
			}
			return float64(a) / float64(b)
		}
		eb, ed, ea := rate(before.failed, before.sent), rate(during.failed, during.sent), rate(after.failed, after.sent)
		res.Add(fmt.Sprintf("%s: error rate during the partition (steady before: %.2f%%)", k, 100*eb),
			fmt.Sprintf("≤ steady + %.1f pp", 100*ppErrorRateSlip), fmt.Sprintf("%.2f%% of %d", 100*ed, during.sent),
			during.sent > 0 && ed <= eb+ppErrorRateSlip)
		res.Add(fmt.Sprintf("%s: error rate after the heal", k), fmt.Sprintf("≤ steady + %.1f pp", 100*ppErrorRateSlip),
			fmt.Sprintf("%.2f%% of %d", 100*ea, after.sent), after.sent > 0 && ea <= eb+ppErrorRateSlip)
		zb, zd := rate(before.zone, before.sent), rate(during.zone, during.sent)
		res.Add(fmt.Sprintf("%s: share of requests answered by zone %s's instances during the partition (before: %.1f%%)", k, ppZone, 100*zb),
			"≥ 80% of the share before", fmt.Sprintf("%.1f%%", 100*zd), zb > 0 && zd >= 0.8*zb)
		s := Series{Name: string(k)}
		for _, p := range rates[k] {
			s.Points = append(s.Points, Point{T: p.T, V: p.V})
		}
		tl.Series = append(tl.Series, s)
	}
	res.Timelines = append(res.Timelines, tl)
}

// ppWatch watches the region through the partition: the leader's
// verdicts of the zone's instances (a timeline by state), every
// server's eligible counts, every server's SRV answers and an xDS
// assignment stream per server.
type ppWatch struct {
	r       *Region
	zoned   map[string]Instance
	checked map[string]bool
	silent  map[string]bool // probed, and called by no caller
	// elsewhere are the probed instances of the other zones.
	elsewhere map[string]bool
	svcs      []ServiceSpec
	start     time.Time
	cancel    context.CancelFunc
	wg        sync.WaitGroup

	mu sync.Mutex
	// states: per leader poll, the zone's instances by state.
	states []ppStates
	// notEligible: the most instances (any zone) a server counted
	// ineligible in one poll, and where.
	notEligible     int
	notEligibleWhat string
	eligiblePolls   int
	// dnsMissing: SRV answers that lacked one of the zone's instances of
	// the service; dnsPolls the answers read.
	dnsMissing, dnsPolls int
	dnsWhat              string
	xds                  map[string]*ppXDS // by server
	errs                 []string
	// events are the audit events after mark, by sequence number.
	mark   uint64
	events map[uint64]wire.Event
}

// ppStates counts the zone's instances by state at one poll.
type ppStates struct {
	at                                 time.Time
	healthy, unknown, withdrawn, other int
	// checkedHealthy counts the probed ones healthy, silentUnknown the
	// silent ones (ppWatch.silent) unknown.
	checkedHealthy, silentUnknown int
	// elsewhereUnknown counts the probed instances of the other zones
	// that are unknown: their probers' silence about them.
	elsewhereUnknown int
	elsewhereWhat    string
	withdrawnWhat    string // one withdrawn instance of the zone, and why
}

// ppXDS is what one server's assignment stream showed of the zone's
// endpoints.
type ppXDS struct {
	updates, missing int
	// statuses counts, per service, its zone endpoints' health
	// statuses over the updates; allUnknown the updates of a service in
	// which every one of them was UNKNOWN.
	statuses   map[string]map[string]int
	allUnknown map[string]int
	what       string
}

func startPPWatch(ctx context.Context, t *testing.T, r *Region, zoned map[string]Instance, checked, silent, elsewhere map[string]bool, svcs []ServiceSpec, firstToken int, mark uint64) *ppWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &ppWatch{r: r, zoned: zoned, checked: checked, silent: silent, elsewhere: elsewhere, svcs: svcs, mark: mark, events: map[uint64]wire.Event{}, start: time.Now(), cancel: cancel, xds: map[string]*ppXDS{}}
	every := func(d time.Duration, f func()) {
		w.wg.Go(func() {
			tk := time.NewTicker(d)
			defer tk.Stop()
			for {
				f()
				select {
				case <-ctx.Done():
					return
				case <-tk.C:
				}
			}
		})
	}
	every(ppStatePoll, func() { w.pollStates(ctx) })
	every(ppEligiblePoll, func() { w.pollEligible(ctx) })
	every(ppDNSPoll, func() { w.pollDNS() })
	every(ppEventPoll, func() { w.pollEvents(ctx) })
	for i, n := range r.Nodes() {
		x := &ppXDS{statuses: map[string]map[string]int{}, allUnknown: map[string]int{}}
		w.xds[n.ID] = x
		tok := r.CallerToken(firstToken + i)
		w.wg.Go(func() { w.watchXDS(ctx, n.GRPCAddr, tok, x) })
	}
	t.Cleanup(w.stop)
	return w
}

func (w *ppWatch) stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *ppWatch) fail(format string, args ...any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.errs) < 20 {
		w.errs = append(w.errs, fmt.Sprintf(format, args...))
	}
}

// pollStates reads the leader's endpoints of every service with an
// instance in the zone and counts the zone's instances by state.
func (w *ppWatch) pollStates(ctx context.Context) {
	leader, err := w.r.Cluster.Leader()
	if err != nil {
		w.fail("leader: %v", err)
		return
	}
	st := ppStates{at: time.Now()}
	seen := 0
	for _, s := range w.r.Services {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		eps, err := leader.Client().Endpoints(cctx, Namespace, s.Name)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.fail("%s: endpoints of %s: %v", leader.ID, s.Name, err)
			}
			return
		}
		for _, e := range eps {
			if _, ok := w.zoned[e.InstanceID]; !ok {
				if w.elsewhere[e.InstanceID] && e.Verdict == status.Unknown {
					st.elsewhereUnknown++
					st.elsewhereWhat = e.InstanceID + ": " + strings.Join(e.Reasons, "; ")
				}
				continue
			}
			seen++
			switch {
			case !e.Eligible:
				st.withdrawn++
				st.withdrawnWhat = fmt.Sprintf("%s %s: %s", e.InstanceID, e.Verdict, strings.Join(e.Reasons, "; "))
			case e.Verdict == status.Healthy:
				st.healthy++
				if w.checked[e.InstanceID] {
					st.checkedHealthy++
				}
			case e.Verdict == status.Unknown:
				st.unknown++
				if w.silent[e.InstanceID] {
					st.silentUnknown++
				}
			default:
				st.other++
			}
		}
	}
	if seen != len(w.zoned) {
		st.other += len(w.zoned) - seen // not listed: as bad as withdrawn, shown apart
	}
	w.mu.Lock()
	w.states = append(w.states, st)
	w.mu.Unlock()
}

// pollEvents reads the leader's audit trail of every service and keeps
// the events after the mark.
func (w *ppWatch) pollEvents(ctx context.Context) {
	leader, err := w.r.Cluster.Leader()
	if err != nil {
		w.fail("leader: %v", err)
		return
	}
	for _, s := range w.r.Services {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		evs, err := leader.Client().Events(cctx, Namespace, s.Name, store.AuditCapacity)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.fail("%s: events of %s: %v", leader.ID, s.Name, err)
			}
			return
		}
		w.mu.Lock()
		for _, e := range evs {
			if e.Seq > w.mark {
				w.events[e.Seq] = e
			}
		}
		w.mu.Unlock()
	}
}

// eventList returns the events kept, in order.
func (w *ppWatch) eventList() []wire.Event {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]wire.Event, 0, len(w.events))
	for _, e := range w.events {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b wire.Event) int { return cmp.Compare(a.Seq, b.Seq) })
	return out
}

// pollEligible reads every server's service list: every instance of
// every service eligible.
func (w *ppWatch) pollEligible(ctx context.Context) {
	for _, n := range w.r.Nodes() {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		ss, err := n.Client().Services(cctx)
		cancel()
		if err != nil {
			if ctx.Err() == nil {
				w.fail("%s: services: %v", n.ID, err)
			}
			continue
		}
		w.mu.Lock()
		w.eligiblePolls++
		for _, s := range ss {
			if s.Namespace != Namespace {
				continue
			}
			if d := s.Instances - s.Eligible; d > w.notEligible {
				w.notEligible, w.notEligibleWhat = d, fmt.Sprintf("%s: %s %d of %d eligible", n.ID, s.Name, s.Eligible, s.Instances)
			}
		}
		w.mu.Unlock()
	}
}

// pollDNS asks every server for the SRV records of the called services
// (over TCP: an answer of every eligible endpoint may not fit in UDP)
// and checks that every instance of the zone is in each.
func (w *ppWatch) pollDNS() {
	c := &dns.Client{Net: "tcp", Timeout: 3 * time.Second}
	for _, n := range w.r.Nodes() {
		for _, s := range w.svcs {
			m := new(dns.Msg)
			m.SetQuestion(fmt.Sprintf("_main._tcp.%s.%s.svc.cairn.internal.", s.Name, Namespace), dns.TypeSRV)
			in, _, err := c.Exchange(m, n.DNSAddr)
			if err != nil {
				w.fail("%s: SRV %s: %v", n.ID, s.Name, err)
				continue
			}
			got := map[string]bool{}
			for _, rr := range in.Answer {
				if srv, ok := rr.(*dns.SRV); ok {
					got[strings.SplitN(srv.Target, ".", 2)[0]] = true
				}
			}
			w.mu.Lock()
			w.dnsPolls++
			for id, in := range w.zoned {
				if in.Name == s.Name && !got[id] {
					w.dnsMissing++
					w.dnsWhat = fmt.Sprintf("%s's SRV answer for %s lacked %s at %.1fs", n.ID, s.Name, id, time.Since(w.start).Seconds())
					break
				}
			}
			w.mu.Unlock()
		}
	}
}

// watchXDS subscribes, as a node of the zone, to the assignments of the
// called services on one server (state of the world over ADS, every
// response acknowledged) and counts, per update, the zone's endpoints
// missing and their health statuses, until ctx ends.
func (w *ppWatch) watchXDS(ctx context.Context, addr, token string, x *ppXDS) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		w.fail("xDS %s: %v", addr, err)
		return
	}
	defer cc.Close()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	var names []string
	for _, s := range w.svcs {
		names = append(names, s.Name+"."+Namespace+":main")
	}
	req := &discoveryv3.DiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNames: names,
		Node: &corev3.Node{Id: "pp-watch-" + addr, Locality: &corev3.Locality{Region: RegionName, Zone: ppZone}}}
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err == nil {
		err = stream.Send(req)
	}
	for err == nil {
		var resp *discoveryv3.DiscoveryResponse
		if resp, err = stream.Recv(); err != nil {
			break
		}
		for _, a := range resp.Resources {
			var cla endpointv3.ClusterLoadAssignment
			if err := a.UnmarshalTo(&cla); err != nil {
				w.fail("xDS %s: %v", addr, err)
				continue
			}
			w.countCLA(&cla, x)
		}
		req.VersionInfo, req.ResponseNonce = resp.VersionInfo, resp.Nonce
		err = stream.Send(req)
	}
	if ctx.Err() == nil {
		w.fail("xDS %s: stream ended: %v", addr, err)
	}
}

// countCLA counts one assignment: the zone's instances of its service
// that it lacks, and the health status of those it holds.
func (w *ppWatch) countCLA(cla *endpointv3.ClusterLoadAssignment, x *ppXDS) {
	svc, _, _ := strings.Cut(cla.ClusterName, ".")
	held := map[string]string{}
	for _, le := range cla.Endpoints {
		for _, e := range le.LbEndpoints {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			if sa != nil {
				held[fmt.Sprintf("%s:%d", sa.Address, sa.GetPortValue())] = e.HealthStatus.String()
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	x.updates++
	missing, unknown := false, 0
	if x.statuses[svc] == nil {
		x.statuses[svc] = map[string]int{}
	}
	n := 0
	for _, in := range w.zoned {
		if in.Name != svc {
			continue
		}
		n++
		st, ok := held[in.HostPort()]
		if !ok {
			missing = true
			x.what = fmt.Sprintf("%s lacked %s at %.1fs", cla.ClusterName, in.ID, time.Since(w.start).Seconds())
			continue
		}
		x.statuses[svc][st]++
		if st == corev3.HealthStatus_UNKNOWN.String() {
			unknown++
		}
	}
	if missing {
		x.missing++
	}
	if n > 0 && unknown == n {
		x.allUnknown[svc]++
	}
}

// silentCount is the number of silent instances.
func (w *ppWatch) silentCount() int { return countTrue(w.silent) }

// countTrue counts the true values of m.
func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// waitAll polls the leader's states until every probed instance of the
// zone is healthy, or every silent one unknown (v), and returns the time
// from since, or -1 if it did not come within timeout.
func (w *ppWatch) waitAll(ctx context.Context, v status.Verdict, since time.Time, timeout time.Duration) time.Duration {
	var at time.Time
	_ = integration.Poll(timeout, 100*time.Millisecond, func() error {
		w.mu.Lock()
		defer w.mu.Unlock()
		for _, s := range w.states {
			if s.at.Before(since) {
				continue
			}
			n, want := s.checkedHealthy, len(w.checked)
			if v == status.Unknown {
				n, want = s.silentUnknown, w.silentCount()
			}
			if n == want {
				at = s.at
				return nil
			}
		}
		if ctx.Err() != nil {
			return integration.StopPolling(ctx.Err())
		}
		return fmt.Errorf("not all %s yet", v)
	})
	if at.IsZero() {
		return -1
	}
	return at.Sub(since)
}

// figures adds the watch's figures and the zone's timeline by state;
// quiet is the service no caller calls.
func (w *ppWatch) figures(res *Result, quiet ServiceSpec, fault, heal time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	maxWithdrawn, maxOther, polls, maxElsewhere, elsewhereWhat, withdrawnWhat := 0, 0, 0, 0, "", ""
	tl := Timeline{Title: fmt.Sprintf("Zone %s's %d instances by state (the leader's verdicts), probers partitioned", ppZone, len(w.zoned)),
		YLabel: "instances", Marks: []Mark{{T: fault.Sub(w.start).Seconds(), Label: "partition"}, {T: heal.Sub(w.start).Seconds(), Label: "heal"}}}
	series := []Series{{Name: "healthy"}, {Name: "unknown"}, {Name: "withdrawn"}, {Name: "other"}}
	for _, s := range w.states {
		tt := s.at.Sub(w.start).Seconds()
		for i, v := range []int{s.healthy, s.unknown, s.withdrawn, s.other} {
			series[i].Points = append(series[i].Points, Point{T: tt, V: float64(v)})
		}
		if !s.at.Before(fault) {
			polls++
			if s.withdrawn > maxWithdrawn {
				maxWithdrawn, withdrawnWhat = s.withdrawn, fmt.Sprintf(" (at %.1fs, e.g. %s)", tt, s.withdrawnWhat)
			}
			maxOther = max(maxOther, s.other)
			if s.elsewhereUnknown > maxElsewhere {
				maxElsewhere, elsewhereWhat = s.elsewhereUnknown, " (e.g. "+s.elsewhereWhat+")"
			}
		}
	}
	tl.Series = series
	res.Timelines = append(res.Timelines, tl)
	res.Add(fmt.Sprintf("zone %s's instances withdrawn, most at one poll of the leader (%d polls, partition through healing)", ppZone, polls),
		"0", fmt.Sprint(maxWithdrawn)+withdrawnWhat, polls > 0 && maxWithdrawn == 0)
	res.Add(fmt.Sprintf("zone %s's instances neither healthy, unknown nor withdrawn, most at one poll", ppZone), "0", fmt.Sprint(maxOther), maxOther == 0)
	res.Add(fmt.Sprintf("the other zones' %d probed instances unknown (their probes go on), most at one poll", len(w.elsewhere)), "0",
		fmt.Sprint(maxElsewhere)+elsewhereWhat, maxElsewhere == 0)
	what := ""
	if w.notEligible > 0 {
		what = " (" + w.notEligibleWhat + ")"
	}
	res.Add(fmt.Sprintf("instances not eligible on any server, most at one poll (%d polls of every server's services, every %s)", w.eligiblePolls, ppEligiblePoll),
		"0", fmt.Sprint(w.notEligible)+what, w.eligiblePolls > 0 && w.notEligible == 0)
	res.Add(fmt.Sprintf("SRV answers lacking one of zone %s's instances (%d answers, every server, every %s)", ppZone, w.dnsPolls, ppDNSPoll),
		"0", fmt.Sprint(w.dnsMissing)+" "+w.dnsWhat, w.dnsPolls > 0 && w.dnsMissing == 0)
	var ids []string
	for id := range w.xds {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		x := w.xds[id]
		res.Add(fmt.Sprintf("%s: xDS assignments lacking one of zone %s's instances (%d updates)", id, ppZone, x.updates),
			"0", fmt.Sprint(x.missing)+" "+x.what, x.updates > 0 && x.missing == 0)
		res.Add(fmt.Sprintf("%s: assignments of %s (no caller) with all of zone %s's endpoints UNKNOWN, in rotation", id, quiet.Name, ppZone),
			"≥ 1", fmt.Sprint(x.allUnknown[quiet.Name]), x.allUnknown[quiet.Name] >= 1)
		res.Note("%s: zone %s's endpoints in its xDS assignments by health status (endpoint-updates), per service: %v", id, ppZone, x.statuses)
	}
	for _, e := range w.errs {
		res.Note("watch error: %s", e)
	}
}
