// Package withdraw measures how long a withdrawal takes to reach the
// status table the DNS and xDS servers read, on one node holding 10,000
// instances with its health loop running (SPEC §2: within 100 ms of the
// node applying it). The reference in the same run is the next full
// build, the only way a withdrawal reached the table before issue 8.
package withdraw

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

const instances = 10_000

func BenchmarkDrainToTable(b *testing.B) {
	st := storetest.Single(b, store.Config{})
	ctx := context.Background()
	svc := wire.Service{Namespace: "bench", Name: "drain", Ports: []wire.Port{{Name: "http", Number: 8080}},
		Policy: wire.Policy{LeaseTTL: wire.Duration(time.Hour), DrainWindow: wire.Duration(time.Hour)}}
	if _, err := st.ApplyServices(ctx, "bench", []wire.Service{svc}); err != nil {
		b.Fatal(err)
	}
	var ins []wire.Instance
	for i := range instances {
		in, _, err := st.Register(ctx, "bench", wire.Registration{Namespace: "bench", Service: "drain",
			ID: fmt.Sprintf("i%d", i), Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)},
			Ports: map[string]int{"http": 8080}})
		if err != nil {
			b.Fatal(err)
		}
		ins = append(ins, in)
	}
	pub, err := status.New(status.Config{Capacity: 2 * instances})
	if err != nil {
		b.Fatal(err)
	}
	n, err := health.New(health.Config{Store: st.Store, Table: pub, Registerer: prometheus.NewRegistry(),
		Logger: storetest.Logger(b)})
	if err != nil {
		b.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = n.Run(rctx) }()
	defer func() { stop(); <-done }()
	// Wait until the table holds every instance.
	for {
		if t := pub.Acquire(); t != nil {
			rev := t.StoreRevision()
			t.Release()
			if rev >= st.Revision() {
				break
			}
		}
		time.Sleep(10 * time.Millisecond) // setup: the first build
	}
	if b.N > instances {
		b.Fatalf("at most %d drains (-benchtime=Nx)", instances)
	}
	fast := make([]time.Duration, 0, b.N)
	full := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		in := ins[i]
		if _, err := st.Drain(ctx, "bench", in.Key(), in.Incarnation); err != nil {
			b.Fatal(err)
		}
		applied := time.Now()
		rev := st.Revision()
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := n.WaitPublished(wctx, rev); err != nil {
			b.Fatal(err)
		}
		cancel()
		fast = append(fast, time.Since(applied))
		// The reference: the next full build after the drain.
		for !n.Synced().After(applied) {
			time.Sleep(time.Millisecond) // polling a time stamp: the measurement's resolution
		}
		full = append(full, time.Since(applied))
	}
	b.StopTimer()
	q := func(ds []time.Duration, p float64) float64 {
		s := slices.Clone(ds)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(fast, 0.5), "p50-ms")
	b.ReportMetric(q(fast, 0.99), "p99-ms")
	b.ReportMetric(q(fast, 1), "max-ms")
	b.ReportMetric(q(full, 0.5), "fullbuild-p50-ms")
	b.ReportMetric(q(full, 0.99), "fullbuild-p99-ms")
}
