package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// FlipResult is what flip prints when it is done. bench/dns/run.sh reads
// it with awk, so every field stays at the top level.
type FlipResult struct {
	Style          string  `json:"style"`
	Pct            int     `json:"pct"`
	Interval       float64 `json:"interval_s"`
	Instances      int     `json:"instances"`
	Ticks          int     `json:"ticks"`    // flip ticks completed after the setup
	Overruns       int     `json:"overruns"` // ticks that started late: a round went by without its batch
	Reports        int64   `json:"reports"`  // after the setup
	Flips          int64   `json:"flips"`    // reports that changed the readiness sent before
	Failed         int64   `json:"failed"`
	FirstError     string  `json:"first_error,omitempty"`
	ReportsPerSec  float64 `json:"reports_per_s"`
	FlipsPerSec    float64 `json:"flips_per_s"`
	SetupSeconds   float64 `json:"setup_s"`             // setup reports until each watched service published half its instances
	Observed       int     `json:"observed_instances"`  // instances whose published eligibility was read every tick
	ObservedChange float64 `json:"observed_change_pct"` // of those, the share whose eligibility changed between two reads, percent
	// ObservedChangePerSec is the share of the observed instances whose
	// published eligibility changed per second, percent: the churn cairn
	// really served, comparable to -pct whatever the tick.
	ObservedChangePerSec float64 `json:"observed_change_per_s_pct"`
	Eligible             int     `json:"observed_eligible"` // of those, eligible at the last read
	Quarantined          int     `json:"observed_quarantined"`
	// DeferredMax is the most observed instances flagged
	// withdrawal_deferred at one read: published although withdrawn,
	// because the shrink cap's budget was spent.
	DeferredMax int     `json:"observed_deferred_max"`
	Seconds     float64 `json:"seconds"` // flipping, after the setup

	// Steady style only: whether the ticks were timed from cairn's own
	// evaluation times, the spread of those times around the estimated
	// round starts (how late a round can start), the batches that ended
	// after the next round had started (their reports may straddle two
	// rounds), the longest batch, and the withdrawals the plan could not
	// place for want of a withdrawn endpoint to bring back.
	PhaseLocked bool    `json:"phase_locked"`
	RoundSpread float64 `json:"round_spread_ms"`
	LateBatches int     `json:"late_batches"`
	BatchMax    float64 `json:"batch_max_ms"`
	Clamped     int64   `json:"clamped"`

	// The DNS check (-dns): answers sampled, failed queries, the fewest
	// and most A records in an answer, and the share of answers whose
	// count differed from the half of its service the setup left
	// eligible, percent. -1 when there was no check.
	DNSSamples int     `json:"dns_samples"`
	DNSErrors  int     `json:"dns_errors"`
	DNSMin     int     `json:"dns_a_min"`
	DNSMax     int     `json:"dns_a_max"`
	DNSOffPct  float64 `json:"dns_off_pct"`
}

// endpoint is what flip reads of GET /v1/services/{ns}/{svc}/endpoints.
type endpoint struct {
	ID        string    `json:"instance_id"`
	Eligible  bool      `json:"eligible"`
	Verdict   string    `json:"verdict"`
	Flags     []string  `json:"flags"`
	VerdictAt time.Time `json:"verdict_at"`
}

// group is one service's instances: insts[lo:hi], in file order.
type group struct{ lo, hi int }

func (g group) n() int { return g.hi - g.lo }

// groupServices splits insts, in file order, into services. Every service
// needs an even number of instances, at least two, so that half of it can
// be eligible.
func groupServices(insts []Instance) ([]group, error) {
	var gs []group
	for lo := 0; lo < len(insts); {
		hi := lo
		for hi < len(insts) && insts[hi].Namespace == insts[lo].Namespace && insts[hi].Service == insts[lo].Service {
			hi++
		}
		if n := hi - lo; n%2 != 0 || n < 2 {
			return nil, fmt.Errorf("flip: %s/%s has %d instances: want an even number, at least 2", insts[lo].Namespace, insts[lo].Service, n)
		}
		gs = append(gs, group{lo, hi})
		lo = hi
	}
	if len(gs) == 0 {
		return nil, errors.New("flip: no instances")
	}
	return gs, nil
}

// report is one self-report to send: instance insts[i], its readiness,
// and whether that changes what was sent before.
type report struct {
	i     int
	ready bool
	flip  bool
}

// sender sends batches of self-reports and counts them.
type sender struct {
	c     *client
	insts []Instance
	conns int

	reports, flips, failed atomic.Int64
	firstErr               atomic.Value // string
}

