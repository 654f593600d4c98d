package scenarios

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/integration/callers"
	"github.com/cairn-sd/cairn/integration/scenarios/fleet"
)

// slowDelay is how late the slow replica answers its callers: well past
// their deadline (replicaTimeout), so that every request to it times
// out, while its probes (GET /ready, a probe's Health Check) stay fast.
const slowDelay = 3 * time.Second

// dnsAnswerLimit is SPEC §3's default a_record_limit: the most
// addresses a DNS answer holds.
const dnsAnswerLimit = 8

// outcomeWithdrawal is the longest from a replica turning slow until
// the leader withdraws it on its callers' evidence alone, part by part
// (SPEC §2's outcome rules with the policy's defaults). A caller that
// rotates over m instances at replicaRate sends to it every m/rate, but
// its rotation starts again in another order at each new answer (a DNS
// answer's order is a weighted draw; grpc-go's round robin starts at a
// random place with each assignment), so two sends to it may be as far
// as (2m-1)/rate apart; a request sent to it times out after the
// caller's deadline. A report
// window fails when more than half of its requests to the replica did
// (the failure threshold, 0.5), so the first window sure to fail is the
// first that holds no success from before the fault (it starts after
// the fault: one report interval) and a timeout (deadline + m/rate):
// it ends within max(report interval, deadline + m/rate) of the fault,
// and the caller reports it within one more report interval. The
// quorum (2 callers, and a third of those that reported on it within
// the outcome window) holds once the callers sending to it have done
// so. The outcome class then needs withdraw_after (3) consecutive
// evaluations that see new reports with the quorum held: two more,
// each within a report interval (every caller sending to it reports
// every interval), and the evaluation round that consumes the last.
func outcomeWithdrawal(m int) (time.Duration, string) {
	send := time.Duration(float64(2*m-1) / replicaRate * float64(time.Second))
	window := max(reportInterval, replicaTimeout+send)
	more := time.Duration(withdrawAfter-1) * reportInterval
	total := window + reportInterval + more + evalRound
	return total, fmt.Sprintf("first failing window max(report %s, deadline %s + next send %s (2×%d-1 instances at %d/s: a new answer's order)) + its report %s + %d more reports for withdraw_after %d %s + evaluation round %s",
		reportInterval, replicaTimeout, send.Round(10*time.Millisecond), m, replicaRate, reportInterval, withdrawAfter-1, withdrawAfter, more, evalRound)
}

// TestSlowReplica is experiment 2's second half: on the region, the
// same populations as TestFailedReplica (DNS direct, DNS via the
// agents, Envoy, grpc-go) call their service; then one zone-a replica of
// each called service turns slow: it answers its callers 3 s late (past
// their 1 s deadline) while its probes pass. It must be caught by caller
// evidence: the callers' reported timeouts make the outcome quorum
// (docs/decisions.md, "A slow replica is caught by timeouts"). Per kind
// it measures the time from the fault until 99% of the callers that
// sent to it stopped (and for the xDS kinds, until it left 99% of the
// assignments they hold), the error rate over time; it checks that the
// leader's audit event withdrew it on outcome evidence and that its
// probes passed throughout.
func TestSlowReplica(t *testing.T) {
	res := NewResult("slow-replica", "One replica slow but alive: probes green, callers time out (experiment 2, second half)")
	// The DNS callers are given every zone-a instance of the http
	// service (a_record_limit raised to the zone's count), as grpc-go
	// and Envoy callers are: with 8 of them per answer, a caller is
	// given the slow replica only part of the time, and one no longer
	// given it keeps its last passing report in the quorum's
	// denominator for the outcome window, so the quorum's third comes
	// by chance (docs/decisions.md; 6 to 12 s seen in short runs).
	zoneA := func(r *Region, svc string) int {
		n := 0
		for _, in := range r.InstancesOf(svc) {
			if in.Zone == Zones()[0] {
				n++
			}
		}
		return n
	}
	run := startReplicaRun(t, res, func(run *replicaRun) {
		s := run.httpSvc
		s.Policy = fmt.Sprintf("{lease_ttl: 1h, slow_start: 0s, a_record_limit: %d}", max(dnsAnswerLimit, zoneA(run.r, s.Name)))
		if err := run.r.Apply(run.ctx, s); err != nil {
			t.Fatal(err)
		}
		res.Note("%s applied with %s: every DNS answer in zone a holds every zone-a instance", s.Key(), s.Policy)
	})
	r := run.r
	// The callers whose reports make each victim's quorum rotate over
	// their zone's instances: the http one's DNS callers (the zone-a
	// Envoy reports too, over LRS, but only every 10 s), the grpc one's
	// grpc-go callers.
	mOf := map[string]int{run.httpSvc.Name: zoneA(r, run.httpSvc.Name), run.grpcSvc.Name: zoneA(r, run.grpcSvc.Name)}
	// late is, per service, how late its callers' reports came after
	// they were due, once measured: the test process's own lateness
	// under load (a -race run beside other packages), not the server's.
	late := map[string]time.Duration{}
	withdrawalOf := func(svc string) (time.Duration, string) {
		d, why := outcomeWithdrawal(mOf[svc])
		if l, ok := late[svc]; ok {
			d += l
			why += fmt.Sprintf(" + the callers' reports' lateness %s (measured: the latest acknowledgement after its round was due)", l.Round(10*time.Millisecond))
		}
		return d, why
	}
	budget := func(k callers.Kind) (time.Duration, string) {
		w, _ := withdrawalOf(run.svcOf(k).Name)
		d, why := delivery(k)
		return w + d, fmt.Sprintf("outcome withdrawal %s + %s", w.Round(10*time.Millisecond), why)
	}

	fault := time.Now()
	for _, v := range run.victims {
		if err := r.Fleet.SetIDs(run.ctx, fleet.ModeSlow, slowDelay, v.ID); err != nil {
			t.Fatal(err)
		}
	}
	probes := map[string]*probeWatch{}
	for name := range run.victims {
		probes[name] = &probeWatch{}
	}
	events := run.awaitWithdrawn(fault, budget, func(name string, v Instance) error { return probes[name].sample(run, name, v) })
	end := time.Now()
	run.pop.Stop()
	for name := range run.victims {
		to := end
		if e, ok := events[name]; ok {
			to = e.At
		}
		late[name] = reportLateness(run, name, fault, to)
	}
	run.replicaFigures(res, "Caller error rate per second (callers that sent to the replica), one replica slow", fault, end, budget)

	for _, name := range []string{run.httpSvc.Name, run.grpcSvc.Name} {
		v := run.victims[name]
		bound, why := withdrawalOf(name)
		class, e := run.withdrawalRow(res, name, fault, bound, why, events)
		res.Add(fmt.Sprintf("%s: the withdrawal's evidence class (audit event)", v.ID), "outcome (the callers' quorum)",
			fmt.Sprintf("%s: %s", class, e.Reason), class == "outcome")
		pw := probes[name]
		res.Add(fmt.Sprintf("%s: probes green from the fault to the end (leader's evidence, every 250 ms)", v.ID), "no probe failing",
			pw.String(), pw.samples > 0 && len(pw.failing) == 0)
		if n := probeEvents(run, name, v, fault); n != "" {
			res.Add(fmt.Sprintf("%s: audit events on probe evidence since the fault", v.ID), "none", n, false)
		}
		if len(pw.outcomeObservers) > 0 {
			res.Note("%s: %d callers' outcome windows held at the end (%s)", v.ID, len(pw.outcomeObservers), strings.Join(pw.outcomeObservers, ", "))
		}
	}
	res.Note("the replica answers its callers %s late (fleet mode slow), past their %s deadline; GET /ready and a probe's Health Check stay fast", slowDelay, replicaTimeout)
	res.Report(t)
}

