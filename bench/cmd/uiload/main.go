// Command uiload measures what open dashboards cost the server (issue 14:
// "the pages follow changes without a reload, at a bounded cost to the
// server whatever the number of open dashboards").
//
// It starts one real `cairn server --dev` pinned to one core
// (GOMAXPROCS=1, taskset -c -server-cpu), registers -services services
// of -per-service instances, and makes -writes writes a second (a
// self-report that flips one instance's readiness, so that the store
// revision moves each time, as on a busy day). Then, for each count in -dashboards,
// it runs that many simulated dashboards for -window and reads the
// server's CPU time from /proc. A simulated dashboard does what the
// page's JavaScript does (ui/static/app.js follow()): GET /v1/status once
// a second, and when the revision it returns has changed, the page's
// data (the services list, one service's view, its events, or the
// members, per -page). Like a browser it takes gzip; bodies are read to
// the end and dropped, and the bytes counted are those on the wire.
//
// It prints one Markdown row per dashboard count: the server's CPU (share
// of its core), the CPU a dashboard costs (above the run with none, when
// -dashboards starts with 0), the status poll's and
// the data fetch's latency (p50/p99) as the dashboards saw them, data
// fetches a second, and bytes a second. With -base-bin, a second binary
// (an older commit) is measured the same way in the same run, first.
//
// Every loop is bounded: each window ends by itself, and the server is
// stopped and its folder removed at the end. `make bench-ui` runs it.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cairn-sd/cairn/bench/benchproc"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/wire"
)

type options struct {
	bin, baseBin string
	services     int
	perService   int
	dashboards   []int
	window       time.Duration
	warmup       time.Duration
	page         string
	serverCPU    string
	keep         bool
	writes       int
}

func main() {
	var o options
	var counts string
	flag.StringVar(&o.bin, "bin", "bin/cairn", "cairn binary")
	flag.StringVar(&o.baseBin, "base-bin", "", "a second cairn binary to measure first, the same way (e.g. built from an older commit)")
	flag.IntVar(&o.services, "services", 1000, "services")
	flag.IntVar(&o.perService, "per-service", 8, "instances per service")
	flag.StringVar(&counts, "dashboards", "0,10,50,100,200", "dashboard counts, one window each")
	flag.DurationVar(&o.window, "window", 30*time.Second, "measured time per dashboard count")
	flag.DurationVar(&o.warmup, "warmup", 5*time.Second, "unmeasured time before each window")
	flag.StringVar(&o.page, "page", "services", "what the dashboards show: services, service, events, cluster or mix")
	flag.StringVar(&o.serverCPU, "server-cpu", "0", "the CPU the server is pinned to (taskset -c)")
	flag.BoolVar(&o.keep, "keep", false, "keep the data dir and log")
	flag.IntVar(&o.writes, "writes", 1, "writes a second (1-200): how fast the store revision moves")
	flag.Parse()
	for _, f := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || n > 2000 {
			fmt.Fprintf(os.Stderr, "uiload: -dashboards: %q must be a number from 0 to 2000\n", f)
			os.Exit(2)
		}
		o.dashboards = append(o.dashboards, n)
	}
	if o.writes < 1 || o.writes > 200 {
		fmt.Fprintf(os.Stderr, "uiload: -writes: %d must be from 1 to 200\n", o.writes)
		os.Exit(2)
	}
	switch o.page {
	case "services", "service", "events", "cluster", "mix":
	default:
		fmt.Fprintf(os.Stderr, "uiload: -page: %q must be services, service, events, cluster or mix\n", o.page)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("| binary | dashboards | server CPU | CPU per dashboard | status p50 / p99 | data p50 / p99 | data fetches/s | MB/s |\n|---|---|---|---|---|---|---|---|\n")
	for _, bin := range []string{o.baseBin, o.bin} {
		if bin == "" {
			continue
		}
		if err := run(ctx, o, bin); err != nil {
			fmt.Fprintln(os.Stderr, "uiload:", err)
			os.Exit(1)
		}
	}
}