// send sends reps on the sender's connections and returns which were
// accepted. A failed report is counted, not fatal: the run goes on, and
// the result says how many failed.
func (s *sender) send(ctx context.Context, reps []report) []bool {
	ok := make([]bool, len(reps))
	parallel(ctx, len(reps), s.conns, func(ctx context.Context, j int) error {
		r := reps[j]
		body := map[string]any{"incarnation": s.insts[r.i].Incarnation, "ready": r.ready}
		if err := s.c.do(ctx, http.MethodPost, s.insts[r.i].path("/report"), body, nil); err != nil {
			if ctx.Err() == nil {
				s.failed.Add(1)
				s.firstErr.CompareAndSwap(nil, err.Error())
			}
			return nil
		}
		s.reports.Add(1)
		if r.flip {
			s.flips.Add(1)
		}
		ok[j] = true
		return nil
	})
	return ok
}

func (s *sender) firstError() string {
	e, _ := s.firstErr.Load().(string)
	return e
}

// observer reads the published endpoints of a few services over the API.
// It is used by one goroutine, flip's.
type observer struct {
	c       *client
	watched []Instance // one instance of each watched service
	phase   *phaseLock // fed every verdict time read; nil: not kept

	prev                              map[string]bool // published eligibility at the last read, by instance
	changes, reads                    int
	eligible, quarantined, deferredHi int
}

func newObserver(c *client, insts []Instance, services int, phase *phaseLock) *observer {
	o := &observer{c: c, phase: phase, prev: map[string]bool{}}
	seen := map[[2]string]bool{}
	for _, in := range insts {
		k := [2]string{in.Namespace, in.Service}
		if !seen[k] && len(o.watched) < services {
			seen[k] = true
			o.watched = append(o.watched, in)
		}
	}
	return o
}

// once reads every watched service. It returns whether each of them
// publishes exactly half its endpoints, with a verdict for every one and
// no withdrawal deferred: the state the setup asks for, decided by the
// evaluator (a sum over the services could reach half while some are not
// evaluated yet).
func (o *observer) once(ctx context.Context) (settled bool) {
	eligible, deferred, quarantined := 0, 0, 0
	settled = true
	for _, w := range o.watched {
		var eps []endpoint
		path := "/v1/services/" + url.PathEscape(w.Namespace) + "/" + url.PathEscape(w.Service) + "/endpoints"
		if err := o.c.do(ctx, http.MethodGet, path, nil, &eps); err != nil {
			settled = false
			continue
		}
		svcEligible := 0
		for _, e := range eps {
			key := w.Namespace + "/" + w.Service + "/" + e.ID
			if old, ok := o.prev[key]; ok {
				o.reads++
				if old != e.Eligible {
					o.changes++
				}
			}
			o.prev[key] = e.Eligible
			if e.Eligible {
				svcEligible++
			}
			if e.Verdict == "quarantined" {
				quarantined++
			}
			if slices.Contains(e.Flags, "withdrawal_deferred") {
				deferred++
				settled = false
			}
			if e.VerdictAt.IsZero() {
				settled = false // not evaluated, or not yet published as committed
			} else if o.phase != nil {
				o.phase.add(e.VerdictAt)
			}
		}
		eligible += svcEligible
		if len(eps) == 0 || 2*svcEligible != len(eps) {
			settled = false
		}
	}
	o.eligible, o.quarantined = eligible, quarantined
	o.deferredHi = max(o.deferredHi, deferred)
	return settled
}

// settledServices returns how many of the groups' services publish
// exactly half their instances (GET /v1/services counts the published
// eligible ones), and an error when the list cannot be read. A withdrawal
// the shrink cap defers keeps its instance published, so this also waits
// for every deferred withdrawal of the setup.
func settledServices(ctx context.Context, c *client, insts []Instance, groups []group) (int, error) {
	var list []struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
		Instances int    `json:"instances"`
		Eligible  int    `json:"eligible"`
	}
	if err := c.do(ctx, http.MethodGet, "/v1/services", nil, &list); err != nil {
		return 0, err
	}
	type counts struct{ instances, eligible int }
	by := make(map[[2]string]counts, len(list))
	for _, l := range list {
		by[[2]string{l.Namespace, l.Name}] = counts{l.Instances, l.Eligible}
	}
	n := 0
	for _, g := range groups {
		in := insts[g.lo]
		if got := by[[2]string{in.Namespace, in.Service}]; got.instances == g.n() && 2*got.eligible == g.n() {
			n++
		}
	}
	return n, nil
}

