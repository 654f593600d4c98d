// Package probebench measures the probe pool's throughput (issue 3): a
// real Prober, at its default Workers and with Capacity 10,000, probing
// 10,000 targets on loopback, and how many due probes it skips.
//
// Opening 10,000 listeners is impractical, so the 10,000 targets, each
// with its own ID and so its own schedule, are spread over a few loopback
// servers: 16 TCP listeners that accept and close every connection, or 4
// HTTP servers that answer 200. The Interval sets the offered load:
// 10,000 targets every 1s is 10,000 probes/s; every 100ms (MinInterval),
// 100,000 probes/s, more than the pool can do, which shows its ceiling.
//
// One op is one published Batch (BatchInterval 1s), taken from Batches()
// as a consumer would; the rates are counted from the prober's Prometheus
// metrics over the ops, after a warm-up of two batches. Run it with a
// fixed count of ops, so that every run measures the same window:
//
//	go test -run='^$' -bench=. -benchtime=10x -count=3 ./bench/probe/
//
// The metrics:
//
//	probes/s          checks completed (cairn_probe_probes_total, all results)
//	failed/s          of those, checks that did not pass (fail or hard)
//	skipped-busy/s    due probes skipped because every worker was busy
//	skipped-inflight/s due probes skipped because the target's previous
//	                  probe had not finished
//	fresh-slots       targets with a result in the last batch taken
package probebench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/cairn-sd/cairn/probe"
)

// TestMain fails the run if a benchmark leaves a goroutine behind: every
// prober, listener and server is stopped and waited for.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	targets   = 10_000
	warmup    = 2 // batches taken before the counters are read
	tcpAddrs  = 16
	httpAddrs = 4
)

func BenchmarkProber(b *testing.B) {
	for _, c := range []struct {
		kind     probe.Kind
		interval time.Duration
	}{
		{probe.TCP, time.Second},
		{probe.TCP, probe.MinInterval},
		{probe.HTTP, time.Second},
	} {
		b.Run(fmt.Sprintf("%s/10k/interval=%v", c.kind, c.interval), func(b *testing.B) {
			var addrs []netip.AddrPort
			if c.kind == probe.TCP {
				addrs = tcpServers(b, tcpAddrs)
			} else {
				addrs = httpServers(b, httpAddrs)
			}
			benchProber(b, c.kind, c.interval, addrs)
		})
	}
}

// benchProber probes 10,000 targets of kind spread over addrs every
// interval, and reports the rates over b.N batches.
func benchProber(b *testing.B, kind probe.Kind, interval time.Duration, addrs []netip.AddrPort) {
	reg := prometheus.NewRegistry()
	p, err := probe.New(probe.Config{
		Observer:   "bench-node",
		Capacity:   targets,
		Logger:     slog.New(slog.DiscardHandler),
		Registerer: reg,
	})
	if err != nil {
		b.Fatal(err)
	}
	ts := make([]probe.Target, targets)
	for i := range ts {
		ts[i] = probe.Target{
			ID:       fmt.Sprintf("bench/svc-%d/i-%d#1", i%100, i),
			Kind:     kind,
			Addr:     addrs[i%len(addrs)],
			Interval: interval,
			Timeout:  interval / 2,
		}
		if kind == probe.HTTP {
			ts[i].Path = "/healthz"
		}
	}
	if err := p.SetTargets(ts); err != nil {
		b.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- p.Run(ctx) }()
	// Stop Run and wait for it (it waits for its workers and closes its
	// connections) before the servers' cleanups close them.
	defer func() {
		cancel()
		for range p.Batches() { // drained and closed when Run returns
		}
		if err := <-ran; err != nil {
			b.Error(err)
		}
	}()

	next := func() *probe.Batch {
		select {
		case batch, ok := <-p.Batches():
			if !ok {
				b.Fatal("Batches closed while running")
			}
			return batch
		case <-time.After(10 * time.Second):
			b.Fatal("no batch in 10s")
		}
		return nil
	}
	for range warmup {
		next()
	}

	c0, t0 := read(b, reg), time.Now()
	var last *probe.Batch
	for b.Loop() {
		last = next()
	}
	c1, t1 := read(b, reg), time.Now()

	secs := t1.Sub(t0).Seconds()
	d := c1.sub(c0)
	b.ReportMetric(d.probes/secs, "probes/s")
	b.ReportMetric(d.failed/secs, "failed/s")
	b.ReportMetric(d.busy/secs, "skipped-busy/s")
	b.ReportMetric(d.inFlight/secs, "skipped-inflight/s")
	fresh, ok := 0, 0
	var sample string
	for _, r := range last.Results {
		if r.TargetID == "" {
			continue
		}
		fresh++
		if r.OK {
			ok++
		} else if sample == "" {
			sample = r.Err
		}
	}
	b.ReportMetric(float64(fresh), "fresh-slots")
	if len(last.Results) != targets {
		b.Errorf("batch holds %d results, want Capacity %d", len(last.Results), targets)
	}
	if d.failed > 0 || ok < fresh {
		b.Logf("%.0f checks failed; last batch: %d of %d results OK, e.g. %q", d.failed, ok, fresh, sample)
	}
}

// counters are the prober's cumulative metrics at one moment.
type counters struct {
	probes, failed, busy, inFlight float64
}

func (c counters) sub(o counters) counters {
	return counters{c.probes - o.probes, c.failed - o.failed, c.busy - o.busy, c.inFlight - o.inFlight}
}

// read gathers the probe metrics from reg.
func read(b *testing.B, reg *prometheus.Registry) counters {
	b.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		b.Fatal(err)
	}
	var c counters
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := m.GetCounter().GetValue()
			switch mf.GetName() {
			case "cairn_probe_probes_total":
				c.probes += v
				if label(m, "result") != "ok" {
					c.failed += v
				}
			case "cairn_probe_skipped_total":
				switch label(m, "reason") {
				case "busy":
					c.busy += v
				case "in_flight":
					c.inFlight += v
				}
			}
		}
	}
	return c
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// tcpServers starts n loopback listeners that accept every connection and
// close it at once, and stops them, waiting for their goroutines, when
// the benchmark ends.
func tcpServers(b *testing.B, n int) []netip.AddrPort {
	b.Helper()
	var (
		wg  sync.WaitGroup
		lns []net.Listener
	)
	b.Cleanup(func() {
		for _, ln := range lns {
			ln.Close()
		}
		wg.Wait()
	})
	addrs := make([]netip.AddrPort, n)
	for i := range addrs {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		lns = append(lns, ln)
		addrs[i] = addrPort(b, ln.Addr())
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err != nil {
					continue // e.g. EMFILE: keep serving
				}
				c.Close()
			}
		})
	}
	return addrs
}

// httpServers starts n loopback HTTP servers that answer 200 to every
// request, closed when the benchmark ends.
func httpServers(b *testing.B, n int) []netip.AddrPort {
	b.Helper()
	addrs := make([]netip.AddrPort, n)
	for i := range addrs {
		s := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
		}))
		s.Start()
		b.Cleanup(s.Close)
		addrs[i] = addrPort(b, s.Listener.Addr())
	}
	return addrs
}

func addrPort(b *testing.B, a net.Addr) netip.AddrPort {
	b.Helper()
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		b.Fatal(err)
	}
	return ap
}
