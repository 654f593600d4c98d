// Command xdsbench measures cairn's xDS server under many delta
// subscriptions (SPEC §9: withdrawal propagation p99 < 1 s to 60,000
// delta-xDS subscriptions on one node, 400 services, each subscriber
// watching 10; ≤ 20 KiB per subscription).
//
// Server and subscribers run in this one process, on loopback, as the
// go-control-plane figures of ../shared/research/xds.md were measured:
// the subscribers share the machine's two cores with the server, so the
// figures are pessimistic for the server alone. It publishes a status
// table of -services services × -endpoints endpoints, serves it with
// xdsserver, opens -streams delta streams over -conns connections (each
// subscribing to the assignments of -watch services chosen at random,
// with a fixed seed), and reports how long they took to be answered
// (admission). It then makes -changes changes, one every -interval, each
// withdrawing or restoring one endpoint of one service, and reports, for
// every stream watching the changed service, the time from the table's
// publication to the stream's receipt of the assignment built from it
// (each response names its table's store revision in
// system_version_info; the bench stamps each table with its version as
// its revision). The subscribers record names and versions only, never
// decoding the resources, and acknowledge every response.
//
// It prints one Markdown row and one JSON line. Every wait has a
// deadline and the whole run -timeout; everything it starts stops with
// it. `go run ./bench/cmd/xdsbench [-streams 2000]`.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/xdsserver"
)

type options struct {
	streams, conns, services, endpoints, watch, changes int
	interval, timeout                                   time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.streams, "streams", 2000, "delta subscriptions")
	flag.IntVar(&o.conns, "conns", 100, "HTTP/2 connections the streams share")
	flag.IntVar(&o.services, "services", 400, "services")
	flag.IntVar(&o.endpoints, "endpoints", 8, "endpoints per service")
	flag.IntVar(&o.watch, "watch", 10, "services each subscriber watches")
	flag.IntVar(&o.changes, "changes", 30, "withdrawals and restorations to time")
	flag.DurationVar(&o.interval, "interval", 100*time.Millisecond, "time between changes (100ms: 600 a minute)")
	flag.DurationVar(&o.timeout, "timeout", 10*time.Minute, "the whole run")
	flag.Parse()
	ctx, cancel := context.WithTimeout(context.Background(), o.timeout)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "xdsbench:", err)
		os.Exit(1)
	}
}

// world is the published state the bench changes.
type world struct {
	pub      *status.Publisher
	dir      *status.Directory
	names    *status.Names
	eligible []bool // by slot
	o        options
}

func newWorld(o options) (*world, error) {
	pub, err := status.New(status.Config{Capacity: o.services*o.endpoints + 1})
	if err != nil {
		return nil, err
	}
	w := &world{pub: pub, o: o, eligible: make([]bool, o.services*o.endpoints+1)}
	svcs := []status.ServiceInfo{{}}
	var names []string
	for i := range o.services {
		svcs = append(svcs, status.ServiceInfo{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i), MaxEjectionPercent: 10,
			Ports: []status.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}})
		names = append(names, fmt.Sprintf("bench/svc-%d", i))
	}
	w.names = status.NewNames(names...)
	w.dir = &status.Directory{Services: svcs, Instances: make([]*status.InstanceInfo, pub.Capacity())}
	for s := range o.services {
		for e := range o.endpoints {
			slot := 1 + s*o.endpoints + e
			w.dir.Instances[slot] = &status.InstanceInfo{ID: fmt.Sprintf("i-%d", e), Incarnation: 1,
				Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(s >> 8), byte(s), byte(e + 1)})}, Ports: map[string]uint16{"grpc": 8443}}
			w.eligible[slot] = true
		}
	}
	_, err = w.publish()
	return w, err
}

