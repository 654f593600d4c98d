// Command drive loads the DNS benchmark's data into a cairn server over its
// HTTP API (docs/api.md) and, for MODE=flip, flips instance health while
// dnsperf runs. bench/dns/run.sh builds and runs it; every loop is bounded
// in count or time and stops on its own.
//
//	drive load -addr URL -f registrations.jsonl -out instances.jsonl [-c 16]
//	drive flip -addr URL -f instances.jsonl -pct 50 -duration 30s [-ready-file F] [-c 16]
//
// load registers every line of registrations.jsonl (bench/dns/gen) with
// POST /v1/services/{ns}/{svc}/instances and writes the committed
// incarnations to -out. The services must have been applied first.
//
// flip first makes half of every service's instances not ready (one
// self-report each, POST .../{id}/report) and waits until cairn publishes
// that; then, once a second, it sends one report for every instance: a
// -pct share of them swap readiness with their pair (ep1 with ep5, ...), the
// rest repeat the state they have. So the API does the same work at every
// -pct, every service keeps half its endpoints eligible and its answers the
// same size, and only the number of health changes differs (SPEC §9, "DNS
// work under churn"). It also reads the endpoints of a few services each
// second (-observe) and counts the eligibility changes cairn published, so
// the output says how much churn the status table really saw. It prints one
// JSON object when done (at -duration, or on SIGTERM).
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: drive load|flip [flags]")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "load":
		err = load(ctx, os.Args[2:])
	case "flip":
		err = flip(ctx, os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want load or flip", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "drive:", err)
		os.Exit(1)
	}
}

// Registration is a line of bench/dns/gen's registrations.jsonl.
type Registration struct {
	Namespace  string `json:"namespace"`
	Service    string `json:"service"`
	InstanceID string `json:"instance_id"`
	Address    string `json:"address"`
	Port       int    `json:"port"`
	Region     string `json:"region"`
	Zone       string `json:"zone"`
}

// Instance is a line of load's output: a registered instance and the
// incarnation its mutations must carry.
type Instance struct {
	Namespace   string `json:"namespace"`
	Service     string `json:"service"`
	InstanceID  string `json:"instance_id"`
	Incarnation uint64 `json:"incarnation"`
}

func (in Instance) path(suffix string) string {
	return "/v1/services/" + url.PathEscape(in.Namespace) + "/" + url.PathEscape(in.Service) +
		"/instances/" + url.PathEscape(in.InstanceID) + suffix
}

type client struct {
	base  string
	token string
	http  *http.Client
}

func newClient(base, token string, conns int) *client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = conns
	return &client{base: base, token: token, http: &http.Client{Transport: tr, Timeout: 10 * time.Second}}
}

// do sends a JSON request and decodes a 2xx answer into out (if not nil).
func (c *client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("%s %s: decoding the answer: %w", method, path, err)
		}
	}
	return nil
}

func readLines[T any](path string) ([]T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("%s: line %d: %w", path, len(out)+1, err)
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

// parallel runs f(i) for i in [0, n) on conns workers and returns the
// first error (the others stop taking work).
func parallel(ctx context.Context, n, conns int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(conns, n) {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		})
	}
	wg.Wait()
	return context.Cause(ctx)
}

func load(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("load", flag.ExitOnError)
	addr := fs.String("addr", "http://127.0.0.1:8480", "cairn HTTP address")
	token := fs.String("token", os.Getenv("CAIRN_TOKEN"), "bearer token (ACLs on)")
	in := fs.String("f", "", "registrations.jsonl from bench/dns/gen")
	out := fs.String("out", "", "where to write the registered instances (JSON lines)")
	conns := fs.Int("c", 16, "concurrent requests")
	timeout := fs.Duration("timeout", 5*time.Minute, "give up after this long")
	fs.Parse(args)
	if *in == "" || *out == "" {
		return errors.New("load: -f and -out are required")
	}
	regs, err := readLines[Registration](*in)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c := newClient(*addr, *token, *conns)
	got := make([]Instance, len(regs))
	start := time.Now()
	err = parallel(ctx, len(regs), *conns, func(ctx context.Context, i int) error {
		r := regs[i]
		body := map[string]any{
			"instance_id": r.InstanceID, "addresses": []string{r.Address},
			"ports": map[string]int{"http": r.Port}, "region": r.Region, "zone": r.Zone,
			"lifecycle": "ready",
		}
		var rec Instance
		path := "/v1/services/" + url.PathEscape(r.Namespace) + "/" + url.PathEscape(r.Service) + "/instances"
		if err := c.do(ctx, http.MethodPost, path, body, &rec); err != nil {
			return err
		}
		got[i] = rec
		return nil
	})
	if err != nil {
		return fmt.Errorf("load: %w", err)
	}
	f, err := os.Create(*out)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, in := range got {
		enc.Encode(in)
	}
	if err := errors.Join(w.Flush(), f.Close()); err != nil {
		return fmt.Errorf("writing %q: %w", *out, err)
	}
	el := time.Since(start)
	fmt.Printf("{\"registered\":%d,\"seconds\":%.2f,\"per_second\":%.0f}\n", len(got), el.Seconds(), float64(len(got))/el.Seconds())
	return nil
}

