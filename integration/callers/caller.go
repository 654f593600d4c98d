package callers

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// Limits of a caller's Config.
const (
	MaxRate = 1000.0
	// MinRate is one request a minute: slower, a caller says nothing
	// within a scenario (and its ticker's period would overflow).
	MinRate            = 1.0 / 60
	DefaultTimeout     = time.Second
	DefaultMaxRecorded = 200_000
	maxErrLen          = 120
)

// Config is what every caller shares.
type Config struct {
	// Name names the caller in its record. Required.
	Name string
	// Rate is the requests a second it sends, evenly spaced: at least
	// MinRate and at most MaxRate.
	Rate float64
	// Timeout bounds each request, resolution included; past it the
	// request is a Timeout. Defaults to DefaultTimeout.
	Timeout time.Duration
	// MaxInFlight bounds the requests waiting for an answer; a send due
	// while that many wait is skipped and counted. Defaults to the
	// requests of one Timeout at Rate, plus one.
	MaxInFlight int
	// MaxRecorded bounds the requests recorded; later ones are counted,
	// not kept. Defaults to DefaultMaxRecorded.
	MaxRecorded int
	// Now is the clock; defaults to time.Now.
	Now func() time.Time
	// SourceFor, if set, is the local address a request to the
	// instance at dst leaves from; the zero Addr leaves it to the
	// default (a DNS caller's Source, or the system's choice). The
	// scenarios give a caller's requests to a namespaced zone a source
	// of their own, which a partition of the probers lets through.
	SourceFor func(dst netip.Addr) netip.Addr
}

func (c *Config) setDefaults() error {
	switch {
	case c.Name == "":
		return errors.New("callers: Config.Name is required")
	case !(c.Rate >= MinRate && c.Rate <= MaxRate):
		return fmt.Errorf("callers: Config.Rate must be at least %g (one a minute) and at most %g requests a second, got %g", MinRate, MaxRate, c.Rate)
	case c.Timeout < 0, c.MaxInFlight < 0, c.MaxRecorded < 0:
		return errors.New("callers: Config.Timeout, MaxInFlight and MaxRecorded must not be negative")
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = int(math.Ceil(c.Rate*c.Timeout.Seconds())) + 1
	}
	if c.MaxRecorded == 0 {
		c.MaxRecorded = DefaultMaxRecorded
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return nil
}

// attempt is what one send learnt: the instance that answered and the
// address it went to, as far as the caller knows them.
type attempt struct {
	instance, addr string
	err            error
}

// Caller sends requests at its rate and records them.
type Caller struct {
	cfg   Config
	kind  Kind
	send  func(ctx context.Context) attempt
	close func()
	// watch, if set, runs beside the sends until Run's ctx is done:
	// what records the views of a caller that does not resolve.
	watch func(ctx context.Context)
	// start, if set, makes what the sends need when Run starts (a
	// gRPC caller's channel): nothing is held before Run.
	start func() error
	rec   recorder
}

func newCaller(cfg Config, kind Kind, send func(context.Context) attempt, closeFn func()) (*Caller, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	if closeFn == nil {
		closeFn = func() {}
	}
	c := &Caller{cfg: cfg, kind: kind, send: send, close: closeFn}
	c.rec.max = cfg.MaxRecorded
	c.rec.rec.Caller, c.rec.rec.Kind = cfg.Name, kind
	return c, nil
}

// Name returns the caller's name.
func (c *Caller) Name() string { return c.cfg.Name }

// Kind returns the caller's population.
func (c *Caller) Kind() Kind { return c.kind }

// Snapshot returns what the caller recorded so far. It is cheap to poll:
// the requests and views are shared with the caller (append-only, the
// copy capped at their length), only the per-second counts are copied.
// The elements of Requests and Views must not be modified.
func (c *Caller) Snapshot() Record { return c.rec.snapshot() }

// Run sends requests until ctx is done, then waits for those in flight
// and releases the caller's connections. A request cut short by ctx is
// not recorded: it says nothing about the service. Run returns an error
// only when the caller cannot start (a gRPC caller's channel); it may be
// called once.
func (c *Caller) Run(ctx context.Context) error {
	defer c.close()
	if c.start != nil {
		if err := c.start(); err != nil {
			return err
		}
	}
	every := time.Duration(float64(time.Second) / c.cfg.Rate)
	tk := time.NewTicker(every)
	defer tk.Stop()
	sem := make(chan struct{}, c.cfg.MaxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	if c.watch != nil {
		wg.Add(1)
		go func() { defer wg.Done(); c.watch(ctx) }()
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tk.C:
		}
		select {
		case sem <- struct{}{}:
		default:
			c.rec.skip(c.cfg.Now())
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			c.once(ctx)
		}()
	}
}

// once sends one request and records it.
func (c *Caller) once(ctx context.Context) {
	start := c.cfg.Now()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	a := c.send(rctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	q := Request{At: start, Instance: a.instance, Addr: a.addr, Latency: c.cfg.Now().Sub(start)}
	switch {
	case a.err == nil:
		q.Result = Success
	case isTimeout(a.err) || q.Latency >= c.cfg.Timeout:
		q.Result, q.Err = Timeout, "timeout"
	default:
		q.Result, q.Err = Failure, short(a.err)
	}
	c.rec.add(q)
}

// isTimeout reports whether err is a deadline passing, as the standard
// library, net and gRPC say it.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout()) || grpcstatus.Code(err) == codes.DeadlineExceeded
}

func short(err error) string {
	s := err.Error()
	if len(s) > maxErrLen {
		s = s[:maxErrLen]
	}
	return s
}
