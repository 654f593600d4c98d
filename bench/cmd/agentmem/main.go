// Command agentmem measures what a real `cairn agent` holds in memory
// for the views it serves (SPEC §9: the agent ≤ 16 MiB for 800
// instances; issue 31: ≤ 64 MiB for 20,000).
//
// It starts one real `cairn server --dev` on loopback ports, defines
// -services services and registers -per-service instances in each
// (no health check, a lease of an hour, no slow start: nothing changes
// while the agent is measured; with slow start, the new instances'
// weights change for 30 s, and the first agent measured would be taking
// changed views all that time). Then, -runs times, it starts a real `cairn agent`
// subscribed to every service (--service), waits until the agent answers
// an A query for each service with all of its addresses, lets it settle
// for -settle (nothing forces a collection in the agent: the figures are
// what it holds after that time, the Go runtime's own collections and
// scavenger included), and reads its resident set (VmRSS, and its two
// parts RssAnon, what the agent allocated, and RssFile, the pages of
// the binary it runs, from /proc/PID/status) and Go heap
// (go_memstats_heap_inuse_bytes and go_memstats_sys_bytes from its
// /metrics), then stops it. With
// -base-bin, each run starts that binary's agent first and then -bin's,
// against the same server, so the two are measured alternately in the
// same window. With -agent-bin, the agent measured in -bin's place is
// that binary's (cairn-agent: `cairn agent` without the server linked,
// taking the same flags without the command's name); -bin still runs
// the server. With -profile, each agent's /proc/PID/smaps and, for the
// new agent (-agent-bin, or -bin), a heap profile from its --debug-addr
// are written there as its figures are read.
//
// It prints one Markdown row per agent started, then the medians per
// binary, and one JSON line with every sample.
//
// Every wait has a deadline and the whole run -timeout; the processes
// are stopped and the temporary folder removed at the end. `make
// bench-agent` runs it at 800 and at 20,000 instances.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/bench/benchproc"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/wire"
)

const benchNS = "agentmem"

type options struct {
	services, perService int
	runs                 int
	conc                 int
	bin, baseBin         string
	agentBin             string
	profile              string
	settle, timeout      time.Duration
	keep                 bool
	gogc                 string
}

func main() {
	var o options
	flag.IntVar(&o.services, "services", 100, "services")
	flag.IntVar(&o.perService, "per-service", 8, "instances per service")
	flag.IntVar(&o.runs, "runs", 3, "agents started per binary")
	flag.IntVar(&o.conc, "c", 16, "concurrent registering clients")
	flag.StringVar(&o.bin, "bin", "", "cairn binary: the server, and the agent measured (default: build one from the working tree)")
	flag.StringVar(&o.baseBin, "base-bin", "", "a second cairn binary whose agent is measured alternately with -bin's")
	flag.DurationVar(&o.settle, "settle", 60*time.Second, "time the agent is left alone once it answers for every service, before its figures are read")
	flag.DurationVar(&o.timeout, "timeout", 30*time.Minute, "upper bound on the whole run")
	flag.BoolVar(&o.keep, "keep", false, "keep the data dirs and logs")
	flag.StringVar(&o.agentBin, "agent-bin", "", "a cairn-agent binary: the agent measured in -bin's place (-bin runs the server)")
	flag.StringVar(&o.gogc, "gogc", "", "if set, a third agent each run: the new one's with GOGC set to this")
	flag.StringVar(&o.profile, "profile", "", "a folder to write each agent's smaps, and the new agent's heap profile, into")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "agentmem:", err)
		os.Exit(1)
	}
}

// sample is one agent's figures.
type sample struct {
	Bin        string  `json:"bin"`
	Run        int     `json:"run"`
	ServeSecs  float64 `json:"serve_all_seconds"`
	RSSServed  uint64  `json:"rss_at_serve_bytes"`
	RSS        uint64  `json:"rss_bytes"`
	RSSAnon    uint64  `json:"rss_anon_bytes"`
	RSSFile    uint64  `json:"rss_file_bytes"`
	HeapInuse  uint64  `json:"heap_inuse_bytes"`
	GoSys      uint64  `json:"go_sys_bytes"`
	Goroutines uint64  `json:"goroutines"`
}

