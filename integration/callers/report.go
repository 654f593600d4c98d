package callers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/wire"
)

// DefaultReportInterval is how often a Reporter reports.
const DefaultReportInterval = 2 * time.Second

// ReporterConfig is a caller's outcome reporting.
type ReporterConfig struct {
	// Caller is the caller whose requests are reported. Required.
	Caller *Caller
	// API is a client of a cairn server with the caller's own token: the
	// token is the caller's identity, one voice in the outcome quorum
	// (with ACLs off, every caller is the one "anonymous"). Required.
	API *client.Client
	// Namespace and Service are the service the caller calls. Required.
	Namespace, Service string
	// Interval is how often it reports; defaults to
	// DefaultReportInterval.
	Interval time.Duration
}

// ReporterStats says what became of a Reporter's reports.
type ReporterStats struct {
	Reports  int
	Accepted int
	// Discarded sums the server's discards by reason.
	Discarded map[string]int
	// Unattributed counts requests that named no endpoint cairn knows
	// (a failed resolution, an address no endpoint has, an answer from
	// an instance id cairn does not list).
	Unattributed int
	// Ambiguous counts requests not reported because the endpoint they
	// map to changed (re-registered, removed, its address reused) between
	// the endpoint lists read before and after they were sent: they
	// might be charged to the wrong incarnation.
	Ambiguous int
	Errors    int
	LastErr   string
	// Delivered are the last keptTimings reports the server acknowledged,
	// oldest first: the lateness of the caller's own reporting, which a
	// budget for what the server does with reports must not charge to
	// the server.
	Delivered []ReportTiming
}

// ReportTiming is one acknowledged report: when its round was due (the
// Reporter's start plus a whole number of intervals) and when the
// server's acknowledgement came back.
type ReportTiming struct {
	Due, Acked time.Time
}

// Late is how long after it was due the report was acknowledged.
func (rt ReportTiming) Late() time.Duration { return rt.Acked.Sub(rt.Due) }

// keptTimings bounds ReporterStats.Delivered: at the default interval,
// the last 17 minutes.
const keptTimings = 512

// Reporter posts a caller's per-endpoint success, failure and timeout
// counts to POST /v1/outcomes every Interval, for the requests completed
// since its last report. It drains the caller's outcome counters, which
// count every request whether the record kept it or not (MaxRecorded),
// so a caller reports for as long as it runs.
//
// Callers know addresses, the API wants (instance, incarnation): the
// Reporter reads the service's endpoints (GET
// /v1/services/NS/SVC/endpoints) before each report, and maps a request
// by the instance that answered (an id cairn does not list is
// unattributed, not guessed from the address) or else by the address
// tried (every address of the endpoint with every port it registered).
// A request is attributed only when the last list read before it was
// sent and the first read after it map it to the same (instance,
// incarnation) (at a resolution of 100 ms): otherwise it is counted as
// Ambiguous and not reported, so that no request is ever charged to an
// incarnation that was not current when it was sent. Requests sent
// after the newest read wait for the next one.
type Reporter struct {
	cfg ReporterConfig

	mu    sync.Mutex
	stats ReporterStats

	// Run's state.
	reads []endpointRead
	held  map[outcomeKey]*outcomeCount
}

// endpointRead is one read of the endpoints: the list, and when the
// read was asked (start) and answered (end).
type endpointRead struct {
	start, end time.Time
	dir        directory
}

// keptReads bounds the endpoint lists a Reporter keeps: enough to span
// the requests still in flight at a report.
const keptReads = 8

