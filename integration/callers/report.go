package callers

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"strconv"
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
	// (a failed resolution, an address no endpoint has).
	Unattributed int
	Errors       int
	LastErr      string
}

// Reporter posts a caller's per-endpoint success, failure and timeout
// counts to POST /v1/outcomes every Interval, for the requests recorded
// since its last report. Callers know addresses, the API wants
// (instance, incarnation): it maps each request to one from the
// service's endpoints (GET /v1/services/NS/SVC/endpoints), read again
// before each report, by the instance that answered or else by the
// address tried (every address of the endpoint with every port it
// registered).
type Reporter struct {
	cfg ReporterConfig

	mu    sync.Mutex
	stats ReporterStats
}

// NewReporter validates cfg and returns its Reporter.
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
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultReportInterval
	}
	return &Reporter{cfg: cfg, stats: ReporterStats{Discarded: map[string]int{}}}, nil
}

// Stats returns what became of the reports so far.
func (r *Reporter) Stats() ReporterStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Discarded = maps.Clone(r.stats.Discarded)
	return s
}

// Run reports every Interval until ctx is done. It returns nil.
func (r *Reporter) Run(ctx context.Context) error {
	tk := time.NewTicker(r.cfg.Interval)
	defer tk.Stop()
	cursor := 0
	var dir directory
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
		var reqs []Request
		reqs, cursor = r.cfg.Caller.rec.since(cursor)
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Interval)
		err := r.report(rctx, &dir, reqs)
		cancel()
		if err != nil && ctx.Err() == nil {
			r.mu.Lock()
			r.stats.Errors++
			r.stats.LastErr = err.Error()
			r.mu.Unlock()
		}
	}
}

// report sends one window's counts.
func (r *Reporter) report(ctx context.Context, dir *directory, reqs []Request) error {
	if eps, err := r.cfg.API.Endpoints(ctx, r.cfg.Namespace, r.cfg.Service); err == nil {
		*dir = newDirectory(eps)
	} else if dir.byID == nil {
		return fmt.Errorf("reading the endpoints of %s/%s: %w", r.cfg.Namespace, r.cfg.Service, err)
	}
	rep, unattributed := dir.outcomes(r.cfg.Namespace, r.cfg.Service, reqs)
	r.mu.Lock()
	r.stats.Unattributed += unattributed
	r.mu.Unlock()
	if len(rep.Endpoints) == 0 {
		return nil
	}
	reply, err := r.cfg.API.Outcomes(ctx, rep)
	if err != nil {
		return fmt.Errorf("POST /v1/outcomes: %w", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stats.Reports++
	r.stats.Accepted += reply.Accepted
	for k, v := range reply.Discarded {
		r.stats.Discarded[k] += v
	}
	return nil
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

// outcomes counts reqs per endpoint, and the requests it could not
// attribute.
func (d directory) outcomes(ns, svc string, reqs []Request) (wire.OutcomeReport, int) {
	counts := map[string]*wire.EndpointOutcome{}
	var order []string
	unattributed := 0
	for _, q := range reqs {
		id := q.Instance
		if _, ok := d.byID[id]; !ok {
			id = d.byAddr[q.Addr]
		}
		inc, ok := d.byID[id]
		if !ok {
			unattributed++
			continue
		}
		e := counts[id]
		if e == nil {
			e = &wire.EndpointOutcome{Namespace: ns, Service: svc, Instance: id, Incarnation: inc}
			counts[id] = e
			order = append(order, id)
		}
		switch q.Result {
		case Success:
			e.Success++
		case Failure:
			e.Failure++
		case Timeout:
			e.Timeout++
		}
	}
	var rep wire.OutcomeReport
	for _, id := range order {
		rep.Endpoints = append(rep.Endpoints, *counts[id])
	}
	if len(rep.Endpoints) > wire.MaxOutcomeEndpoints {
		rep.Endpoints = rep.Endpoints[:wire.MaxOutcomeEndpoints]
	}
	return rep, unattributed
}
