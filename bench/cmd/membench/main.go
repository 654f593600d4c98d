// Command membench measures what a registered instance costs a cairn
// server in memory (SPEC §9: ≤ 2 KiB per registered instance).
//
// It starts one real `cairn server --dev` on loopback ports, with its
// data in a temporary folder, lets it settle and reads its idle resident
// set (VmRSS, from /proc/PID/status) and Go heap in use
// (go_memstats_heap_inuse_bytes, from its /metrics; the least seen over
// two garbage collections, so what the heap keeps rather than the
// garbage between collections). It then applies -n/100 services through
// the API, registers -n instances over them with -c concurrent clients,
// waits for the server to settle again (-rounds health rounds after the
// last write, then two collections), and reads both figures again. It prints one Markdown
// table row for BENCHMARKS.md and one JSON line with the same figures;
// the per-instance figures are (after − idle) / n.
//
// The services have no health check and a lease of an hour, so that
// nothing probes, expires or changes while the figures are read: what is
// measured is the registrations themselves. With -renew each instance
// also renews its lease once, as a live one does every few seconds.
//
// Every loop stops by itself (each has a deadline, and the whole run
// -timeout); the server is killed and the temporary folder removed at
// the end. Run it from the module root: `make bench`, or
// `go run ./bench/cmd/membench [-n 100000]`. Without -bin it builds the
// server from the working tree.
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
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cairn-sd/cairn/bench/benchproc"
	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/integration"
	"github.com/cairn-sd/cairn/wire"
)

const benchNS = "membench"

type options struct {
	n           int
	perService  int
	conc        int
	bin         string
	rounds      int
	settle      time.Duration
	timeout     time.Duration
	hold        time.Duration
	keep        bool
	renew       bool
	serverFlags string
}

func main() {
	var o options
	flag.IntVar(&o.n, "n", 100_000, "instances to register")
	flag.IntVar(&o.perService, "per-service", 100, "instances per service (services = n / per-service, rounded up)")
	flag.IntVar(&o.conc, "c", 16, "concurrent registering clients")
	flag.StringVar(&o.bin, "bin", "", "cairn binary to measure (default: build one from the working tree)")
	flag.IntVar(&o.rounds, "rounds", 5, "status table builds to wait for after the last write before reading the figures")
	flag.DurationVar(&o.settle, "settle", 5*time.Minute, "most time to wait for the server to settle, each time")
	flag.DurationVar(&o.timeout, "timeout", 15*time.Minute, "upper bound on the whole run")
	flag.DurationVar(&o.hold, "hold", 0, "keep the server running this long after the figures are read (to inspect it; its address goes to stderr)")
	flag.BoolVar(&o.keep, "keep", false, "keep the data dir and the server log (their folder is printed)")
	flag.BoolVar(&o.renew, "renew", false, "renew every instance once after registering it, as a live instance does, before reading the figures")
	flag.StringVar(&o.serverFlags, "server-flags", "", "extra flags for `cairn server`, space-separated")
	flag.Parse()
	if o.n < 1 || o.perService < 1 || o.conc < 1 || o.rounds < 1 || o.settle <= 0 || o.timeout <= 0 || o.hold < 0 {
		fmt.Fprintln(os.Stderr, "membench: -n, -per-service, -c, -rounds, -settle and -timeout must be positive")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	err := run(ctx, o)
	cancel()
	stop()
	integration.RemoveBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "membench:", err)
		os.Exit(1)
	}
}

// sample is the server's memory at one moment.
type sample struct {
	RSS       uint64 `json:"rss_bytes"`
	RSSAnon   uint64 `json:"rss_anon_bytes"` // of RSS: the process's own memory
	RSSFile   uint64 `json:"rss_file_bytes"` // of RSS: mapped files (bolt's data file, the binary)
	HeapInuse uint64 `json:"heap_inuse_bytes"`
	// Where the rest of the resident set goes: heap spans the runtime
	// holds but has not returned to the kernel (idle − released), and the
	// heap size at which the next collection starts.
	HeapIdle     uint64 `json:"heap_idle_bytes"`
	HeapReleased uint64 `json:"heap_released_bytes"`
	NextGC       uint64 `json:"next_gc_bytes"`
	Builds       uint64 `json:"-"` // status tables published so far
	GCs          uint64 `json:"-"` // garbage collections completed so far
}

