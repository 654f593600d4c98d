// Command soak is issue 12's outage soak (SPEC §9: "agents and DNS
// answer for ≥ 60 min with the store down, error rate unchanged"): one
// real `cairn server --dev` and one real `cairn agent` (with
// -agent-bin, that cairn-agent binary) on loopback, the agent
// subscribed to every service; once the agent answers for all of
// them, the server is killed (SIGKILL) and the agent is asked, at a
// fixed rate for -duration, an A query for a random service. It counts
// the answers that carry the service's addresses (and how many were
// marked stale, EDE 3), every other answer and every timeout, samples
// the agent's resident set, and at the end reads the views' age from
// GET /v1/agent/status. It prints one Markdown table row for
// BENCHMARKS.md and one JSON line.
//
// The query loop is bounded (-rate × -duration queries, each with a
// timeout), and both processes are stopped and the temporary folder
// removed at the end. `make soak` runs it for 60 minutes;
// `go run ./bench/cmd/soak -duration 2m` is a short rehearsal.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/bench/benchproc"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/wire"
)

const soakNS = "soak"

type options struct {
	duration  time.Duration
	rate      int
	services  int
	instances int
	bin       string
	agentBin  string
	keep      bool
}

func main() {
	var o options
	flag.DurationVar(&o.duration, "duration", time.Hour, "how long the agent is asked with the server down")
	flag.IntVar(&o.rate, "rate", 200, "queries a second")
	flag.IntVar(&o.services, "services", 100, "services")
	flag.IntVar(&o.instances, "instances", 8, "instances per service")
	flag.StringVar(&o.bin, "bin", "", "cairn binary (default: build one from the working tree)")
	flag.StringVar(&o.agentBin, "agent-bin", "", "a cairn-agent binary to run the agent with (default: -bin's `cairn agent`)")
	flag.BoolVar(&o.keep, "keep", false, "keep the data dirs and logs")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

type result struct {
	Rev            string  `json:"cairn"`
	Go             string  `json:"go"`
	OutageSeconds  float64 `json:"outage_seconds"`
	Queries        int     `json:"queries"`
	Answered       int     `json:"answered"`
	Stale          int     `json:"stale"`
	Errors         int     `json:"errors"`
	Timeouts       int     `json:"timeouts"`
	ErrorRate      float64 `json:"error_rate"`
	StaleAgeEnd    float64 `json:"stale_age_end_seconds"`
	RSSStartKiB    int     `json:"agent_rss_start_kib"`
	RSSEndKiB      int     `json:"agent_rss_end_kib"`
	RSSMaxKiB      int     `json:"agent_rss_max_kib"`
	ErrorsBefore   int     `json:"errors_before_outage"`
	QueriesBefore  int     `json:"queries_before_outage"`
	FirstErrorText string  `json:"first_error,omitempty"`
}

func run(ctx context.Context, o options) error {
	dir, remove, err := benchproc.TempDir("soak", o.keep)
	if err != nil {
		return err
	}
	defer remove()
	bin, rev := o.bin, "-bin "+o.bin
	if bin == "" {
		if bin, err = integration.Binary(); err != nil {
			return err
		}
		rev = "working tree"
	}
	ports, err := integration.FreePorts(7)
	if err != nil {
		return err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	hc := &http.Client{Timeout: 10 * time.Second}
	srv, cl, err := benchproc.StartServer(ctx, bin, dir, []string{addr(0), addr(1), addr(2), addr(3)})
	if err != nil {
		return err
	}
	defer srv.Stop()
	defer cl.Close()
	names, err := populate(ctx, cl, o)
	if err != nil {
		return fmt.Errorf("registering: %w\n%s", err, srv.Tail())
	}

	agentBin, args := bin, []string{"agent"}
	if o.agentBin != "" {
		agentBin, args = o.agentBin, nil
		rev += " -agent-bin " + o.agentBin
	}
	args = append(args, "--server", addr(3), "--dns-addr", addr(4), "--http-addr", addr(5),
		"--data-dir", filepath.Join(dir, "agent"), "--log-level", "warn")
	for i := range o.services {
		args = append(args, "--service", soakNS+"/"+serviceName(i))
	}
	ag, err := benchproc.Start(agentBin, args, filepath.Join(dir, "agent.log"))
	if err != nil {
		return err
	}
	defer ag.Stop()
	if err := ag.WaitReady(ctx, hc, "http://"+addr(5)+"/readyz", 30*time.Second); err != nil {
		return fmt.Errorf("starting the agent: %w\n%s", err, ag.Tail())
	}
	dc := &dns.Client{Timeout: 2 * time.Second}
	// Every service answered, fresh, before the outage.
	err = benchproc.Poll(ctx, 60*time.Second, 100*time.Millisecond, func() error {
		for _, n := range names {
			if ok, stale, why := ask(dc, addr(4), n); !ok || stale {
				return fmt.Errorf("%s: %s (stale %v)", n, why, stale)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the agent does not answer for every service: %w\n%s", err, ag.Tail())
	}
	var r result
	r.Rev, r.Go = rev, runtime.Version()
	// A minute's worth of queries with the server up: the error rate to
	// keep.
	before := query(ctx, dc, addr(4), names, o.rate, min(time.Minute, o.duration/4), nil)
	r.QueriesBefore, r.ErrorsBefore = before.Queries, before.Errors+before.Timeouts

	if err := syscall.Kill(srv.Pid(), syscall.SIGKILL); err != nil {
		return err
	}
	<-srv.Exited()
	start := time.Now()
	rss := &rssSampler{pid: ag.Pid()}
	rss.sample()
	r.RSSStartKiB = rss.last
	during := query(ctx, dc, addr(4), names, o.rate, o.duration, rss)
	r.OutageSeconds = time.Since(start).Seconds()
	r.Queries, r.Answered, r.Stale, r.Errors, r.Timeouts, r.FirstErrorText =
		during.Queries, during.Answered, during.Stale, during.Errors, during.Timeouts, during.FirstErrorText
	if r.Queries > 0 {
		r.ErrorRate = float64(r.Errors+r.Timeouts) / float64(r.Queries)
	}
	rss.sample()
	r.RSSEndKiB, r.RSSMaxKiB = rss.last, rss.max
	r.StaleAgeEnd, err = staleAge(ctx, hc, "http://"+addr(5)+"/v1/agent/status")
	if err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	fmt.Printf("| %s | %.0f min | %d | %d (%.2f%% stale) | %d | %d | %.4f%% | %.0f s | %.1f → %.1f (max %.1f) MiB | %d / %d |\n",
		r.Rev, r.OutageSeconds/60, r.Queries, r.Answered, 100*float64(r.Stale)/float64(max(r.Answered, 1)), r.Errors, r.Timeouts,
		100*r.ErrorRate, r.StaleAgeEnd, float64(r.RSSStartKiB)/1024, float64(r.RSSEndKiB)/1024, float64(r.RSSMaxKiB)/1024,
		r.ErrorsBefore, r.QueriesBefore)
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	return nil
}

// populate defines the services and registers their instances, and
// returns the names to ask.
func populate(ctx context.Context, cl *client.Client, o options) ([]string, error) {
	var b strings.Builder
	for i := range o.services {
		fmt.Fprintf(&b, "---\nnamespace: %s\nname: %s\nports: [{name: http, number: 8080, protocol: tcp}]\npolicy:\n  lease_ttl: 1h\n", soakNS, serviceName(i))
	}
	if _, err := cl.Apply(ctx, []byte(b.String())); err != nil {
		return nil, err
	}
	var names []string
	for i := range o.services {
		for j := range o.instances {
			reg := wire.Registration{ID: fmt.Sprintf("i%d", j), Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1)},
				Ports: map[string]int{"http": 8080}}
			if _, err := cl.Register(ctx, soakNS, serviceName(i), reg); err != nil {
				return nil, err
			}
		}
		names = append(names, serviceName(i)+"."+soakNS+".svc.cairn.internal.")
	}
	return names, nil
}

func serviceName(i int) string { return fmt.Sprintf("s%03d", i) }

// counts are one query loop's.
type counts struct {
	Queries, Answered, Stale, Errors, Timeouts int
	FirstErrorText                             string
}

// query asks rate queries a second for d, each for a random name, and
// counts what came back. The loop stops by itself after d.
func query(ctx context.Context, dc *dns.Client, server string, names []string, rate int, d time.Duration, rss *rssSampler) counts {
	var c counts
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	end := time.After(d)
	sample := time.NewTicker(10 * time.Second)
	defer sample.Stop()
	for {
		select {
		case <-ctx.Done():
			return c
		case <-end:
			return c
		case <-sample.C:
			if rss != nil {
				rss.sample()
			}
		case <-tick.C:
			c.Queries++
			ok, stale, why := ask(dc, server, names[rand.IntN(len(names))])
			switch {
			case ok:
				c.Answered++
				if stale {
					c.Stale++
				}
			case why == "timeout":
				c.Timeouts++
			default:
				c.Errors++
				if c.FirstErrorText == "" {
					c.FirstErrorText = why
				}
			}
		}
	}
}

// ask sends one A query and reports whether it came back with addresses,
// whether it was marked stale, and what was wrong otherwise.
func ask(dc *dns.Client, server, name string) (ok, stale bool, why string) {
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	q.SetEdns0(1232, false)
	r, _, err := dc.Exchange(q, server)
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return false, false, "timeout"
	}
	if err != nil {
		return false, false, err.Error()
	}
	if o := r.IsEdns0(); o != nil {
		for _, op := range o.Option {
			if e, isEDE := op.(*dns.EDNS0_EDE); isEDE && e.InfoCode == dns.ExtendedErrorCodeStaleAnswer {
				stale = true
			}
		}
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
		return false, stale, fmt.Sprintf("%s with %d answers", dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	return true, stale, ""
}

// staleAge returns the oldest view's age from the agent's status.
func staleAge(ctx context.Context, hc *http.Client, url string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("the agent's status: %w", err)
	}
	defer resp.Body.Close()
	var st struct {
		Views []struct {
			AgeSeconds float64 `json:"age_seconds"`
		} `json:"views"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, err
	}
	ages := make([]float64, 0, len(st.Views))
	for _, v := range st.Views {
		ages = append(ages, v.AgeSeconds)
	}
	if len(ages) == 0 {
		return 0, errors.New("the agent reports no view")
	}
	return slices.Max(ages), nil
}

// rssSampler reads a process's VmRSS.
type rssSampler struct {
	pid       int
	last, max int
}

func (s *rssSampler) sample() {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.pid))
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			var kb int
			fmt.Sscan(f[1], &kb)
			s.last, s.max = kb, max(s.max, kb)
		}
	}
}