// NewReporter validates cfg and returns its Reporter. A caller has at
// most one Reporter; a blind caller (Envoy's) has none: its failures
// name no instance, so it would report its successes only (Envoy
// reports over LRS by itself).
func NewReporter(cfg ReporterConfig) (*Reporter, error) {
	switch {
	case cfg.Caller == nil:
		return nil, errors.New("callers: ReporterConfig.Caller is required")
	case cfg.API == nil:
		return nil, errors.New("callers: ReporterConfig.API is required")
	case cfg.Namespace == "" || cfg.Service == "":
		return nil, errors.New("callers: ReporterConfig.Namespace and Service are required")
	case cfg.Interval < 0:
		return nil, errors.New("callers: ReporterConfig.Interval must not be negative")
	case cfg.Caller.rec.rec.Blind:
		return nil, fmt.Errorf("callers: ReporterConfig.Caller %s is blind (kind %s): its failures name no instance, so it would report only successes; Envoy reports over LRS itself", cfg.Caller.Name(), cfg.Caller.Kind())
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultReportInterval
	}
	if !cfg.Caller.rec.startTracking() {
		return nil, fmt.Errorf("callers: ReporterConfig.Caller %s has a Reporter already", cfg.Caller.Name())
	}
	return &Reporter{cfg: cfg, stats: ReporterStats{Discarded: map[string]int{}}, held: map[outcomeKey]*outcomeCount{}}, nil
}

// Stats returns what became of the reports so far.
func (r *Reporter) Stats() ReporterStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Discarded = maps.Clone(r.stats.Discarded)
	s.Delivered = slices.Clone(r.stats.Delivered)
	return s
}

// Run reports every Interval until ctx is done. It returns nil; it may
// be called once.
func (r *Reporter) Run(ctx context.Context) error {
	start := r.cfg.Caller.cfg.Now()
	tk := time.NewTicker(r.cfg.Interval)
	defer tk.Stop()
	r.read(ctx) // the list before the first requests
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
		// The round due last: a ticker drops the ticks a slow round
		// missed.
		due := start.Add(r.cfg.Caller.cfg.Now().Sub(start).Truncate(r.cfg.Interval))
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Interval)
		err := r.round(rctx, due)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.mu.Lock()
			r.stats.Errors++
			r.stats.LastErr = err.Error()
			r.mu.Unlock()
		}
	}
}

// read reads the endpoints and keeps the list.
func (r *Reporter) read(ctx context.Context) error {
	start := r.cfg.Caller.cfg.Now()
	eps, err := r.cfg.API.Endpoints(ctx, r.cfg.Namespace, r.cfg.Service)
	if err != nil {
		return fmt.Errorf("reading the endpoints of %s/%s: %w", r.cfg.Namespace, r.cfg.Service, err)
	}
	r.reads = append(r.reads, endpointRead{start: start, end: r.cfg.Caller.cfg.Now(), dir: newDirectory(eps)})
	if n := len(r.reads); n > keptReads {
		r.reads = slices.Delete(r.reads, 0, n-keptReads)
	}
	return nil
}