// probeWatch samples the probe evidence the leader holds about one
// instance.
type probeWatch struct {
	samples int
	// failing lists the failing probe samples seen ("observer: detail").
	failing []string
	// outcomeObservers are the callers with an outcome window at the
	// last sample.
	outcomeObservers []string
}

func (p *probeWatch) String() string {
	if len(p.failing) == 0 {
		return fmt.Sprintf("%d samples, every probe passing", p.samples)
	}
	return fmt.Sprintf("%d samples, failing: %s", p.samples, strings.Join(p.failing, "; "))
}

// sample reads the leader's endpoints of svc and records v's probe
// evidence.
func (p *probeWatch) sample(run *replicaRun, svc string, v Instance) error {
	leader, err := run.r.Cluster.Leader()
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(run.ctx, 5*time.Second)
	defer cancel()
	eps, err := leader.Client().Endpoints(cctx, Namespace, svc)
	if err != nil {
		return err
	}
	for _, e := range eps {
		if e.InstanceID != v.ID {
			continue
		}
		p.samples++
		p.outcomeObservers = p.outcomeObservers[:0]
		for _, ev := range e.Evidence {
			switch ev.Class {
			case "probe":
				if !ev.OK {
					if s := ev.Observer + ": " + ev.Detail; len(p.failing) < 5 && !slices.Contains(p.failing, s) {
						p.failing = append(p.failing, s)
					}
				}
			case "outcome":
				p.outcomeObservers = append(p.outcomeObservers, ev.Observer)
			}
		}
	}
	return nil
}

// probeEvents lists the leader's audit events about v since fault whose
// evidence is a probe's ("" if none).
func probeEvents(run *replicaRun, svc string, v Instance, fault time.Time) string {
	leader, err := run.r.Cluster.Leader()
	if err != nil {
		return err.Error()
	}
	cctx, cancel := context.WithTimeout(run.ctx, 5*time.Second)
	defer cancel()
	evs, err := leader.Client().Events(cctx, Namespace, svc, 1000)
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, e := range evs {
		if e.Instance == v.ID && !e.At.Before(fault) && e.Evidence != nil && e.Evidence.Class == "probe" {
			out = append(out, fmt.Sprintf("%s → %s (%s)", e.From, e.To, e.Reason))
		}
	}
	return strings.Join(out, "; ")
}

// reportLateness is the longest any caller of service svc took, past
// the time its report round was due, to have a report acknowledged, over
// the rounds due from from to to.
func reportLateness(run *replicaRun, svc string, from, to time.Time) time.Duration {
	var late time.Duration
	for i, rep := range run.pop.Reporters {
		if rep == nil || run.svcOf(run.pop.Callers[i].Kind()).Name != svc {
			continue
		}
		for _, d := range rep.Stats().Delivered {
			if !d.Due.Before(from) && !d.Due.After(to) {
				late = max(late, d.Late())
			}
		}
	}
	return late
}
