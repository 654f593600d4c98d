// Command drive loads the DNS benchmark's data into a cairn server over its
// HTTP API (docs/api.md) and, for MODE=flip, flips instance health while
// dnsperf runs. bench/dns/run.sh builds and runs it; every loop is bounded
// in count or time and stops on its own.
//
//	drive load -addr URL -f registrations.jsonl -out instances.jsonl [-c 16]
//	drive flip -addr URL -f instances.jsonl -pct 50 -duration 30s [-style steady|today]
//	           [-interval D] [-dns HOST:PORT -domain cairn.internal.] [-ready-file F] [-c 16]
//
// load registers every line of registrations.jsonl (bench/dns/gen) with
// POST /v1/services/{ns}/{svc}/instances and writes the committed
// incarnations to -out. The services must have been applied first.
//
// flip first makes half of every service's instances not ready (one
// self-report each, POST .../{id}/report) and waits until cairn publishes
// that. Then it churns health in one of two styles (SPEC §9, "DNS work
// under churn"), -pct being the share of endpoints whose health changes
// each second:
//
//   - steady (flip_steady.go): every -interval, which must be cairn's
//     evaluation interval, it sends one batch of reports timed to land
//     between two evaluation rounds. An endpoint leaving and one coming
//     back change in the same round, so every service keeps exactly half
//     its endpoints eligible at every round, and its answers the same
//     size, whatever -pct.
//   - today (flip_today.go): the driver as it was first written. Every
//     -interval it sends one report for every instance, swapping the
//     readiness of -pct of the pairs in one batch. cairn withdraws at
//     once but re-admits only after admit_after rounds, and its shrink
//     cap defers withdrawals past its budget, so the eligible count is
//     not steady: kept so that its figures can be compared.
//
// Either way it reads the endpoints of a few services over the API every
// tick (-observe) and counts the eligibility changes, deferred withdrawals
// and quarantines cairn published; with -dns it also asks cairn for those
// services' A records ten times a second and counts the records in every
// answer, which says whether answer sizes really held still. It prints one
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
