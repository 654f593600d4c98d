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
// last write, then two collections), and reads both figures again:
// "settled". It then leaves the server alone for -quiet (60 s), reads
// them again ("quiet": what the collector's own pace keeps resident),
// forces a collection through the server's --debug-addr and reads them
// once more ("forced"; the idle server was read the same way). It
// prints one Markdown table row and one JSON line with the same figures
// (and where the rest of the resident set is: heap idle and released,
// stacks, bolt's mapped raft.db); the per-instance figures are
// (after − idle) / n for each reading.
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
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
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
	quiet       time.Duration
	profile     string
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
	flag.DurationVar(&o.quiet, "quiet", 60*time.Second, "after the settled reading, read again after this long without forcing a collection, then force one and read again")
	flag.StringVar(&o.profile, "profile", "", "write the server's heap profiles (idle and after, each taken with the forced collection) into this folder")
	flag.BoolVar(&o.renew, "renew", false, "renew every instance once after registering it, as a live instance does, before reading the figures")
	flag.StringVar(&o.serverFlags, "server-flags", "", "extra flags for `cairn server`, space-separated")
	flag.Parse()
	if o.n < 1 || o.perService < 1 || o.conc < 1 || o.rounds < 1 || o.settle <= 0 || o.timeout <= 0 || o.hold < 0 || o.quiet < 0 {
		fmt.Fprintln(os.Stderr, "membench: -n, -per-service, -c, -rounds, -settle and -timeout must be positive, -hold and -quiet not negative")
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

// report is the JSON line: the same figures as the Markdown row.
type report struct {
	Rev          string  `json:"cairn"`
	Go           string  `json:"go"`
	Instances    int     `json:"instances"`
	Services     int     `json:"services"`
	Renewed      bool    `json:"renewed"`
	Idle         sample  `json:"idle"`
	IdleForced   sample  `json:"idle_forced"` // the idle server right after a forced collection
	After        sample  `json:"after"`       // settled: two collections of its own after the last write
	Quiet        sample  `json:"quiet"`       // -quiet later, no collection forced
	Forced       sample  `json:"forced"`      // right after that, a forced collection
	QuietSeconds float64 `json:"quiet_seconds"`
	// What the server spent while left alone for -quiet: its CPU, in
	// percent of one core, and the collections it ran.
	QuietCPUPercent float64 `json:"quiet_cpu_percent"`
	QuietGCs        uint64  `json:"quiet_gcs"`
	RSSPerInstance  float64 `json:"rss_bytes_per_instance"`
	HeapPerInstance float64 `json:"heap_inuse_bytes_per_instance"`
	// Quiet − Idle and Forced − IdleForced, over the instances.
	RSSPerInstanceQuiet   float64 `json:"rss_bytes_per_instance_quiet"`
	HeapPerInstanceQuiet  float64 `json:"heap_inuse_bytes_per_instance_quiet"`
	RSSPerInstanceForced  float64 `json:"rss_bytes_per_instance_forced"`
	HeapPerInstanceForced float64 `json:"heap_inuse_bytes_per_instance_forced"`
	RegisterSeconds       float64 `json:"register_seconds"`
	RegistrationsPS       float64 `json:"registrations_per_second"`
	SettleSeconds         float64 `json:"settle_seconds"`
	ServerRevision        uint64  `json:"server_revision"`
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
	idleForced, err := srv.forced(ctx, o, "idle")
	if err != nil {
		return err
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
	select { // no collection forced: what the server holds on its own
	case <-ctx.Done():
		return ctx.Err()
	case <-srv.Exited():
		return errors.New("the server exited")
	case <-time.After(o.quiet):
	}
	quiet, err := srv.read(ctx)
	if err != nil {
		return err
	}
	forced, err := srv.forced(ctx, o, "after")
	if err != nil {
		return err
	}

	// The revision of the working tree says what was measured only when
	// the server was built from it.
	rev := "unknown"
	if o.bin != "" {
		rev = "-bin " + o.bin
	} else if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		rev = strings.TrimSpace(string(out))
	}
	per := func(a, b uint64) float64 { return (float64(a) - float64(b)) / float64(o.n) }
	r := report{Rev: rev, Go: runtime.Version(), Instances: o.n, Services: services, Renewed: o.renew,
		Idle: idle, IdleForced: idleForced, After: after, Quiet: quiet, Forced: forced, QuietSeconds: o.quiet.Seconds(),
		QuietCPUPercent:       100 * (quiet.CPU - after.CPU) / max(o.quiet.Seconds(), 1e-9),
		QuietGCs:              quiet.GCs - after.GCs,
		RSSPerInstance:        per(after.RSS, idle.RSS),
		HeapPerInstance:       per(after.HeapInuse, idle.HeapInuse),
		RSSPerInstanceQuiet:   per(quiet.RSS, idle.RSS),
		HeapPerInstanceQuiet:  per(quiet.HeapInuse, idle.HeapInuse),
		RSSPerInstanceForced:  per(forced.RSS, idleForced.RSS),
		HeapPerInstanceForced: per(forced.HeapInuse, idleForced.HeapInuse),
		RegisterSeconds:       regTime.Seconds(),
		RegistrationsPS:       float64(o.n) / regTime.Seconds(),
		SettleSeconds:         settled.Seconds(),
		ServerRevision:        st.Revision,
	}
	fmt.Printf("<!-- membench %s: cairn %s, %s, %s/%s, %d CPUs, -n %d -c %d -renew=%t; one `cairn server --dev`, bolt data dir in a temporary folder -->\n",
		time.Now().UTC().Format(time.RFC3339), rev, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), o.n, o.conc, o.renew)
	fmt.Printf("| instances (services) | RSS idle → after | RSS per instance: settled / %s later / forced GC | heap in use idle → after | heap per instance: settled / %s later / forced GC | raft.db RSS | CPU, GCs in the %s | registered in |\n",
		o.quiet, o.quiet, o.quiet)
	fmt.Println("|---|---|---|---|---|---|---|---|")
	fmt.Printf("| %d (%d) | %s → %s | %s / %s / %s | %s → %s | %s / %s / %s | %s | %.1f%%, %d | %.1f s (%.0f/s) |\n",
		o.n, services, mib(idle.RSS), mib(after.RSS), kib(r.RSSPerInstance), kib(r.RSSPerInstanceQuiet), kib(r.RSSPerInstanceForced),
		mib(idle.HeapInuse), mib(after.HeapInuse), kib(r.HeapPerInstance), kib(r.HeapPerInstanceQuiet), kib(r.HeapPerInstanceForced),
		mib(forced.RaftDB), r.QuietCPUPercent, r.QuietGCs, r.RegisterSeconds, r.RegistrationsPS)
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
	httpAddr  string
	debugAddr string // --debug-addr: net/http/pprof
	hc        *http.Client
}