// publish builds the next table from eligible and returns its version.
func (w *world) publish() (uint64, error) {
	return w.pub.Build(func(b *status.Builder) error {
		// Responses name the store revision of their table: the
		// table's version stands for it, so that a response says
		// which change it carries.
		b.SetStoreRevision(b.Version())
		b.SetServices(w.names)
		b.SetLocalities(status.NewNames("eu", "eu-1a"))
		b.SetDirectory(w.dir)
		es := b.Entries()
		for slot := range es {
			if slot == 0 || slot >= len(w.eligible) {
				es[slot] = status.Entry{}
				continue
			}
			e := status.Entry{Key: uint64(slot), Incarnation: 1, Service: uint32(1 + (slot-1)/w.o.endpoints),
				BaseWeight: 100, Region: 1, Zone: 2, Verdict: status.Healthy, Lifecycle: status.Ready}
			if w.eligible[slot] {
				e.Flags, e.Weight = status.Eligible, 100
			} else {
				e.Verdict = status.Unhealthy
			}
			es[slot] = e
		}
		return nil
	})
}

// subscriber is one delta stream's bookkeeping.
type subscriber struct {
	watch    []string // assignment names
	admitted atomic.Int64
	// done counts, per watched service, the changes of it already
	// delivered to this stream (only its own goroutine touches it).
	done map[int]int
}

// sample is one stream's receipt of one changed assignment: the time
// from the change's publication.
type sample struct{ d time.Duration }