// report is the JSON line: the same figures as the Markdown row.
type report struct {
	Rev             string  `json:"cairn"`
	Go              string  `json:"go"`
	Instances       int     `json:"instances"`
	Services        int     `json:"services"`
	Renewed         bool    `json:"renewed"`
	Idle            sample  `json:"idle"`
	After           sample  `json:"after"`
	RSSPerInstance  float64 `json:"rss_bytes_per_instance"`
	HeapPerInstance float64 `json:"heap_inuse_bytes_per_instance"`
	RegisterSeconds float64 `json:"register_seconds"`
	RegistrationsPS float64 `json:"registrations_per_second"`
	SettleSeconds   float64 `json:"settle_seconds"`
	ServerRevision  uint64  `json:"server_revision"`
}

func run(ctx context.Context, o options) error {
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.MaxIdleConnsPerHost = max(64, 2*o.conc)
		tr.MaxIdleConns = max(256, 4*o.conc)
	}
	dir, err := os.MkdirTemp("", "cairn-membench-")
	if err != nil {
		return err
	}
	if o.keep {
		fmt.Fprintln(os.Stderr, "membench: data dir and log in", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	bin := o.bin
	if bin == "" {
		if bin, err = integration.Binary(); err != nil {
			return err
		}
	}
	srv, err := startServer(ctx, bin, dir, strings.Fields(o.serverFlags))
	if err != nil {
		return err
	}
	defer srv.Stop()

	cl, err := client.New(srv.httpAddr, "")
	if err != nil {
		return err
	}
	defer cl.Close()

	idle, _, err := srv.settle(ctx, o, 0)
	if err != nil {
		return fmt.Errorf("settling before registering: %w\n%s", err, srv.Tail())
	}

	services := (o.n + o.perService - 1) / o.perService
	if err := applyServices(ctx, cl, services); err != nil {
		return fmt.Errorf("applying %d services: %w\n%s", services, err, srv.Tail())
	}
	start := time.Now()
	incs, err := register(ctx, cl, o, services)
	regTime := time.Since(start)
	if err != nil {
		return fmt.Errorf("registering: %w\n%s", err, srv.Tail())
	}
	if o.renew {
		if err := renew(ctx, cl, o, services, incs); err != nil {
			return fmt.Errorf("renewing: %w\n%s", err, srv.Tail())
		}
	}
	st, err := cl.Status(ctx)
	if err != nil {
		return err
	}
	after, settled, err := srv.settle(ctx, o, st.Revision)
	if err != nil {
		return fmt.Errorf("settling after registering: %w\n%s", err, srv.Tail())
	}

	// The revision of the working tree says what was measured only when
	// the server was built from it.
	rev := "unknown"
	if o.bin != "" {
		rev = "-bin " + o.bin
	} else if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		rev = strings.TrimSpace(string(out))
	}
	r := report{Rev: rev, Go: runtime.Version(), Instances: o.n, Services: services, Renewed: o.renew, Idle: idle, After: after,
		RSSPerInstance:  (float64(after.RSS) - float64(idle.RSS)) / float64(o.n),
		HeapPerInstance: (float64(after.HeapInuse) - float64(idle.HeapInuse)) / float64(o.n),
		RegisterSeconds: regTime.Seconds(),
		RegistrationsPS: float64(o.n) / regTime.Seconds(),
		SettleSeconds:   settled.Seconds(),
		ServerRevision:  st.Revision,
	}
	fmt.Printf("<!-- membench %s: cairn %s, %s, %s/%s, %d CPUs, -n %d -c %d -renew=%t; one `cairn server --dev`, bolt data dir in a temporary folder -->\n",
		time.Now().UTC().Format(time.RFC3339), rev, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), o.n, o.conc, o.renew)
	fmt.Println("| instances (services) | RSS idle → after | RSS per instance | heap in use idle → after | heap per instance | registered in |")
	fmt.Println("|---|---|---|---|---|---|")
	fmt.Printf("| %d (%d) | %s → %s | %s | %s → %s | %s | %.1f s (%.0f/s) |\n",
		o.n, services, mib(idle.RSS), mib(after.RSS), kib(r.RSSPerInstance),
		mib(idle.HeapInuse), mib(after.HeapInuse), kib(r.HeapPerInstance), r.RegisterSeconds, r.RegistrationsPS)
	line, _ := json.Marshal(r)
	fmt.Println(string(line))

	if o.hold > 0 {
		fmt.Fprintf(os.Stderr, "membench: server pid %d at http://%s for %s\n", srv.Pid(), srv.httpAddr, o.hold)
		select {
		case <-ctx.Done():
		case <-srv.Exited():
		case <-time.After(o.hold):
		}
	}
	return nil
}

