// Command storebench measures cairn's store through its HTTP API against
// real server processes on loopback, started by the integration harness:
//
//   - registrations/s and renewals/s with -c concurrent clients for -d, on
//     one node and on a 3-node cluster (requests sent to the leader);
//   - leader failover: kill -9 of the leader of a 3-node cluster while a
//     writer registers at -failover-rate writes/s, to the first accepted
//     write sent after the kill, over -failover-runs runs (p50, p90, p99,
//     max), split into phases read from the survivors' logs, with DNS
//     queries to the live nodes throughout (every one must be answered),
//     and how long the restarted node takes to reach the leader's applied
//     revision; then, with -calm, the elections nobody caused while the
//     cluster stays up under load (failover.go);
//   - as a reference measured in the same run, etcd puts/s on one node
//     with the same concurrency through etcd's v3 JSON gateway
//     (POST /v3/kv/put), if an etcd binary is found (-etcd).
//
// Every load loop stops by itself: after -d or -max-ops operations,
// whichever comes first. Results are printed as markdown table rows for
// BENCHMARKS.md. Run it from the module root: `make bench`, or
// `go run ./bench/cmd/storebench [flags]`.
package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
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

const (
	benchNS  = "bench"
	benchSvc = "reg"
)

// benchService keeps every registration alive and in place for the whole
// run: long leases, no health check.
const benchService = `namespace: bench
name: reg
ports: [{name: http, number: 8080, protocol: tcp}]
policy:
  lease_ttl: 1h
`

type options struct {
	conc           int
	dur            time.Duration
	maxOps         int
	failoverRuns   int
	failoverRate   int
	failoverSteady time.Duration
	dnsRate        int
	serverArgs     []string
	calm           time.Duration
	calmHogs       int
	calmDNSRate    int
	etcd           string
	keep           bool
	skipThroughpt  bool
}

func main() {
	var o options
	flag.IntVar(&o.conc, "c", 16, "concurrent clients in the throughput runs")
	flag.DurationVar(&o.dur, "d", 10*time.Second, "duration of each throughput run")
	flag.IntVar(&o.maxOps, "max-ops", 2_000_000, "upper bound on the operations of one throughput run")
	flag.IntVar(&o.failoverRuns, "failover-runs", 60, "leader kills to measure (0 skips)")
	flag.IntVar(&o.failoverRate, "failover-rate", 50, "writes/s the writer offers during the failover runs")
	flag.DurationVar(&o.failoverSteady, "failover-steady", time.Second, "writes accepted for this long before each kill")
	flag.StringVar(&o.etcd, "etcd", "etcd", "etcd binary for the reference figure (looked up in PATH); empty skips it")
	flag.BoolVar(&o.keep, "keep", false, "keep the data dirs and server logs (their folder is printed)")
	flag.BoolVar(&o.skipThroughpt, "skip-throughput", false, "only measure failover (and etcd)")
	flag.IntVar(&o.dnsRate, "dns-rate", 200, "DNS queries/s sent to the live nodes during the failover runs")
	serverArgs := flag.String("server-args", "", "extra `cairn server` flags for every node, space-separated (e.g. --raft-election-timeout=200ms)")
	flag.DurationVar(&o.calm, "calm", 0, "after the failover runs, count elections nobody caused for this long, the writer and DNS load running (0 skips)")
	flag.IntVar(&o.calmHogs, "calm-hogs", 0, "busy-looping processes started beside the cluster during -calm")
	flag.IntVar(&o.calmDNSRate, "calm-dns-rate", 2000, "DNS queries/s during -calm")
	flag.Parse()
	o.serverArgs = strings.Fields(*serverArgs)
	if d := os.Getenv(hogEnv); d != "" {
		hog(d) // a -calm-hogs child
		return
	}
	if o.conc < 1 || o.dur <= 0 || o.maxOps < 1 || o.failoverRate < 1 || o.dnsRate < 1 || o.calmDNSRate < 1 || o.calmHogs < 0 {
		fmt.Fprintln(os.Stderr, "storebench: -c, -d, -max-ops, -failover-rate, -dns-rate and -calm-dns-rate must be positive, -calm-hogs not negative")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, o)
	stop()
	integration.RemoveBinary()
	if err != nil {
		fmt.Fprintln(os.Stderr, "storebench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	// The client package uses http.DefaultTransport, which keeps only 2
	// idle connections per host: with 16 clients most requests would open
	// a new connection. Keep enough for every client.
	if tr, ok := http.DefaultTransport.(*http.Transport); ok {
		tr.MaxIdleConnsPerHost = max(64, 2*o.conc)
		tr.MaxIdleConns = max(256, 4*o.conc)
	}
	dir, remove, err := benchproc.TempDir("storebench", o.keep)
	if err != nil {
		return err
	}
	defer remove()
	bin, err := integration.Binary()
	if err != nil {
		return err
	}
	rev := "unknown"
	if out, err := exec.CommandContext(ctx, "git", "describe", "--always", "--dirty").Output(); err == nil {
		rev = strings.TrimSpace(string(out))
	}
	fmt.Printf("<!-- storebench %s: cairn %s (binary %s), %s, %s/%s, %d CPUs, -c %d -d %s, server args %q; servers and clients share the machine -->\n",
		time.Now().UTC().Format(time.RFC3339), rev, bin, runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), o.conc, o.dur, o.serverArgs)
	fmt.Println("| measurement | result | details |")
	fmt.Println("|---|---|---|")

	if !o.skipThroughpt {
		for _, nodes := range []int{1, 3} {
			if err := throughput(ctx, o, bin, filepath.Join(dir, fmt.Sprintf("tp%d", nodes)), nodes); err != nil {
				return fmt.Errorf("%d-node throughput: %w", nodes, err)
			}
		}
	}
	if o.failoverRuns > 0 || o.calm > 0 {
		if err := failover(ctx, o, bin, filepath.Join(dir, "failover")); err != nil {
			return fmt.Errorf("failover: %w", err)
		}
	}
	if o.etcd != "" {
		if err := etcdPuts(ctx, o, filepath.Join(dir, "etcd")); err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
	}
	return nil
}

// startCluster starts a cluster with the harness and applies the bench
// service through its leader.
func startCluster(ctx context.Context, o options, bin, dir string, nodes int) (*integration.Cluster, *integration.Node, error) {
	c, err := integration.New(integration.Config{Nodes: nodes, Dir: dir, Bin: bin, Args: o.serverArgs})
	if err != nil {
		return nil, nil, err
	}
	if err := c.Start(); err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("%w\n%s", err, c.Logs(40))
	}
	leader, err := c.WaitLeader(30 * time.Second)
	if err == nil {
		err = retry(ctx, 30*time.Second, func() error {
			_, err := leader.Client().Apply(ctx, []byte(benchService))
			return err
		})
	}
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("%w\n%s", err, c.Logs(40))
	}
	return c, leader, nil
}