func run(ctx context.Context, o options) error {
	dir, remove, err := benchproc.TempDir("agentmem", o.keep)
	if err != nil {
		return err
	}
	defer remove()
	if o.bin == "" {
		if o.bin, err = integration.Binary(); err != nil {
			return err
		}
	}
	ports, err := integration.FreePorts(6)
	if err != nil {
		return err
	}
	addr := func(i int) string { return fmt.Sprintf("127.0.0.1:%d", ports[i]) }
	srv, cl, err := benchproc.StartServer(ctx, o.bin, dir, []string{addr(0), addr(1), addr(2), addr(3)})
	if err != nil {
		return err
	}
	defer srv.Stop()
	defer cl.Close()
	start := time.Now()
	if err := populate(ctx, cl, o); err != nil {
		return fmt.Errorf("registering: %w\n%s", err, srv.Tail())
	}
	n := o.services * o.perService
	fmt.Fprintf(os.Stderr, "agentmem: %d instances over %d services registered in %.1f s\n", n, o.services, time.Since(start).Seconds())

	newBin := o.bin
	if o.agentBin != "" {
		newBin = o.agentBin
	}
	bins := []string{newBin}
	if o.baseBin != "" {
		bins = []string{o.baseBin, newBin}
	}
	if o.gogc != "" {
		bins = append(bins, newBin+" GOGC="+o.gogc)
	}
	if o.profile != "" {
		if err := os.MkdirAll(o.profile, 0o755); err != nil {
			return err
		}
	}
	var all []sample
	fmt.Printf("| binary | run | instances | served all after | RSS at that moment | RSS after %s | RssAnon | RssFile | Go heap in use | Go sys |\n|---|---|---|---|---|---|---|---|---|---|\n", o.settle)
	for r := range o.runs {
		for _, bin := range bins {
			s, err := measure(ctx, o, bin, fmt.Sprintf("agent-%d-%d", r, len(all)), dir, addr(3), addr(4), addr(5))
			if err != nil {
				return err
			}
			s.Run = r + 1
			all = append(all, s)
			fmt.Printf("| %s | %d | %d | %.1f s | %s | **%s** | %s | %s | %s | %s |\n", bin, s.Run, n, s.ServeSecs, mib(s.RSSServed),
				mib(s.RSS), mib(s.RSSAnon), mib(s.RSSFile), mib(s.HeapInuse), mib(s.GoSys))
		}
	}
	fmt.Printf("\nmedians of %d (%d instances over %d services):\n\n| binary | RSS | RssAnon | RssFile | Go heap in use | Go sys | served all after |\n|---|---|---|---|---|---|---|\n", o.runs, n, o.services)
	for _, bin := range bins {
		var rss, anon, file, heap, sys, secs []float64
		for _, s := range all {
			if s.Bin == bin {
				rss, anon, file = append(rss, float64(s.RSS)), append(anon, float64(s.RSSAnon)), append(file, float64(s.RSSFile))
				heap, sys, secs = append(heap, float64(s.HeapInuse)), append(sys, float64(s.GoSys)), append(secs, s.ServeSecs)
			}
		}
		fmt.Printf("| %s | **%s** | %s | %s | %s | %s | %.1f s |\n", bin, mib(uint64(median(rss))), mib(uint64(median(anon))),
			mib(uint64(median(file))), mib(uint64(median(heap))), mib(uint64(median(sys))), median(secs))
	}
	b, _ := json.Marshal(map[string]any{"go": runtime.Version(), "instances": n, "services": o.services,
		"settle_seconds": o.settle.Seconds(), "samples": all})
	fmt.Println(string(b))
	return nil
}