// server is the cairn process under measurement.
type server struct {
	*benchproc.Process
	httpAddr string
	hc       *http.Client
}

// startServer starts `cairn server --dev` on free loopback ports with its
// data in dir and waits until it is ready.
func startServer(ctx context.Context, bin, dir string, extra []string) (*server, error) {
	ports, err := integration.FreePorts(4)
	if err != nil {
		return nil, err
	}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	s := &server{httpAddr: addr(ports[0]), hc: &http.Client{Timeout: 10 * time.Second}}
	args := append([]string{"server", "--dev", "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", s.httpAddr, "--raft-addr", addr(ports[1]), "--dns-addr", addr(ports[2]),
		"--grpc-addr", addr(ports[3]), "--log-level", "warn"}, extra...)
	if s.Process, err = benchproc.Start(bin, args, filepath.Join(dir, "server.log")); err != nil {
		return nil, err
	}
	if err := s.WaitReady(ctx, s.hc, "http://"+s.httpAddr+"/readyz", 30*time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("starting the server: %w\n%s", err, s.Tail())
	}
	return s, nil
}

// read samples the server's memory.
func (s *server) read(ctx context.Context) (sample, error) {
	var out sample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", s.Pid()))
	if err != nil {
		return out, fmt.Errorf("reading the server's VmRSS: %w", err)
	}
	if out.RSS, err = statusKB(b, "VmRSS"); err != nil {
		return out, err
	}
	if out.RSSAnon, err = statusKB(b, "RssAnon"); err != nil {
		return out, err
	}
	if out.RSSFile, err = statusKB(b, "RssFile"); err != nil {
		return out, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.httpAddr+"/metrics", nil)
	if err != nil {
		return out, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return out, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return out, fmt.Errorf("/metrics: %s", resp.Status)
	}
	m, err := scrape(resp.Body, "go_memstats_heap_inuse_bytes", "cairn_health_table_build_seconds_count", "go_gc_duration_seconds_count",
		"go_memstats_heap_idle_bytes", "go_memstats_heap_released_bytes", "go_memstats_next_gc_bytes")
	if err != nil {
		return out, err
	}
	out.HeapInuse, out.Builds, out.GCs = uint64(m[0]), uint64(m[1]), uint64(m[2])
	out.HeapIdle, out.HeapReleased, out.NextGC = uint64(m[3]), uint64(m[4]), uint64(m[5])
	return out, nil
}

// settle waits until the server has applied revision rev (0: any) and
// published o.rounds status tables since, then watches it for two garbage
// collections, or for collectWindow after the first if the second is
// slow to come. What the heap holds right after a collection is what
// the server keeps; between two it also holds the garbage its health
// loop makes, and a collection that lands in the middle of a catalog
// refresh marks two catalogs. So the heap figure is the least heap in
// use seen after the first collection, and RSS is the last reading. It
// returns that sample and how long settling took.
func (s *server) settle(ctx context.Context, o options, rev uint64) (sample, time.Duration, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, o.settle)
	defer cancel()
	first, err := s.read(ctx)
	if err != nil {
		return first, 0, err
	}
	last := first
	var (
		gcs       uint64    // the collections counted once the rounds were done; 0 before
		firstGC   time.Time // when the first collection after that was seen
		minHeap   uint64    // the least heap in use since
		watching  bool      // since the first collection
		finishing bool      // since the second, or collectWindow after the first
	)
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return last, 0, fmt.Errorf("not settled in %s (last: RSS %s, heap in use %s, %d tables built, %d collections): %w",
				o.settle, mib(last.RSS), mib(last.HeapInuse), last.Builds-first.Builds, last.GCs-first.GCs, ctx.Err())
		case <-s.Exited():
			return last, 0, errors.New("the server exited")
		case <-tick.C:
		}
		cur, err := s.read(ctx)
		if err != nil {
			return cur, 0, err
		}
		last = cur
		switch {
		case gcs == 0:
			if rev > 0 {
				applied, err := s.revision(ctx)
				if err != nil {
					return cur, 0, err
				}
				if applied < rev {
					first = cur // the rounds count from the revision
					continue
				}
			}
			if cur.Builds-first.Builds >= uint64(o.rounds) {
				gcs = cur.GCs
			}
		case !watching:
			if cur.GCs > gcs {
				watching, firstGC, minHeap = true, time.Now(), cur.HeapInuse
			}
		case !finishing:
			minHeap = min(minHeap, cur.HeapInuse)
			// After the second collection, one more reading: its sweep.
			finishing = cur.GCs >= gcs+2 || time.Since(firstGC) > collectWindow
		default:
			cur.HeapInuse = min(minHeap, cur.HeapInuse)
			return cur, time.Since(start), nil
		}
	}
}