// FlipResult is what flip prints when it is done.
type FlipResult struct {
	Pct            int     `json:"pct"`
	Instances      int     `json:"instances"`
	Ticks          int     `json:"ticks"`    // flip ticks completed after the setup
	Overruns       int     `json:"overruns"` // ticks whose reports took longer than the interval
	Reports        int64   `json:"reports"`  // after the setup
	Flips          int64   `json:"flips"`    // reports that changed the readiness sent before
	Failed         int64   `json:"failed"`
	FirstError     string  `json:"first_error,omitempty"`
	ReportsPerSec  float64 `json:"reports_per_s"`
	FlipsPerSec    float64 `json:"flips_per_s"`
	SetupSeconds   float64 `json:"setup_s"`             // setup reports until the watched services published half their instances
	Observed       int     `json:"observed_instances"`  // instances whose published eligibility was read every tick
	ObservedChange float64 `json:"observed_change_pct"` // of those, the share whose eligibility changed between two reads, percent
	Eligible       int     `json:"observed_eligible"`   // of those, eligible at the last read
	Quarantined    int     `json:"observed_quarantined"`
	Seconds        float64 `json:"seconds"` // flipping, after the setup
}

type endpoint struct {
	ID       string `json:"instance_id"`
	Eligible bool   `json:"eligible"`
	Verdict  string `json:"verdict"`
}

