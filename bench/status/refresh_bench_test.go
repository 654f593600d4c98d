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
	"github.com/cairn-sd/cairn/wire"
)

// BenchmarkRefreshMoved is a round of the publish loop right after the
// store's revision moved (a verdict committed, as in the seconds after a
// rollout): the catalog re-read and laid out again, and the build, for
// 1,000 services of 8 instances in a table of the default capacity,
// unpaced (Slice -1), so that the profile shows the whole work.
func BenchmarkRefreshMoved(b *testing.B) {
	st := leaderStore(b)
	var svcs []wire.Service
	for s := range 1000 {
		svcs = append(svcs, wire.Service{Namespace: "shop", Name: fmt.Sprintf("svc%d", s), Ports: []wire.Port{{Name: "main", Number: 8080}},
			Policy: wire.Policy{LeaseTTL: wire.Duration(time.Hour)}})
	}
	if _, err := st.ApplyServices(b.Context(), "admin", svcs); err != nil {
		b.Fatal(err)
	}
	var ups []store.HealthUpdate
	for s := range 1000 {
		for i := range 8 {
			in, _, err := st.Register(b.Context(), "registrar", wire.Registration{Namespace: "shop", Service: svcs[s].Name,
				ID: fmt.Sprintf("i%d", i), Addresses: []string{fmt.Sprintf("10.%d.%d.%d", s/250, s%250, i+1)}, Ports: map[string]int{"main": 8080}})
			if err != nil {
				b.Fatal(err)
			}
			ups = append(ups, store.HealthUpdate{Key: in.Key(), Health: wire.Health{Incarnation: in.Incarnation, Verdict: status.Healthy,
				Eligible: true, HealthEligible: true, EligibleSince: time.Now().Add(-time.Hour), At: time.Now()}})
		}
	}
	for len(ups) > 0 {
		k := min(len(ups), store.MaxHealthUpdates)
		if err := st.CommitHealth(b.Context(), "bench", ups[:k], nil); err != nil {
			b.Fatal(err)
		}
		ups = ups[k:]
	}
	pub, err := status.New(status.Config{})
	if err != nil {
		b.Fatal(err)
	}
	n, err := publish.New(publish.Config{Store: st.Store, Table: pub, Slice: -1, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	n.Tick(b.Context(), nil)
	svc := svcs[0]
	for b.Loop() {
		b.StopTimer()
		svc.Policy.DNSTTL = wire.Duration(time.Duration(1+b.N%30) * time.Second) // moves the revision
		if _, err := st.ApplyServices(b.Context(), "admin", []wire.Service{svc}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		n.Refresh()
	}
}