// retry calls f until it succeeds, fails with a non-retryable error, or d
// has passed.
func retry(ctx context.Context, d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || !client.IsRetryable(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// load is the result of one throughput run.
type load struct {
	ok, failed int
	elapsed    time.Duration
	lat        []time.Duration // of successful operations
	firstErr   error
}

func (l load) rate() float64 { return float64(l.ok) / l.elapsed.Seconds() }

func (l load) details() string {
	s := fmt.Sprintf("%d ok, %d failed in %.1f s; latency p50 %s, p99 %s, max %s",
		l.ok, l.failed, l.elapsed.Seconds(), ms(pct(l.lat, 50)), ms(pct(l.lat, 99)), ms(pct(l.lat, 100)))
	if l.firstErr != nil {
		s += "; first error: " + strings.ReplaceAll(l.firstErr.Error(), "|", "/")
	}
	return s
}

// runLoad runs op from conc workers until d has passed or maxOps
// operations were made. op gets the worker and its operation number.
func runLoad(ctx context.Context, conc int, d time.Duration, maxOps int, op func(ctx context.Context, w, i int) error) load {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var (
		mu    sync.Mutex
		total load
		next  atomic.Int64
		wg    sync.WaitGroup
	)
	start := time.Now()
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine load
			for i := 0; ctx.Err() == nil; i++ {
				if next.Add(1) > int64(maxOps) {
					break
				}
				t0 := time.Now()
				err := op(ctx, w, i)
				if err != nil {
					if ctx.Err() != nil {
						break // cut off by the deadline: not a failure
					}
					mine.failed++
					if mine.firstErr == nil {
						mine.firstErr = err
					}
					continue
				}
				mine.ok++
				mine.lat = append(mine.lat, time.Since(t0))
			}
			mu.Lock()
			total.ok += mine.ok
			total.failed += mine.failed
			total.lat = append(total.lat, mine.lat...)
			if total.firstErr == nil {
				total.firstErr = mine.firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	total.elapsed = time.Since(start)
	return total
}

func regOf(w, i int) wire.Registration {
	return wire.Registration{
		ID:        fmt.Sprintf("b-w%02d-%07d", w, i),
		Addresses: []string{fmt.Sprintf("10.%d.%d.%d", w%250, (i/250)%250, i%250+1)},
		Ports:     map[string]int{"http": 8080},
	}
}

// throughput measures registrations/s, then renewals/s of the instances
// registered, sending everything to the leader.
func throughput(ctx context.Context, o options, bin, dir string, nodes int) error {
	c, leader, err := startCluster(ctx, o, bin, dir, nodes)
	if err != nil {
		return err
	}
	defer c.Close()
	cl := leader.Client()
	where := "1 node"
	if nodes > 1 {
		where = fmt.Sprintf("%d nodes, to the leader", nodes)
	}

	// What each worker got acknowledged, to renew it next. Each worker
	// appends to its own slice only.
	type acked struct {
		key wire.InstanceKey
		inc uint64
	}
	regs := make([][]acked, o.conc)
	reg := runLoad(ctx, o.conc, o.dur, o.maxOps, func(ctx context.Context, w, i int) error {
		r, err := cl.Register(ctx, benchNS, benchSvc, regOf(w, i))
		if err != nil {
			return err
		}
		if !r.Created {
			return fmt.Errorf("registration %s was not new", r.ID)
		}
		regs[w] = append(regs[w], acked{r.Key(), r.Incarnation})
		return nil
	})
	fmt.Printf("| cairn registrations/s, %s, %d clients | %.0f | %s |\n", where, o.conc, reg.rate(), reg.details())
	if ctx.Err() != nil {
		return ctx.Err()
	}

	// Each worker renews what it registered, round robin.
	for w := range o.conc {
		if len(regs[w]) == 0 {
			return fmt.Errorf("worker %d registered nothing to renew", w)
		}
	}
	ren := runLoad(ctx, o.conc, o.dur, o.maxOps, func(ctx context.Context, w, i int) error {
		a := regs[w][i%len(regs[w])]
		_, err := cl.Renew(ctx, a.key, a.inc)
		return err
	})
	fmt.Printf("| cairn renewals/s, %s, %d clients | %.0f | %s; the %d instances registered above, round robin |\n",
		where, o.conc, ren.rate(), ren.details(), reg.ok)
	return nil
}

// etcdPuts starts a single etcd member on loopback and measures puts/s
// through its v3 JSON gateway with the same concurrency and duration.
func etcdPuts(ctx context.Context, o options, dir string) error {
	bin, err := exec.LookPath(o.etcd)
	if err != nil {
		fmt.Printf("| etcd puts/s, 1 node, %d clients | not measured | no etcd binary (%v); on Debian: apt-get install etcd-server |\n", o.conc, err)
		return nil
	}
	version := "etcd"
	if out, err := exec.CommandContext(ctx, bin, "--version").Output(); err == nil {
		// "etcd Version: 3.4.23\nGit SHA: ..."
		first := strings.SplitN(string(out), "\n", 2)[0]
		if _, v, ok := strings.Cut(first, "Version: "); ok {
			version = "etcd " + strings.TrimSpace(v)
		}
	}
	ports, err := integration.FreePorts(2)
	if err != nil {
		return err
	}
	clientURL := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(dir, "etcd.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--name", "bench", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", clientURL, "--advertise-client-urls", clientURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "bench="+peerURL, "--log-level", "warn")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = integration.SysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	defer func() {
		cmd.Process.Kill()
		<-exited
	}()
	hc := &http.Client{Timeout: 5 * time.Second}
	err = integration.Poll(30*time.Second, 50*time.Millisecond, func() error {
		select {
		case <-exited:
			return fmt.Errorf("etcd exited: %s", tail(filepath.Join(dir, "etcd.log")))
		default:
		}
		resp, err := hc.Get(clientURL + "/health")
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"true"`)) {
			return fmt.Errorf("/health: %d %s", resp.StatusCode, b)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The value is what a cairn registration carries in its request body,
	// so that both move the same bytes.
	put := func(ctx context.Context, w, i int) error {
		r := regOf(w, i)
		val, _ := json.Marshal(r)
		body, _ := json.Marshal(map[string]string{
			"key":   base64.StdEncoding.EncodeToString([]byte("/cairn/" + benchNS + "/" + benchSvc + "/" + r.ID)),
			"value": base64.StdEncoding.EncodeToString(val),
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, clientURL+"/v3/kv/put", bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(b, []byte(`"header"`)) {
			return fmt.Errorf("put: %d %s", resp.StatusCode, b)
		}
		return nil
	}
	res := runLoad(ctx, o.conc, o.dur, o.maxOps, put)
	fmt.Printf("| %s puts/s (reference), 1 node, %d clients, v3 JSON gateway | %.0f | %s |\n", version, o.conc, res.rate(), res.details())
	return nil
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// pct returns the p-th percentile (nearest rank) of ds; 100 is the max.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	k := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(k, 1), len(s))-1]
}

func ms(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
}
