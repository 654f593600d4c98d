package scenarios

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/integration/callers"
)

// EnvOutage overrides the length of TestControlPlaneOff's outage (a Go
// duration): 2 min by default, 60 min under CAIRN_SCENARIOS=full.
const EnvOutage = "CAIRN_SCENARIO_OUTAGE"

// Sizes of experiment 1: callers per population (one or two per zone),
// their rate, the steady traffic before the outage and after the
// recovery.
const (
	offShortCallers = 3
	offFullCallers  = 6
	offRate         = 10
	offShortSteady  = 20 * time.Second
	offFullSteady   = time.Minute
	// offSlack is "unchanged": an error rate at most this much (0.5
	// percentage points) above the steady one.
	offSlack = 0.005
	// agentAtOnce bounds the time from an agent's start, every server
	// off, to its first DNS answer (SPEC §5: from disk, at once): the
	// process's start and the read of its views file.
	agentAtOnce = time.Second
	// staleAfter is the servers' --stale-after (the default).
	staleAfter = 5 * time.Second
)

// offKinds are the populations: DNS direct, DNS via the agents and
// Envoy call an http service, grpc-go xDS a grpc one.
var offKinds = []callers.Kind{callers.DNSDirect, callers.DNSAgent, callers.GRPCXDS, callers.Envoy}