func run(ctx context.Context, o options, bin string) error {
	dir, remove, err := benchproc.TempDir("uiload", o.keep)
	if err != nil {
		return err
	}
	defer remove()
	ports, err := integration.FreePorts(4)
	if err != nil {
		return err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	args := []string{"server", "--dev", "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", addr(0), "--raft-addr", addr(1), "--dns-addr", addr(2), "--grpc-addr", addr(3),
		"--probe-workers", "0", "--log-level", "warn"}
	cmd, cmdArgs := bin, args
	if ts, err := exec.LookPath("taskset"); err == nil {
		cmd, cmdArgs = ts, append([]string{"-c", o.serverCPU, "env", "GOMAXPROCS=1", bin}, args...)
	} else {
		fmt.Fprintln(os.Stderr, "uiload: no taskset; the server is not pinned")
	}
	srv, err := benchproc.Start(cmd, cmdArgs, filepath.Join(dir, "server.log"))
	if err != nil {
		return err
	}
	defer srv.Stop()
	hc := &http.Client{Timeout: 10 * time.Second}
	if err := srv.WaitReady(ctx, hc, "http://"+addr(0)+"/readyz", 30*time.Second); err != nil {
		return fmt.Errorf("starting the server: %w\n%s", err, srv.Tail())
	}
	cl, err := client.New(addr(0), "")
	if err != nil {
		return err
	}
	defer cl.Close()
	started := time.Now()
	if err := populate(ctx, cl, o); err != nil {
		return fmt.Errorf("registering: %w\n%s", err, srv.Tail())
	}
	fmt.Fprintf(os.Stderr, "uiload: %s: %d services, %d instances registered in %s; %d writes a second, page %s\n", bin, o.services, o.services*o.perService, time.Since(started).Round(time.Second), o.writes, o.page)

	wctx, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	writes := make(chan error, 1)
	go func() { writes <- writer(wctx, cl, o.writes) }()

	base := "http://" + addr(0) + "/v1/"
	idle := -1.0 // the server's CPU with no dashboard, once measured
	for _, n := range o.dashboards {
		r, err := measure(ctx, o, base, srv.Pid(), n)
		if err != nil {
			return err
		}
		perDash := "—"
		switch {
		case n == 0:
			idle = r.cpu
		case idle >= 0:
			perDash = fmt.Sprintf("%.2f ms/s", (r.cpu-idle)*1000/float64(n))
		}
		fmt.Printf("| %s | %d | %.1f%% | %s | %s / %s | %s / %s | %.1f | %.2f |\n", bin, n, 100*r.cpu, perDash,
			ms(r.status, 0.5), ms(r.status, 0.99), ms(r.data, 0.5), ms(r.data, 0.99), r.fetches, r.mbps)
		if r.errors > 0 {
			fmt.Fprintf(os.Stderr, "uiload: %d dashboards: %d failed requests, the first: %s\n", n, r.errors, r.firstErr)
		}
	}
	stopWrites()
	if err := <-writes; err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("the writer: %w", err)
	}
	return ctx.Err()
}

// populate applies the services in batches and registers their
// instances from 16 workers.
func populate(ctx context.Context, cl *client.Client, o options) error {
	var b strings.Builder
	for i := range o.services {
		ns, name := serviceName(i)
		fmt.Fprintf(&b, "---\nnamespace: %s\nname: %s\nports: [{name: http, number: 8080, protocol: tcp}]\npolicy: {lease_ttl: 1h}\n", ns, name)
		if (i+1)%100 == 0 || i == o.services-1 {
			if _, err := cl.Apply(ctx, []byte(b.String())); err != nil {
				return err
			}
			b.Reset()
		}
	}
	if _, err := cl.Apply(ctx, []byte("namespace: writes\nname: w\nports: [{name: http, number: 8080, protocol: tcp}]\npolicy: {lease_ttl: 1h}\n")); err != nil {
		return err
	}
	jobs := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for k := range jobs {
				ns, name := serviceName(k / o.perService)
				reg := wire.Registration{ID: fmt.Sprintf("i-%d", k%o.perService), Ports: map[string]int{"http": 8080},
					Addresses: []string{fmt.Sprintf("10.%d.%d.%d", k>>16&255, k>>8&255, k&255)}}
				if _, err := cl.Register(ctx, ns, name, reg); err != nil {
					errs <- fmt.Errorf("%s/%s/%s: %w", ns, name, reg.ID, err)
					return
				}
			}
		})
	}
	var err error