// flip runs the constant-work churn driver. Instances are paired within
// their service (ep1 with ep5, ep2 with ep6, ... for 8 endpoints), and of
// each pair exactly one is ready: the setup reports make the first of each
// pair ready and the second not. A flip swaps a pair (two health changes),
// so every service keeps half its endpoints eligible and answers keep the
// same size at every -pct; only which endpoints they name changes. Each
// tick reports every instance of the working set once: swapped pairs with
// their new state, the rest with the state they have.
func flip(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("flip", flag.ExitOnError)
	addr := fs.String("addr", "http://127.0.0.1:8480", "cairn HTTP address")
	token := fs.String("token", os.Getenv("CAIRN_TOKEN"), "bearer token (ACLs on)")
	in := fs.String("f", "", "instances.jsonl from drive load")
	pct := fs.Int("pct", 50, "percent of the working set whose readiness flips each tick")
	conns := fs.Int("c", 16, "concurrent requests")
	interval := fs.Duration("interval", time.Second, "tick")
	duration := fs.Duration("duration", 30*time.Second, "stop after this long, setup included (at most 1h)")
	observe := fs.Int("observe", 4, "services whose published endpoints are read every tick")
	readyFile := fs.String("ready-file", "", "written once the setup state is published, before the first flip")
	fs.Parse(args)
	if *in == "" {
		return errors.New("flip: -f is required")
	}
	if *pct < 0 || *pct > 100 || *duration <= 0 || *duration > time.Hour || *interval <= 0 {
		return errors.New("flip: want 0 <= -pct <= 100, 0 < -duration <= 1h, -interval > 0")
	}
	insts, err := readLines[Instance](*in)
	if err != nil {
		return err
	}
	pairs, err := makePairs(insts)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *duration)
	defer cancel()
	c := newClient(*addr, *token, *conns)
	res := FlipResult{Pct: *pct, Instances: len(insts)}

	// The services to observe: the first -observe services.
	var watched []Instance
	seen := map[[2]string]bool{}
	for _, in := range insts {
		k := [2]string{in.Namespace, in.Service}
		if !seen[k] && len(watched) < *observe {
			seen[k] = true
			watched = append(watched, in)
		}
	}
	prevElig := map[string]bool{}
	var changes, reads int
	observeOnce := func() (eligible, total int) {
		quarantined := 0
		for _, w := range watched {
			var eps []endpoint
			path := "/v1/services/" + url.PathEscape(w.Namespace) + "/" + url.PathEscape(w.Service) + "/endpoints"
			if err := c.do(ctx, http.MethodGet, path, nil, &eps); err != nil {
				continue
			}
			for _, e := range eps {
				key := w.Namespace + "/" + w.Service + "/" + e.ID
				if old, ok := prevElig[key]; ok {
					reads++
					if old != e.Eligible {
						changes++
					}
				}
				prevElig[key] = e.Eligible
				total++
				if e.Eligible {
					eligible++
				}
				if e.Verdict == "quarantined" {
					quarantined++
				}
			}
		}
		res.Eligible, res.Quarantined = eligible, quarantined
		return eligible, total
	}

	// ready[i] is the readiness last sent for insts[i].
	ready := make([]bool, len(insts))
	for _, p := range pairs {
		ready[p[0]] = true
	}
	var reports, flips, failed atomic.Int64
	var firstErr atomic.Value
	send := func(flipNow []bool) {
		parallel(ctx, len(insts), *conns, func(ctx context.Context, i int) error {
			want := ready[i] != flipNow[i]
			body := map[string]any{"incarnation": insts[i].Incarnation, "ready": want}
			if err := c.do(ctx, http.MethodPost, insts[i].path("/report"), body, nil); err != nil {
				if ctx.Err() == nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err.Error())
				}
				return nil // a failed report is counted, not fatal
			}
			reports.Add(1)
			if flipNow[i] {
				flips.Add(1)
			}
			ready[i] = want // each i is handled by one worker per tick
			return nil
		})
	}

	// Setup: assert the initial state, then wait (bounded by ctx) until the
	// watched services publish exactly half their instances.
	setupStart := time.Now()
	send(make([]bool, len(insts)))
	for ctx.Err() == nil {
		if e, t := observeOnce(); t > 0 && 2*e == t {
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	if ctx.Err() != nil {
		msg := ""
		if e, ok := firstErr.Load().(string); ok {
			msg = "; first error: " + e
		}
		return fmt.Errorf("flip: setup: the watched services never published half their instances (%d of %d eligible at the last read; %d reports failed%s)",
			res.Eligible, len(prevElig), failed.Load(), msg)
	}
	res.SetupSeconds = time.Since(setupStart).Seconds()
	reports.Store(0)
	changes, reads = 0, 0
	if *readyFile != "" {
		if err := os.WriteFile(*readyFile, []byte("ready\n"), 0o644); err != nil {
			return err
		}
	}

	perTick := (len(pairs)**pct + 50) / 100
	cursor := 0
	start := time.Now()
	tick := time.NewTicker(*interval)
	defer tick.Stop()
	for ctx.Err() == nil {
		tickStart := time.Now()
		flipNow := make([]bool, len(insts))
		for k := range perTick {
			p := pairs[(cursor+k)%len(pairs)]
			flipNow[p[0]], flipNow[p[1]] = true, true
		}
		cursor = (cursor + perTick) % len(pairs)
		send(flipNow)
		if ctx.Err() != nil {
			break
		}
		observeOnce()
		res.Ticks++
		if time.Since(tickStart) > *interval {
			res.Overruns++
			continue // start the next tick at once; missed ticks are dropped, never queued
		}
		select {
		case <-ctx.Done():
		case <-tick.C:
		}
	}
	el := time.Since(start).Seconds()
	res.Reports, res.Flips, res.Failed = reports.Load(), flips.Load(), failed.Load()
	if e, ok := firstErr.Load().(string); ok {
		res.FirstError = e
	}
	res.ReportsPerSec, res.FlipsPerSec, res.Seconds = float64(res.Reports)/el, float64(res.Flips)/el, el
	res.Observed = len(prevElig)
	if reads > 0 {
		res.ObservedChange = 100 * float64(changes) / float64(reads)
	}
	return json.NewEncoder(os.Stdout).Encode(res)
}

// makePairs pairs each service's instances, in file order: the k-th of
// the first half with the k-th of the second. Every service needs an even
// number of instances.
func makePairs(insts []Instance) ([][2]int, error) {
	var pairs [][2]int
	for lo := 0; lo < len(insts); {
		hi := lo
		for hi < len(insts) && insts[hi].Namespace == insts[lo].Namespace && insts[hi].Service == insts[lo].Service {
			hi++
		}
		n := hi - lo
		if n%2 != 0 {
			return nil, fmt.Errorf("flip: %s/%s has %d instances: want an even number", insts[lo].Namespace, insts[lo].Service, n)
		}
		for k := range n / 2 {
			pairs = append(pairs, [2]int{lo + k, lo + n/2 + k})
		}
		lo = hi
	}
	if len(pairs) == 0 {
		return nil, errors.New("flip: no instances")
	}
	return pairs, nil
}