// round drains the caller's counts, reads the endpoints, and reports
// what it can attribute.
func (r *Reporter) round(ctx context.Context, due time.Time) error {
	for k, c := range r.cfg.Caller.rec.drain() {
		if h := r.held[k]; h != nil {
			h.success, h.failure, h.timeout = h.success+c.success, h.failure+c.failure, h.timeout+c.timeout
		} else {
			r.held[k] = c
		}
	}
	readErr := r.read(ctx)
	stale := r.cfg.Caller.cfg.Now().Add(-keptReads * r.cfg.Interval)
	rep, a := attribute(r.cfg.Namespace, r.cfg.Service, r.held, r.reads, stale)
	r.mu.Lock()
	r.stats.Unattributed += a.unattributed
	r.stats.Ambiguous += a.ambiguous
	r.mu.Unlock()
	if len(rep.Endpoints) == 0 {
		return readErr
	}
	reply, err := r.cfg.API.Outcomes(ctx, rep)
	if err != nil {
		return fmt.Errorf("POST /v1/outcomes: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Reports++
	r.stats.Delivered = append(r.stats.Delivered, ReportTiming{Due: due, Acked: r.cfg.Caller.cfg.Now()})
	if n := len(r.stats.Delivered); n > keptTimings {
		r.stats.Delivered = slices.Delete(r.stats.Delivered, 0, n-keptTimings)
	}
	r.stats.Accepted += reply.Accepted
	for k, v := range reply.Discarded {
		r.stats.Discarded[k] += v
	}
	return readErr
}

// directory maps what a caller knows of an endpoint to the endpoint.
type directory struct {
	byID   map[string]uint64 // instance id → incarnation
	byAddr map[string]string // host:port → instance id
}

func newDirectory(eps []wire.Endpoint) directory {
	d := directory{byID: map[string]uint64{}, byAddr: map[string]string{}}
	for _, e := range eps {
		d.byID[e.InstanceID] = e.Incarnation
		for _, a := range e.Addresses {
			for _, p := range e.Ports {
				d.byAddr[net.JoinHostPort(a, strconv.Itoa(p))] = e.InstanceID
			}
		}
	}
	return d
}

// incarnation is an endpoint as the API names it.
type incarnation struct {
	id  string
	inc uint64
}

// lookup maps a request to its endpoint: by the instance that answered
// (only: an id the list lacks maps to nothing), or else by the address
// tried.
func (d directory) lookup(instance, addr string) (incarnation, bool) {
	id := instance
	if id == "" {
		id = d.byAddr[addr]
	}
	inc, ok := d.byID[id]
	return incarnation{id, inc}, ok && id != ""
}

// attribution counts what attribute could not report.
type attribution struct{ unattributed, ambiguous int }

// attribute takes from held the counts it can attribute with reads
// (oldest first) and returns them as a report: a slot is attributed when
// the last read answered before it began and the first read asked after
// it ended map it to the same incarnation. A slot no read follows yet
// stays held until stale, then it is dropped as ambiguous; one older
// than every kept read is ambiguous.
func attribute(ns, svc string, held map[outcomeKey]*outcomeCount, reads []endpointRead, stale time.Time) (wire.OutcomeReport, attribution) {
	counts := map[incarnation]*wire.EndpointOutcome{}
	var order []incarnation
	var a attribution
	for k, c := range held {
		from := time.Unix(0, k.slot*int64(outcomeSlot))
		to := from.Add(outcomeSlot)
		var before, after *endpointRead
		for i := range reads {
			if !reads[i].end.After(from) {
				before = &reads[i]
			}
			if after == nil && !reads[i].start.Before(to) {
				after = &reads[i]
			}
		}
		n := c.success + c.failure + c.timeout
		if after == nil {
			if to.Before(stale) { // no read has come for long
				delete(held, k)
				a.ambiguous += n
			}
			continue // wait for the next read
		}
		delete(held, k)
		e2, ok2 := after.dir.lookup(k.instance, k.addr)
		if before == nil {
			a.ambiguous += n
			continue
		}
		e1, ok1 := before.dir.lookup(k.instance, k.addr)
		switch {
		case !ok1 && !ok2:
			a.unattributed += n
			continue
		case !ok1 || !ok2 || e1 != e2:
			a.ambiguous += n
			continue
		}
		e := counts[e1]
		if e == nil {
			e = &wire.EndpointOutcome{Namespace: ns, Service: svc, Instance: e1.id, Incarnation: e1.inc}
			counts[e1] = e
			order = append(order, e1)
		}
		e.Success += c.success
		e.Failure += c.failure
		e.Timeout += c.timeout
	}
	slices.SortFunc(order, func(x, y incarnation) int { return strings.Compare(x.id, y.id) })
	var rep wire.OutcomeReport
	for _, id := range order {
		rep.Endpoints = append(rep.Endpoints, *counts[id])
	}
	if len(rep.Endpoints) > wire.MaxOutcomeEndpoints {
		rep.Endpoints = rep.Endpoints[:wire.MaxOutcomeEndpoints]
	}
	return rep, a
}