// startServer starts `cairn server --dev` on free loopback ports with its
// data in dir and waits until it is ready.
func startServer(ctx context.Context, bin, dir string, extra []string) (*server, error) {
	ports, err := integration.FreePorts(5)
	if err != nil {
		return nil, err
	}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	s := &server{httpAddr: addr(ports[0]), debugAddr: addr(ports[4]), hc: &http.Client{Timeout: time.Minute}}
	args := append([]string{"server", "--dev", "--data-dir", filepath.Join(dir, "data"),
		"--http-addr", s.httpAddr, "--raft-addr", addr(ports[1]), "--dns-addr", addr(ports[2]),
		"--grpc-addr", addr(ports[3]), "--debug-addr", s.debugAddr, "--log-level", "warn"}, extra...)
	if s.Process, err = benchproc.Start(bin, args, filepath.Join(dir, "server.log")); err != nil {
		return nil, err
	}
	if err := s.WaitReady(ctx, s.hc, "http://"+s.httpAddr+"/readyz", 30*time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("starting the server: %w\n%s", err, s.Tail())
	}
	return s, nil
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

// forced forces a collection in the server and reads its memory right
// after; with -profile it keeps the heap profile as heap-<name>.pb.gz.
func (s *server) forced(ctx context.Context, o options, name string) (sample, error) {
	prof, err := s.forceGC(ctx)
	if err != nil {
		return sample{}, err
	}
	out, err := s.read(ctx)
	if err != nil || o.profile == "" {
		return out, err
	}
	if err := os.MkdirAll(o.profile, 0o755); err != nil {
		return out, err
	}
	return out, os.WriteFile(filepath.Join(o.profile, "heap-"+name+".pb.gz"), prof, 0o644)
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