// measure starts one agent of bin subscribed to every service, waits
// until it answers for all of them, lets it settle, reads its figures
// and stops it.
func measure(ctx context.Context, o options, bin, name, tmp, grpcAddr, dnsAddr, httpAddr string) (sample, error) {
	s := sample{Bin: bin}
	dir := filepath.Join(tmp, name)
	// The GOGC arm: the child inherits the environment at Start, and
	// nothing else runs meanwhile.
	exe, gogc, withGOGC := strings.Cut(bin, " GOGC=")
	var args []string
	if exe != o.agentBin {
		args = []string{"agent"}
	}
	args = append(args, "--server", grpcAddr, "--dns-addr", dnsAddr, "--http-addr", httpAddr,
		"--data-dir", dir, "--log-level", "warn")
	debugAddr := ""
	if o.profile != "" && exe != o.baseBin {
		ports, err := integration.FreePorts(1)
		if err != nil {
			return s, err
		}
		debugAddr = fmt.Sprintf("127.0.0.1:%d", ports[0])
		args = append(args, "--debug-addr", debugAddr)
	}
	for i := range o.services {
		args = append(args, "--service", benchNS+"/"+serviceName(i))
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return s, err
	}
	start := time.Now()
	if withGOGC {
		os.Setenv("GOGC", gogc)
	}
	ag, err := benchproc.Start(exe, args, dir+".log")
	if withGOGC {
		os.Unsetenv("GOGC")
	}
	if err != nil {
		return s, err
	}
	defer ag.Stop()
	hc := &http.Client{Timeout: 10 * time.Second}
	if err := ag.WaitReady(ctx, hc, "http://"+httpAddr+"/readyz", 60*time.Second); err != nil {
		return s, fmt.Errorf("starting the agent: %w\n%s", err, ag.Tail())
	}
	dc := &dns.Client{Timeout: 2 * time.Second}
	next := 0 // services answered in full so far, in order
	err = benchproc.Poll(ctx, 5*time.Minute, 100*time.Millisecond, func() error {
		for ; next < o.services; next++ {
			if got, err := answers(dc, dnsAddr, serviceName(next)+"."+benchNS+".svc.cairn.internal."); err != nil || got != o.perService {
				return fmt.Errorf("service %d: %d addresses (%v)", next, got, err)
			}
		}
		return nil
	})
	if err != nil {
		return s, fmt.Errorf("the agent does not answer for every service: %w\n%s", err, ag.Tail())
	}
	s.ServeSecs = time.Since(start).Seconds()
	if s.RSSServed, _, _, err = rss(ag.Pid()); err != nil {
		return s, err
	}
	select {
	case <-ctx.Done():
		return s, ctx.Err()
	case <-time.After(o.settle):
	}
	if s.RSS, s.RSSAnon, s.RSSFile, err = rss(ag.Pid()); err != nil {
		return s, err
	}
	vals, err := metrics(ctx, hc, "http://"+httpAddr+"/metrics", "go_memstats_heap_inuse_bytes", "go_memstats_sys_bytes", "go_goroutines")
	if err != nil {
		return s, err
	}
	s.HeapInuse, s.GoSys, s.Goroutines = uint64(vals[0]), uint64(vals[1]), uint64(vals[2])
	if o.profile != "" {
		if err := keepProfile(ctx, hc, ag.Pid(), debugAddr, filepath.Join(o.profile, name)); err != nil {
			return s, err
		}
	}
	return s, nil
}

// keepProfile copies pid's smaps to base+".smaps" and, with debugAddr,
// the agent's heap profile to base+".heap" (go tool pprof reads it).
func keepProfile(ctx context.Context, hc *http.Client, pid int, debugAddr, base string) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".smaps", b, 0o644); err != nil {
		return err
	}
	if debugAddr == "" {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+debugAddr+"/debug/pprof/heap", nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the agent's heap profile: %s", resp.Status)
	}
	f, err := os.Create(base + ".heap")
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// answers asks name's A records and returns how many came back.
func answers(dc *dns.Client, server, name string) (int, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, dns.TypeA)
	q.SetEdns0(1232, false)
	r, _, err := dc.Exchange(q, server)
	if err != nil {
		return 0, err
	}
	if r.Rcode != dns.RcodeSuccess {
		return 0, fmt.Errorf("%s", dns.RcodeToString[r.Rcode])
	}
	return len(r.Answer), nil
}

// rss reads VmRSS, RssAnon and RssFile of pid.
func rss(pid int) (vm, anon, file uint64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, 0, err
	}
	if vm, err = benchproc.StatusBytes(b, "VmRSS"); err != nil {
		return 0, 0, 0, err
	}
	if anon, err = benchproc.StatusBytes(b, "RssAnon"); err != nil {
		return 0, 0, 0, err
	}
	file, err = benchproc.StatusBytes(b, "RssFile")
	return vm, anon, file, err
}

// metrics returns the values of the named unlabelled samples at url, in
// order; a missing one is an error.
func metrics(ctx context.Context, hc *http.Client, url string, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return benchproc.Scrape(resp.Body, names...)
}

func serviceName(i int) string { return fmt.Sprintf("s%05d", i) }

// populate defines the services, 50 to a request, and registers their
// instances from o.conc workers.
func populate(ctx context.Context, cl *client.Client, o options) error {
	const batch = 50
	for i := 0; i < o.services; i += batch {
		var b strings.Builder
		for j := i; j < min(i+batch, o.services); j++ {
			fmt.Fprintf(&b, "---\nnamespace: %s\nname: %s\nports: [{name: http, number: 8080, protocol: tcp}]\npolicy:\n  lease_ttl: 1h\n  slow_start: 0s\n",
				benchNS, serviceName(j))
		}
		if _, err := cl.Apply(ctx, []byte(b.String())); err != nil {
			return err
		}
	}
	n := o.services * o.perService
	var (
		next    atomic.Int64
		wg      sync.WaitGroup
		errOnce sync.Once
		first   error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range o.conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				reg := wire.Registration{ID: fmt.Sprintf("i%d", i/o.services),
					Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i/(254*256)%256, i/254%256, i%254+1)},
					Ports:     map[string]int{"http": 8080}}
				if _, err := cl.Register(ctx, benchNS, serviceName(i%o.services), reg); err != nil {
					errOnce.Do(func() { first = fmt.Errorf("instance %d: %w", i, err) })
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	return v[len(v)/2]
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