// resetCounts forgets the changes counted so far (those of the setup).
func (o *observer) resetCounts() { o.changes, o.reads, o.deferredHi = 0, 0, 0 }

// dnsSampler asks cairn for the A records of a few service names every
// period and counts the records in each answer: the check that answers
// kept their size while health churned. Its counts are read after run
// has returned.
type dnsSampler struct {
	addr  string
	names []string
	want  []int // A records each name should have: half its service

	samples, errors, off int
	min, max             int
}

func (s *dnsSampler) run(ctx context.Context, period time.Duration) {
	c := &dns.Client{Net: "udp", Timeout: 500 * time.Millisecond}
	s.min = -1
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		for k, name := range s.names {
			m := new(dns.Msg)
			m.SetQuestion(name, dns.TypeA)
			m.RecursionDesired = false
			r, _, err := c.ExchangeContext(ctx, m, s.addr)
			if ctx.Err() != nil {
				return
			}
			if err != nil || r.Rcode != dns.RcodeSuccess {
				s.errors++
				continue
			}
			a := 0
			for _, rr := range r.Answer {
				if _, ok := rr.(*dns.A); ok {
					a++
				}
			}
			s.samples++
			if a != s.want[k] {
				s.off++
			}
			if s.min < 0 || a < s.min {
				s.min = a
			}
			s.max = max(s.max, a)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func flip(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("flip", flag.ExitOnError)
	addr := fs.String("addr", "http://127.0.0.1:8480", "cairn HTTP address")
	token := fs.String("token", os.Getenv("CAIRN_TOKEN"), "bearer token (ACLs on)")
	in := fs.String("f", "", "instances.jsonl from drive load")
	style := fs.String("style", "steady", "steady: constant eligible count, batches timed to cairn's rounds; today: the original driver")
	pct := fs.Int("pct", 50, "percent of the endpoints whose health changes each second (today: of the pairs swapped each tick)")
	conns := fs.Int("c", 16, "concurrent requests")
	hold := fs.Duration("hold", -1, "after the setup, flip nothing until this long after it began (default: 11s steady, 0 today): "+
		"a service's first shrink window (10s) opened on an empty view allows one withdrawal, so flips started in it pile up deferred")
	interval := fs.Duration("interval", 0, "tick; for -style steady it must be cairn's --eval-interval (default: 500ms steady, 1s today)")
	offset := fs.Duration("offset", 0, "steady: send each batch this long after a round starts (default: a quarter of -interval)")
	duration := fs.Duration("duration", 30*time.Second, "stop after this long, setup included (at most 1h)")
	observe := fs.Int("observe", 4, "services whose published endpoints are read every tick")
	dnsAddr := fs.String("dns", "", "cairn's DNS address: count the observed services' A records every 100ms (empty: no check)")
	domain := fs.String("domain", "cairn.internal.", "the zone apex cairn serves (for -dns)")
	readyFile := fs.String("ready-file", "", "written once the setup state is published, before the first flip")
	fs.Parse(args)
	if *in == "" {
		return errors.New("flip: -f is required")
	}
	if *interval == 0 {
		*interval = time.Second
		if *style == "steady" {
			*interval = 500 * time.Millisecond
		}
	}
	if *offset == 0 {
		*offset = *interval / 4
	}
	switch {
	case *style != "steady" && *style != "today":
		return fmt.Errorf("flip: -style %q: want steady or today", *style)
	case *pct < 0 || *pct > 100 || *duration <= 0 || *duration > time.Hour || *interval <= 0:
		return errors.New("flip: want 0 <= -pct <= 100, 0 < -duration <= 1h, -interval > 0")
	case *offset < 0 || *offset >= *interval:
		return errors.New("flip: want 0 <= -offset < -interval")
	case *domain == "" || (*domain)[len(*domain)-1] != '.':
		return fmt.Errorf("flip: -domain %q: want a fully qualified name", *domain)
	}
	insts, err := readLines[Instance](*in)
	if err != nil {
		return err
	}
	groups, err := groupServices(insts)
	if err != nil {
		return err
	}
	var pl *plan
	if *style == "steady" {
		// Checked before the setup, so that a rate the schedule cannot
		// keep fails at once rather than after a minute of setup.
		if pl, err = newPlan(groups, *pct, *interval); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	c := newClient(*addr, *token, *conns)
	res := FlipResult{Style: *style, Pct: *pct, Interval: interval.Seconds(), Instances: len(insts),
		DNSMin: -1, DNSMax: -1, DNSOffPct: -1}
	phase := &phaseLock{interval: *interval}
	obs := newObserver(c, insts, *observe, phase)
	s := &sender{c: c, insts: insts, conns: *conns}

	// Setup: the first half of every service ready, the second not; then
	// wait (bounded by ctx) until every service publishes exactly half its
	// instances, and the watched ones have verdicts for all (their times
	// are what the steady style times its batches from).
	ready := make([]bool, len(insts))
	for _, g := range groups {
		for i := g.lo; i < g.lo+g.n()/2; i++ {
			ready[i] = true
		}
	}
	setupStart := time.Now()
	reps := make([]report, len(insts))
	for i := range insts {
		reps[i] = report{i: i, ready: ready[i]}
	}
	s.send(ctx, reps)
	settled := 0
	for ctx.Err() == nil {
		if obs.once(ctx) {
			var err error
			if settled, err = settledServices(ctx, c, insts, groups); err == nil && settled == len(groups) {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if ctx.Err() != nil {
		msg := ""
		if e := s.firstError(); e != "" {
			msg = "; first error: " + e
		}
		return fmt.Errorf("flip: setup: the services never all published half their instances (at the last read: %d of %d services; of the watched, %d of %d instances eligible, at most %d deferred; %d reports failed%s)",
			settled, len(groups), obs.eligible, len(obs.prev), obs.deferredHi, s.failed.Load(), msg)
	}
	if *hold < 0 {
		*hold = 0
		if *style == "steady" {
			*hold = 11 * time.Second
		}
	}
	// Wait out the services' first shrink window, then see that the
	// setup state still holds (bounded by ctx, as above).
	for ctx.Err() == nil && time.Since(setupStart) < *hold {
		select {
		case <-ctx.Done():
		case <-time.After(time.Until(setupStart.Add(*hold))):
		}
	}
	for ctx.Err() == nil {
		if obs.once(ctx) {
			if n, err := settledServices(ctx, c, insts, groups); err == nil && n == len(groups) {
				break
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if ctx.Err() != nil {
		return fmt.Errorf("flip: setup: the services did not hold half their instances published after the first shrink window")
	}
	res.SetupSeconds = time.Since(setupStart).Seconds()
	s.reports.Store(0)
	s.flips.Store(0)
	obs.resetCounts()
	if *readyFile != "" {
		if err := os.WriteFile(*readyFile, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	}

	// The DNS check runs beside the churn, on its own goroutine, until
	// the churn ends; flip waits for it before reading its counts.
	var sampler *dnsSampler
	var wg sync.WaitGroup
	sampleCtx, stopSampling := context.WithCancel(ctx)
	defer stopSampling()
	if *dnsAddr != "" {
		sampler = &dnsSampler{addr: *dnsAddr}
		for _, w := range obs.watched {
			g := groups[slices.IndexFunc(groups, func(g group) bool {
				return insts[g.lo].Namespace == w.Namespace && insts[g.lo].Service == w.Service
			})]
			sampler.names = append(sampler.names, w.Service+"."+w.Namespace+".svc."+*domain)
			sampler.want = append(sampler.want, g.n()/2)
		}
		wg.Go(func() { sampler.run(sampleCtx, 100*time.Millisecond) })
	}

	start := time.Now()
	if *style == "steady" {
		runSteady(ctx, s, pl, obs, phase, *interval, *offset, &res)
	} else {
		runToday(ctx, s, groups, ready, *pct, *interval, obs, &res)
	}
	stopSampling()
	wg.Wait()

	el := time.Since(start).Seconds()
	res.Reports, res.Flips, res.Failed = s.reports.Load(), s.flips.Load(), s.failed.Load()
	res.FirstError = s.firstError()
	res.ReportsPerSec, res.FlipsPerSec, res.Seconds = float64(res.Reports)/el, float64(res.Flips)/el, el
	res.Observed = len(obs.prev)
	if obs.reads > 0 {
		res.ObservedChange = 100 * float64(obs.changes) / float64(obs.reads)
	}
	if res.Observed > 0 && el > 0 {
		res.ObservedChangePerSec = 100 * float64(obs.changes) / float64(res.Observed) / el
	}
	res.Eligible, res.Quarantined, res.DeferredMax = obs.eligible, obs.quarantined, obs.deferredHi
	if sampler != nil {
		res.DNSSamples, res.DNSErrors = sampler.samples, sampler.errors
		if sampler.samples > 0 {
			res.DNSMin, res.DNSMax = sampler.min, sampler.max
			res.DNSOffPct = 100 * float64(sampler.off) / float64(sampler.samples)
		}
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}