// collectWindow bounds the wait for a second collection after the first.
const collectWindow = 30 * time.Second

// revision reads the server's applied store revision.
func (s *server) revision(ctx context.Context) (uint64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.httpAddr+"/v1/status", nil)
	if err != nil {
		return 0, err
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var st struct {
		Revision uint64 `json:"revision"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return 0, fmt.Errorf("/v1/status: %w", err)
	}
	return st.Revision, nil
}

// statusKB returns the named field (VmRSS, RssAnon, …), in bytes, from
// the text of /proc/PID/status.
func statusKB(status []byte, field string) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest) // "123456 kB"
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("%s line %q", field, sc.Text())
		}
		kb, err := strconv.ParseUint(f[0], 10, 64)
		return kb * 1024, err
	}
	return 0, fmt.Errorf("no %s line in /proc/PID/status", field)
}

// scrape returns the values of the named unlabelled samples from a
// Prometheus text exposition, in order; a missing one is an error.
func scrape(r io.Reader, names ...string) ([]float64, error) {
	vals := make([]float64, len(names))
	found := make([]bool, len(names))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		for i, n := range names {
			if name == n {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return nil, fmt.Errorf("/metrics: %s %q: %w", n, v, err)
				}
				vals[i], found[i] = f, true
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for i, ok := range found {
		if !ok {
			return nil, fmt.Errorf("/metrics has no %s", names[i])
		}
	}
	return vals, nil
}

// serviceName is the name of service i.
func serviceName(i int) string { return fmt.Sprintf("s%05d", i) }

// applyServices defines the services, 50 to a request (each request
// stays well under the API's 1 MiB body limit).
func applyServices(ctx context.Context, cl *client.Client, n int) error {
	const batch = 50
	for i := 0; i < n; i += batch {
		var b strings.Builder
		for j := i; j < min(i+batch, n); j++ {
			fmt.Fprintf(&b, "---\nnamespace: %s\nname: %s\nports: [{name: http, number: 8080, protocol: tcp}]\npolicy:\n  lease_ttl: 1h\n",
				benchNS, serviceName(j))
		}
		if _, err := cl.Apply(ctx, []byte(b.String())); err != nil {
			return err
		}
	}
	return nil
}

// instanceKey is the key of instance i.
func instanceKey(i, services int) wire.InstanceKey {
	return wire.InstanceKey{Namespace: benchNS, Service: serviceName(i % services), ID: fmt.Sprintf("i-%07d", i)}
}

// register registers o.n instances, round robin over the services, from
// o.conc workers, and returns each instance's incarnation. It stops at
// the first error a retry did not cure.
func register(ctx context.Context, cl *client.Client, o options, services int) ([]uint64, error) {
	incs := make([]uint64, o.n) // each worker writes only the indexes it took
	err := each(ctx, o.n, o.conc, func(ctx context.Context, i int) error {
		k := instanceKey(i, services)
		reg := wire.Registration{
			ID: k.ID,
			// Unique addresses: 10.0.0.1 and up, skipping .0 and .255.
			Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i/(254*256)%256, i/254%256, i%254+1)},
			Ports:     map[string]int{"http": 8080},
		}
		r, err := cl.Register(ctx, k.Namespace, k.Service, reg)
		if err == nil && !r.Created {
			err = fmt.Errorf("registration %s was not new", reg.ID)
		}
		incs[i] = r.Incarnation
		if err != nil {
			return fmt.Errorf("instance %s: %w", reg.ID, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return incs, nil
}

// renew renews each instance once, from o.conc workers, stopping at the
// first error a retry did not cure.
func renew(ctx context.Context, cl *client.Client, o options, services int, incs []uint64) error {
	return each(ctx, o.n, o.conc, func(ctx context.Context, i int) error {
		if _, err := cl.Renew(ctx, instanceKey(i, services), incs[i]); err != nil {
			return fmt.Errorf("instance %s: %w", instanceKey(i, services), err)
		}
		return nil
	})
}

// each calls f for every index below n from conc workers, each index
// once, and stops them all at the first error, which it returns (or
// ctx's).
func each(ctx context.Context, n, conc int, f func(ctx context.Context, i int) error) error {
	var (
		next     atomic.Int64
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range conc {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					errOnce.Do(func() { firstErr = err })
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	return ctx.Err()
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func kib(b float64) string { return fmt.Sprintf("%.2f KiB", b/1024) }