feed:
	for k := range o.services * o.perService {
		select {
		case jobs <- k:
		case err = <-errs:
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	close(errs)
	return errors.Join(err, <-errs)
}

func serviceName(i int) (ns, name string) {
	return fmt.Sprintf("ns%02d", i/100), fmt.Sprintf("svc-%04d", i)
}

// writer flips one instance's readiness perSecond times a second until
// ctx ends: each time, a new store revision.
func writer(ctx context.Context, cl *client.Client, perSecond int) error {
	reg, err := cl.Register(ctx, "writes", "w", wire.Registration{ID: "w-0", Ports: map[string]int{"http": 8080},
		Addresses: []string{"10.255.0.1"}})
	if err != nil {
		return err
	}
	key := reg.Key()
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	for ready := false; ; ready = !ready {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if _, err := cl.Report(ctx, key, reg.Incarnation, ready, nil); err != nil && ctx.Err() == nil {
			return err
		}
	}
}

type result struct {
	cpu           float64 // cores
	status, data  []time.Duration
	fetches, mbps float64
	errors        int
	firstErr      string
}

// measure runs n dashboards for warmup + window and reads the server's
// CPU time over the window.
func measure(ctx context.Context, o options, base string, pid, n int) (result, error) {
	// As a browser: gzip taken, and the bytes on the wire counted.
	tr := &http.Transport{MaxIdleConnsPerHost: max(n, 2), DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	dctx, cancel := context.WithTimeout(ctx, o.warmup+o.window)
	defer cancel()
	measureFrom := time.Now().Add(o.warmup)
	var mu sync.Mutex
	var r result
	var bytes int64
	var wg sync.WaitGroup
	for i := range n {
		page := o.page
		if page == "mix" {
			page = []string{"services", "service", "events", "cluster"}[i%4]
		}
		d := &dashboard{hc: hc, base: base, page: page, ns: "ns00", svc: fmt.Sprintf("svc-%04d", i%100)}
		wg.Go(func() {
			// Spread the dashboards' polls over the second.
			select {
			case <-dctx.Done():
				return
			case <-time.After(time.Duration(i) * time.Second / time.Duration(n)):
			}
			tick := time.NewTicker(time.Second)
			defer tick.Stop()
			for {
				st, dt, b, err := d.poll(dctx)
				if dctx.Err() != nil {
					return
				}
				if time.Now().After(measureFrom) {
					mu.Lock()
					if err != nil {
						r.errors++
						if r.firstErr == "" {
							r.firstErr = err.Error()
						}
					}
					if st > 0 {
						r.status = append(r.status, st)
					}
					if dt > 0 {
						r.data = append(r.data, dt)
					}
					bytes += b
					mu.Unlock()
				}
				select {
				case <-dctx.Done():
					return
				case <-tick.C:
				}
			}
		})
	}
	select {
	case <-ctx.Done():
		return r, ctx.Err()
	case <-time.After(time.Until(measureFrom)):
	}
	cpu0, err := cpuTime(pid)
	if err != nil {
		return r, err
	}
	t0 := time.Now()
	<-dctx.Done()
	cpu1, err := cpuTime(pid)
	if err != nil {
		return r, err
	}
	elapsed := time.Since(t0).Seconds()
	wg.Wait()
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	r.cpu = (cpu1 - cpu0).Seconds() / elapsed
	r.fetches = float64(len(r.data)) / elapsed
	r.mbps = float64(bytes) / elapsed / 1e6
	return r, nil
}

// dashboard is one open page, as app.js's follow() drives it.
type dashboard struct {
	hc         *http.Client
	base, page string
	ns, svc    string
	seen       uint64
}

// poll is one tick: GET /v1/status, then the page's data if the revision
// moved. It returns both latencies (0: not fetched) and the bytes read.
func (d *dashboard) poll(ctx context.Context) (status, data time.Duration, n int64, err error) {
	var st wire.Status
	t := time.Now()
	b, err := d.get(ctx, "status", &st)
	status, n = time.Since(t), b
	if err != nil || st.Revision == d.seen {
		return status, 0, n, err
	}
	t = time.Now()
	switch d.page {
	case "services":
		b, err = d.get(ctx, "services", nil)
	case "service":
		b, err = d.get(ctx, "services/"+d.ns+"/"+d.svc, nil)
	case "events":
		b, err = d.get(ctx, "services/"+d.ns+"/"+d.svc+"/events?limit=1000", nil)
	case "cluster":
		if b, err = d.get(ctx, "status", nil); err == nil {
			var m int64
			m, err = d.get(ctx, "members", nil)
			b += m
		}
	}
	data, n = time.Since(t), n+b
	if err == nil {
		d.seen = st.Revision
	}
	return status, data, n, err
}

func (d *dashboard) get(ctx context.Context, path string, into any) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.base+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("Accept-Encoding", "gzip, deflate, br, zstd")
	resp, err := d.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, resp.Body)
		return 0, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil || into == nil {
		return int64(len(b)), err
	}
	var r io.Reader = bytes.NewReader(b)
	if resp.Header.Get("Content-Encoding") == "gzip" {
		if r, err = gzip.NewReader(r); err != nil {
			return int64(len(b)), err
		}
	}
	return int64(len(b)), json.NewDecoder(r).Decode(into)
}

// cpuTime is the process's user and system CPU time (/proc/PID/stat
// fields 14 and 15, in clock ticks of 1/100 s).
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields start after ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, s)
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

func ms(ds []time.Duration, q float64) string {
	if len(ds) == 0 {
		return "—"
	}
	slices.Sort(ds)
	return fmt.Sprintf("%.1f ms", float64(ds[min(len(ds)-1, int(q*float64(len(ds))))].Microseconds())/1000)
}