func run(ctx context.Context, o options) error {
	w, err := newWorld(o)
	if err != nil {
		return err
	}
	srv, err := xdsserver.New(xdsserver.Config{Table: w.pub, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go gs.Serve(ln)
	defer gs.Stop()
	rctx, stopRun := context.WithCancel(ctx)
	runDone := make(chan struct{})
	go func() { defer close(runDone); _ = srv.Run(rctx) }()
	defer func() { stopRun(); <-runDone }()

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)

	conns := make([]*grpc.ClientConn, o.conns)
	for i := range conns {
		if conns[i], err = grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return err
		}
		defer conns[i].Close()
	}
	rng := rand.New(rand.NewPCG(1, 2))
	subs := make([]*subscriber, o.streams)
	watchers := make([][]int, o.services) // by service: the subscribers watching it
	for i := range subs {
		perm := rng.Perm(o.services)[:min(o.watch, o.services)]
		s := &subscriber{done: map[int]int{}}
		for _, svc := range perm {
			s.watch = append(s.watch, fmt.Sprintf("svc-%d.bench:grpc", svc))
			watchers[svc] = append(watchers[svc], i)
		}
		subs[i] = s
	}

	// changes lists, per service, the changes made to it: the table
	// version that carried each and when it was published. A stream may
	// receive a later version than the one a change was published in
	// (the server sends the newest state), and that delivers every
	// earlier change of the same assignment too.
	type change struct {
		version uint64
		at      time.Time
	}
	var changeMu sync.Mutex
	changes := make([][]change, o.services)
	samplesMu := sync.Mutex{}
	var samples []sample
	var failed atomic.Int64
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	start := time.Now()
	var admittedN atomic.Int64
	allIn := make(chan struct{})
	for i, s := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conns[i%o.conns]).DeltaAggregatedResources(sctx)
			if err != nil {
				failed.Add(1)
				return
			}
			req := &discoveryv3.DeltaDiscoveryRequest{TypeUrl: resourcev3.EndpointType, ResourceNamesSubscribe: s.watch}
			if err := stream.Send(req); err != nil {
				failed.Add(1)
				return
			}
			first := true
			for {
				resp, err := stream.Recv()
				if err != nil {
					if sctx.Err() == nil {
						failed.Add(1)
					}
					return
				}
				now := time.Now()
				if first {
					first = false
					s.admitted.Store(int64(now.Sub(start)))
					if admittedN.Add(1) == int64(o.streams) {
						close(allIn)
					}
				} else if v, err := strconv.ParseUint(resp.SystemVersionInfo, 10, 64); err == nil {
					for _, r := range resp.Resources {
						svc, ok := serviceOf(r.Name)
						if !ok {
							continue
						}
						changeMu.Lock()
						list := changes[svc]
						changeMu.Unlock()
						for s.done[svc] < len(list) && list[s.done[svc]].version <= v {
							samplesMu.Lock()
							samples = append(samples, sample{d: now.Sub(list[s.done[svc]].at)})
							samplesMu.Unlock()
							s.done[svc]++
						}
					}
				}
				if err := stream.Send(&discoveryv3.DeltaDiscoveryRequest{TypeUrl: resp.TypeUrl, ResponseNonce: resp.Nonce}); err != nil {
					return
				}
			}
		}()
	}
	select {
	case <-allIn:
	case <-ctx.Done():
		return fmt.Errorf("only %d of %d streams answered before the deadline (%d failed)", admittedN.Load(), o.streams, failed.Load())
	}
	admitAll := time.Since(start)
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)

	// The changes: one endpoint of a random service out, or back.
	expected := 0
	cpu0 := processCPU()
	for range o.changes {
		svc := rng.IntN(o.services)
		slot := 1 + svc*o.endpoints + rng.IntN(o.endpoints)
		w.eligible[slot] = !w.eligible[slot]
		// Under the lock, so that no stream reads the change list between
		// the publication and its entry.
		changeMu.Lock()
		t0 := time.Now()
		v, err := w.publish()
		if err == nil {
			changes[svc] = append(changes[svc], change{version: v, at: t0})
		}
		changeMu.Unlock()
		if err != nil {
			return err
		}
		expected += len(watchers[svc])
		select {
		case <-time.After(o.interval):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Wait for the last deliveries, with a deadline.
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		samplesMu.Lock()
		n := len(samples)
		samplesMu.Unlock()
		if n >= expected {
			break
		}
		time.Sleep(50 * time.Millisecond) // a poll with a deadline
	}
	cpu := processCPU() - cpu0
	stop()
	wg.Wait()

	adm := make([]time.Duration, 0, len(subs))
	for _, s := range subs {
		adm = append(adm, time.Duration(s.admitted.Load()))
	}
	var del []time.Duration
	for _, s := range samples {
		del = append(del, s.d)
	}
	slices.Sort(adm)
	slices.Sort(del)
	heapPer := (float64(after.HeapInuse) - float64(before.HeapInuse)) / float64(o.streams)
	r := map[string]any{
		"streams": o.streams, "conns": o.conns, "services": o.services, "endpoints": o.endpoints, "watch": o.watch,
		"changes": o.changes, "interval_ms": o.interval.Milliseconds(), "failed": failed.Load(),
		"admitted_all_s": admitAll.Seconds(), "admission_p50_ms": ms(pct(adm, 50)), "admission_p99_ms": ms(pct(adm, 99)),
		"deliveries": len(del), "expected_deliveries": expected,
		"delivery_p50_ms": ms(pct(del, 50)), "delivery_p99_ms": ms(pct(del, 99)), "delivery_max_ms": ms(pct(del, 100)),
		"heap_per_stream_kib_both_sides": heapPer / 1024, "cpu_s_during_changes": cpu.Seconds(),
		"go": runtime.Version(), "cpus": runtime.NumCPU(),
	}
	fmt.Printf("<!-- xdsbench %s: %s, %d CPUs; server and subscribers in one process, loopback -->\n", time.Now().UTC().Format(time.RFC3339), runtime.Version(), runtime.NumCPU())
	fmt.Println("| streams (conns) | all admitted in | admission p50 / p99 | deliveries (of expected) | delivery p50 / p99 / max | heap per stream, both sides | CPU during the changes |")
	fmt.Println("|---|---|---|---|---|---|---|")
	fmt.Printf("| %d (%d) | %.2f s | %.0f / %.0f ms | %d (%d) | %.1f / %.1f / %.1f ms | %.1f KiB | %.2f s for %d changes |\n",
		o.streams, o.conns, admitAll.Seconds(), ms(pct(adm, 50)), ms(pct(adm, 99)), len(del), expected,
		ms(pct(del, 50)), ms(pct(del, 99)), ms(pct(del, 100)), heapPer/1024, cpu.Seconds(), o.changes)
	b, _ := json.Marshal(r)
	fmt.Println(string(b))
	if failed.Load() > 0 {
		return errors.New("some streams failed")
	}
	return nil
}

// pct returns the p-th percentile (nearest rank) of sorted ds; 100 is
// the max.
func pct(ds []time.Duration, p int) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := (len(ds)*p + 99) / 100
	return ds[min(max(i-1, 0), len(ds)-1)]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// processCPU returns this process's user and system CPU time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// serviceOf returns the index of the service an assignment name
// ("svc-N.bench:grpc") belongs to.
func serviceOf(name string) (int, bool) {
	var n int
	if _, err := fmt.Sscanf(name, "svc-%d.bench:grpc", &n); err != nil {
		return 0, false
	}
	return n, true
}
