package statusbench

import (
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// BenchmarkPublishBuild is one round of a server's publisher with no
// evaluation in it and the store unchanged: a table build (every slot
// written, through status.Writer) of a catalog of 4,000 instances in 40
// services, each with a committed verdict, in a table of 8,192 slots;
// the every-second work of every node. Measured at the publish stage's
// commit: 48–53 ns an instance, against 64–66 for the health loop's
// build it replaced (issue 29).
func BenchmarkPublishBuild(b *testing.B) {
	st := leaderStore(b)
	var ups []store.HealthUpdate
	for s := range 40 {
		svc := wire.Service{Namespace: "shop", Name: fmt.Sprintf("svc%d", s), Ports: []wire.Port{{Name: "main", Number: 8080}},
			Policy: wire.Policy{LeaseTTL: wire.Duration(time.Hour)}}
		if _, err := st.ApplyServices(b.Context(), "admin", []wire.Service{svc}); err != nil {
			b.Fatal(err)
		}
		for i := range 100 {
			in, _, err := st.Register(b.Context(), "registrar", wire.Registration{Namespace: "shop", Service: svc.Name,
				ID: fmt.Sprintf("i%d", i), Addresses: []string{fmt.Sprintf("10.0.%d.%d", s, i+1)}, Ports: map[string]int{"main": 8080}})
			if err != nil {
				b.Fatal(err)
			}
			ups = append(ups, store.HealthUpdate{Key: in.Key(), Health: wire.Health{Incarnation: in.Incarnation, Verdict: status.Healthy,
				Eligible: true, HealthEligible: true, EligibleSince: time.Now().Add(-time.Hour), At: time.Now()}})
		}
	}
	if err := st.CommitHealth(b.Context(), "bench", ups, nil); err != nil {
		b.Fatal(err)
	}
	pub, err := status.New(status.Config{Capacity: 8192})
	if err != nil {
		b.Fatal(err)
	}
	n, err := publish.New(publish.Config{Store: st.Store, Table: pub, Slice: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	n.Tick(b.Context(), nil)
	i := 0
	for b.Loop() {
		n.Tick(b.Context(), nil)
		i++
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i)/4000, "ns/instance")
}

// leaderStore is a single-node store that has a leader address.
func leaderStore(b *testing.B) *storetest.Node {
	st := storetest.Single(b, store.Config{})
	storetest.WaitFor(b, 10*time.Second, func() error {
		if _, addr := st.Leader(); addr == "" {
			return fmt.Errorf("no leader address yet")
		}
		return nil
	})
	return st
}
