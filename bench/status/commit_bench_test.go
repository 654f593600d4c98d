package statusbench

import (
	"fmt"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// BenchmarkCommitFirstVerdicts: the evaluator's first verdicts of new
// instances, each with its transition (an audit event), in one commit of
// -updates (as many as a round commits after a rollout).
func BenchmarkCommitFirstVerdicts(b *testing.B) {
	for _, n := range []int{256, 4096} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			st := storetest.Single(b, store.Config{})
			storetest.WaitFor(b, 10*time.Second, func() error {
				if _, addr := st.Leader(); addr == "" {
					return fmt.Errorf("no leader address yet")
				}
				return nil
			})
			svc := wire.Service{Namespace: "shop", Name: "web", Ports: []wire.Port{{Name: "main", Number: 8080}}, Policy: wire.Policy{LeaseTTL: wire.Duration(time.Hour)}}
			if _, err := st.ApplyServices(b.Context(), "admin", []wire.Service{svc}); err != nil {
				b.Fatal(err)
			}
			var ups []store.HealthUpdate
			for i := range n {
				in, _, err := st.Register(b.Context(), "registrar", wire.Registration{Namespace: "shop", Service: "web",
					ID: fmt.Sprintf("i%d", i), Addresses: []string{fmt.Sprintf("10.0.%d.%d", i/250, i%250+1)}, Ports: map[string]int{"main": 8080}})
				if err != nil {
					b.Fatal(err)
				}
				ups = append(ups, store.HealthUpdate{Key: in.Key(), Health: wire.Health{Incarnation: in.Incarnation, Verdict: status.Unknown,
					Eligible: true, HealthEligible: true, EligibleSince: time.Now(), At: time.Now()},
					Transition: &store.Transition{From: "new", To: "eligible", Reason: "registered"}})
			}
			for b.Loop() {
				if err := st.CommitHealth(b.Context(), "bench", ups, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(n), "µs/update")
		})
	}
}
