package xdsserver

import (
	"fmt"
	"testing"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
)

// benchServices is bench/cmd/xdsload's steady layout: n services of
// per endpoints each, one gRPC port.
func benchServices(n, per int) []statustest.Service {
	svcs := make([]statustest.Service, n)
	for i := range svcs {
		s := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "bench", Name: fmt.Sprintf("s%03d", i),
			Ports: []status.Port{{Name: "grpc", Number: 1, Protocol: "tcp"}}}}
		for j := range per {
			in := statustest.Ready(fmt.Sprintf("s%03d-%d", i, j), fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1))
			in.Ports = map[string]uint16{"grpc": 80}
			s.Instances = append(s.Instances, in)
		}
		svcs[i] = s
	}
	return svcs
}

// flipOnCommit publishes what publish does for a withdrawal on commit
// (publishWithdrawals): the current table, its directory, with the entry
// in slot out of rotation, or back in if it was out (which publish
// leaves to a build; the hub cannot tell).
func flipOnCommit(tb testing.TB, pub *status.Publisher, slot int) {
	tb.Helper()
	cur := pub.Acquire()
	defer cur.Release()
	_, err := pub.Build(func(b *status.Builder) error {
		es := b.Entries()
		for k := range es {
			es[k] = cur.Entry(k)
		}
		e := &es[slot]
		if e.Flags.Has(status.Eligible) {
			e.Flags &^= status.Eligible
			e.Weight = 0
		} else {
			e.Flags |= status.Eligible
			e.Weight = 100
		}
		b.SetStoreRevision(cur.StoreRevision() + 1)
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// watchers joins n streams to h in place p, stream k watching the
// assignments of services 10k to 10k+9 (mod nsvc).
func watchers(b *testing.B, h *hub, p place, n, nsvc int) {
	b.Helper()
	for k := range n {
		mem, err := h.join(p, newSignal(), false)
		if err != nil {
			b.Fatal(err)
		}
		var names []string
		for j := range 10 {
			names = append(names, fmt.Sprintf("s%03d.bench:grpc", (k*10+j)%nsvc))
		}
		h.watch(mem, endpointIdx, false, names, nil)
	}
}

// refreshes times b.N refreshes of h, each after flipping (untimed) the
// slots that change picks from the current table for iteration i.
func refreshes(b *testing.B, h *hub, pub *status.Publisher, change func(i int, t *status.Table) []int) {
	b.Helper()
	h.refresh()
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		t := pub.Acquire()
		slots := change(i, t)
		t.Release()
		for _, s := range slots {
			flipOnCommit(b, pub, s)
		}
		b.StartTimer()
		h.refresh()
	}
}

// BenchmarkHubRefreshOneWithdrawal is the hub's work for one withdrawal
// published on commit, in bench/cmd/xdsload's steady layout at 2,000
// streams: 400 services of 8 endpoints, one place, each stream watching
// 10 services' assignments (50 woken a change).
//
//	go test -run '^$' -bench HubRefreshOneWithdrawal -benchtime 3000x -count 3 ./xdsserver/
func BenchmarkHubRefreshOneWithdrawal(b *testing.B) {
	const nsvc = 400
	tb := statustest.New(b, nsvc*8*2)
	tb.Publish(b, benchServices(nsvc, 8)...)
	m, _ := newMetrics(nil)
	h := newHub(tb.Publisher, m)
	watchers(b, h, place{}, 2000, nsvc)
	refreshes(b, h, tb.Publisher, func(i int, t *status.Table) []int {
		return []int{int(t.Members(uint32(1 + i%nsvc))[0])}
	})
}

// BenchmarkHubRefreshBurst is the hub's work for one table of
// experiment 4's burst (integration/scenarios): 40 services of 50
// instances over three zones, subscribers in each zone, and a table
// that changes 10 of the services (a burst of 40,000 changes a minute
// published every 100 ms changes most of them).
//
//	go test -run '^$' -bench HubRefreshBurst -benchtime 300x -count 5 ./xdsserver/
func BenchmarkHubRefreshBurst(b *testing.B) {
	const nsvc, per, changed = 40, 50, 10
	zones := []string{"a", "b", "c"}
	svcs := benchServices(nsvc, per)
	for i := range svcs {
		for j := range svcs[i].Instances {
			svcs[i].Instances[j] = svcs[i].Instances[j].In("r", zones[j%len(zones)])
		}
	}
	tb := statustest.New(b, nsvc*per*2)
	tb.Publish(b, svcs...)
	m, _ := newMetrics(nil)
	h := newHub(tb.Publisher, m)
	for _, z := range zones {
		watchers(b, h, place{region: "r", zone: z}, 20, nsvc)
	}
	refreshes(b, h, tb.Publisher, func(i int, t *status.Table) []int {
		var slots []int
		for k := range changed {
			slots = append(slots, int(t.Members(uint32(1 + (i*changed+k)%nsvc))[i%per]))
		}
		return slots
	})
}