// offLength is the outage's length: $CAIRN_SCENARIO_OUTAGE, or 2 min
// (60 min at full size).
func offLength(t *testing.T) time.Duration {
	t.Helper()
	s := os.Getenv(EnvOutage)
	if s == "" {
		if Full() {
			return time.Hour
		}
		return 2 * time.Minute
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 20*time.Second || d > 3*time.Hour {
		t.Fatalf("$%s=%q: want a Go duration from 20s to 3h, e.g. 5m", EnvOutage, s)
	}
	return d
}

// holdUntil calls f every interval until at (or ctx's end): a phase of
// the scenario lasts a fixed time; it is not a wait for a condition.
func holdUntil(ctx context.Context, at time.Time, every time.Duration, f func()) error {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for time.Now().Before(at) {
		if f != nil {
			f()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tk.C:
		}
	}
	return nil
}

// TestControlPlaneOff is experiment 1 (and SPEC §9's control-plane
// outage, SPEC §7's server without quorum): on the region, a population
// of callers per client kind calls at a steady rate; then the control
// plane goes away in two phases. First the store is down: two of the
// three servers are killed (-9), and the survivor, without quorum,
// answers DNS from its table (stale, EDE 3) and ends its xDS streams
// (SPEC §4). Then the survivor is stopped too: nothing of the control
// plane runs. In the middle of that, an agent is killed and started
// again: it answers from its views on disk at once. Then the three
// servers start again from their data dirs. Through it all the callers'
// error rate stays what it was (DNS direct only while a server runs),
// Envoy keeps routing, no instance is removed (the CLI-leased ones
// included, their `cairn renew` failing the while) and no view goes
// backwards.
func TestControlPlaneOff(t *testing.T) {
	if _, err := integration.EnvoyBinary(); err != nil {
		integration.Missing(t, "the control-plane outage (its Envoy callers)", err.Error())
	}
	cfg := SizeConfig()
	per, steady := offShortCallers, offShortSteady
	if Full() {
		per, steady = offFullCallers, offFullSteady
	}
	outage := offLength(t)
	cfg.Callers = max(cfg.Callers, per*len(offKinds)+len(Zones()))
	res := NewResult("control-plane-off", fmt.Sprintf("Control plane off for %s under steady traffic: the store down, then every server (experiment 1)", outage))
	r := StartRegion(t, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), outage+20*time.Minute)
	defer cancel()
	res.Note("%s", r.StartTimes)

	httpSvc, grpcSvc := r.CalledServices()
	svcOf := ServiceOf(httpSvc, grpcSvc)
	if err := r.WaitHealthy(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	leader, err := r.Cluster.WaitLeader(30 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	// The survivor of the first phase is a follower; the DNS-direct
	// callers ask it (from their own zones' subnets), as stubs whose
	// first nameserver it is.
	var survivor *integration.Node
	for _, n := range r.Nodes() {
		if n != leader && survivor == nil {
			survivor = n
		}
	}
	survZone := Zones()[survivor.Index-1]
	pop := StartPopulation(t, r, PopulationConfig{Kinds: offKinds, Per: per, Rate: offRate, Service: svcOf,
		DNSServer: func(string) string { return survivor.DNSAddr }})
	w := startOffWatch(t, r, pop, EnvoyCluster(httpSvc))

	// Steady traffic: every caller has had answers, then steady's worth
	// of requests, nearly all answered.
	steadyFrom, err := pop.WaitSteady(offRate, steady, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	w.baseline()

	// Phase 1: the store down. The leader and the other follower are
	// killed; the survivor has no quorum.
	tStore := time.Now()
	var killed []*integration.Node
	for _, n := range r.Nodes() {
		if n != survivor {
			if err := n.Kill(); err != nil {
				t.Fatal(err)
			}
			killed = append(killed, n)
		}
	}
	t.Logf("store down: %s and %s killed, %s (zone %s) survives", killed[0].ID, killed[1].ID, survivor.ID, survZone)
	sp := &survivorProbe{node: survivor, name: httpSvc.Name + "." + Namespace + ".svc.cairn.internal.", want: addrSet(r.InstancesOf(httpSvc.Name)),
		envoy: pop.Envoys[survZone], from: tStore}
	tOff := tStore.Add(outage / 2)
	if err := holdUntil(ctx, tOff, 500*time.Millisecond, func() { sp.sample(ctx) }); err != nil {
		t.Fatal(err)
	}

	// Phase 2: every server off. In its middle, the agent of zone a is
	// killed and started again.
	tOff = time.Now()
	if err := survivor.Stop(); err != nil {
		t.Errorf("stopping the survivor: %v", err)
	}
	t.Logf("control plane off: %s stopped too", survivor.ID)
	tEnd := tStore.Add(outage)
	if err := holdUntil(ctx, tOff.Add(tEnd.Sub(tOff)/2), time.Second, nil); err != nil {
		t.Fatal(err)
	}
	ar := restartAgent(ctx, t, r.Agent(Zones()[0]), sp.name, sp.want)
	if err := holdUntil(ctx, tEnd, time.Second, nil); err != nil {
		t.Fatal(err)
	}

	// The servers come back, from their data dirs.
	// The first one started is alone, without quorum: it answers from
	// the table it kept on disk (SPEC §7).
	tBack := time.Now()
	var alone aloneAnswer
	for i, n := range r.Nodes() {
		if err := n.Restart(); err != nil {
			t.Fatalf("restarting %s: %v", n.ID, err)
		}
		if i == 0 {
			alone = aloneAnswer{id: n.ID, want: sp.want}
			alone.addrs, alone.edes, alone.rcode, alone.err = askAddrs(ctx, n.DNSAddr, sp.name, time.Second)
		}
	}
	rc := recoverRegion(ctx, t, r, pop, tBack)
	tRecovered := time.Now()
	// Traffic after the recovery, as long as the steady traffic before.
	if err := holdUntil(ctx, tRecovered.Add(steady), time.Second, nil); err != nil {
		t.Fatal(err)
	}
	end := time.Now()
	pop.Stop()
	w.stop()
	recs := pop.Snap()

	ph := offPhases{start: pop.Start, steady: steadyFrom, store: tStore, off: tOff, agent: ar.at, back: tBack, recovered: tRecovered, end: end}
	offErrorFigures(res, recs, ph)
	sp.figures(res)
	ar.figures(res)
	alone.figure(res)
	rc.figures(ctx, t, res, r, tStore)
	w.figures(res, recs, ph, grpcSvc)
	res.Note("outage %s: the store down (%s and %s killed -9, %s of zone %s without quorum) for %s, then every server off (%s stopped) for %s; the servers started again from their data dirs",
		outage, killed[0].ID, killed[1].ID, survivor.ID, survZone, tOff.Sub(tStore).Round(time.Second), survivor.ID, tBack.Sub(tOff).Round(time.Second))
	res.Note("callers: %d per population at %d req/s; DNS callers ask for A records of %s (dns_ttl 5 s) and call GET /, the DNS-direct ones all of %s (from their zones' subnets), the DNS-agent ones their zone's agent; grpc-xds callers are grpc-go channels to xds:///%s.%s from their zone's server; envoy callers send through their zone's Envoy (ADS from its zone's server, routing to %s)",
		per, offRate, httpSvc.Key(), survivor.ID, grpcSvc.Name, Namespace, EnvoyCluster(httpSvc))
	res.Note("a DNS-direct caller asks an authoritative server: with every server off nothing can answer it, so its error rate is judged while one runs (before, during the store's outage, after), not while none does")
	n, last := r.RenewFailures()
	res.Note("cairn renew of the %d CLI-leased instances: %d runs failed in all, the last: %v", len(r.InstancesOf("leased")), n, last)
	res.Report(t)
}
