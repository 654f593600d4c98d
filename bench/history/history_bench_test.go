// Package historybench measures what recording the published tables
// costs (package history, issue 33): the time to record one table at
// 0%, 1% and 100% of its slots changed since the last, and the memory a
// change holds.
//
//	go test -run='^$' -bench=. -benchtime=200x -count=3 ./bench/history/
package historybench

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/history"
	"github.com/cairn-sd/cairn/status"
)

// fleet is n instances over n/100 services in 9 zones, every slot used,
// and two sources of their entries that differ in pct% of the slots:
// tables built from the two in turn differ in that many entries.
type fleet struct {
	src        [2][]status.Entry
	services   *status.Names
	localities *status.Names
	dir        *status.Directory
}

func newFleet(n, pct int) *fleet {
	rng := rand.New(rand.NewPCG(1, uint64(pct)))
	nsvc := max(n/100, 1)
	names := make([]string, nsvc)
	infos := make([]status.ServiceInfo, nsvc+1)
	for i := range names {
		names[i] = fmt.Sprintf("bench/svc-%d", i)
		infos[i+1] = status.ServiceInfo{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i), DNSTTL: 5 * time.Second,
			ARecordLimit: 8, Ports: []status.Port{{Name: "http", Number: 8080, Protocol: "tcp"}}}
	}
	var locs []string
	for r := range 3 {
		locs = append(locs, fmt.Sprintf("region-%d", r))
		for z := range 3 {
			locs = append(locs, fmt.Sprintf("region-%d-%c", r, 'a'+z))
		}
	}
	f := &fleet{services: status.NewNames(names...), localities: status.NewNames(locs...),
		dir: &status.Directory{Services: infos, Instances: make([]*status.InstanceInfo, n)}}
	a := make([]status.Entry, n)
	ports := map[string]uint16{"http": 8080}
	for i := range a {
		r := rng.IntN(3)
		svc := 1 + i%nsvc
		a[i] = status.Entry{Key: status.KeyHash(fmt.Sprintf("bench/svc-%d/i-%d", svc-1, i)), Incarnation: 1,
			Service: uint32(svc), BaseWeight: 100, Weight: 100, Region: uint16(1 + 4*r), Zone: uint16(2 + 4*r + rng.IntN(3)),
			Verdict: status.Healthy, Lifecycle: status.Ready, Flags: status.Eligible}
		f.dir.Instances[i] = &status.InstanceInfo{ID: fmt.Sprintf("i-%d", i), Incarnation: 1,
			Addrs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}, Ports: ports}
	}
	f.dir.Index(func(slot int) uint32 { return a[slot].Service }, nil)
	b := make([]status.Entry, n)
	copy(b, a)
	for _, i := range rng.Perm(n)[:n*pct/100] {
		b[i].Flags, b[i].Weight, b[i].Verdict = 0, 0, status.Unhealthy
	}
	f.src = [2][]status.Entry{a, b}
	return f
}

// build publishes the next table from src.
func (f *fleet) build(tb testing.TB, p *status.Publisher, src []status.Entry) {
	if _, err := p.Build(func(b *status.Builder) error {
		b.SetServices(f.services)
		b.SetLocalities(f.localities)
		b.SetDirectory(f.dir)
		b.SetStoreRevision(b.Version())
		copy(b.Entries(), src)
		return nil
	}); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkRecord is the time to record one table of 100,000 slots
// (1,000 services), at 0%, 1% and 100% of them changed; the build is
// not timed. --history-mib at its default: at 100% every table
// lets older steps go.
func BenchmarkRecord(b *testing.B) {
	const n = 100_000
	for _, pct := range []int{0, 1, 100} {
		b.Run(fmt.Sprintf("%dk/%dpct", n/1000, pct), func(b *testing.B) {
			f := newFleet(n, pct)
			clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
			p, err := status.New(status.Config{Capacity: n, Now: func() time.Time { return clock }})
			if err != nil {
				b.Fatal(err)
			}
			h, err := history.New(history.Config{Table: p, Now: func() time.Time { return clock }})
			if err != nil {
				b.Fatal(err)
			}
			f.build(b, p, f.src[0])
			record(p, h) // the first table: every slot new
			i := 1
			for b.Loop() {
				b.StopTimer()
				clock = clock.Add(time.Second)
				f.build(b, p, f.src[i&1])
				i++
				b.StartTimer()
				record(p, h)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i-1)/n, "ns/slot")
		})
	}
}

func record(p *status.Publisher, h *history.History) {
	t := p.Acquire()
	h.Record(t)
	t.Release()
}

// BenchmarkMemoryPerChange is the heap a change holds: 2,000 tables of
// 100 changes each (one in each of 100 services, a weight step),
// recorded into a history large enough to keep them all.
func BenchmarkMemoryPerChange(b *testing.B) {
	const n, tables, per = 10_000, 2_000, 100
	for b.Loop() {
		f := newFleet(n, 0)
		clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
		p, err := status.New(status.Config{Capacity: n, Now: func() time.Time { return clock }})
		if err != nil {
			b.Fatal(err)
		}
		h, err := history.New(history.Config{Table: p, Now: func() time.Time { return clock }, Bytes: 1 << 30})
		if err != nil {
			b.Fatal(err)
		}
		src := f.src[0]
		f.build(b, p, src)
		record(p, h)
		before, before0 := heap(), h.Stats().Bytes
		for i := range tables {
			clock = clock.Add(time.Second)
			for j := range per {
				src[(i*per+j*97)%n].Weight = uint16(101 + i) // never the slot's weight before
			}
			f.build(b, p, src)
			record(p, h)
		}
		after := heap()
		st := h.Stats()
		if st.Steps != tables+1 {
			b.Fatalf("the history holds %+v", st)
		}
		b.ReportMetric(float64(after-before)/(tables*per), "B/change")
		b.ReportMetric(float64(st.Bytes-before0)/(tables*per), "counted-B/change")
		runtime.KeepAlive(h)
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkMemoryRollout is the heap the history holds for a rollout of
// 8,000 instances (1,000 services of 8) in a table of 100,000 slots: a
// table that adds them all, then the 30 tables of their slow start, each
// raising every weight, then one where all are at full weight. It counts
// everything the history holds: its per-slot state, the steps, the
// bases of the services.
func BenchmarkMemoryRollout(b *testing.B) {
	const capacity, n, ramp = 100_000, 8_000, 30
	for b.Loop() {
		clock := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
		f := newFleet(n, 0)
		src := make([]status.Entry, capacity)
		p, err := status.New(status.Config{Capacity: capacity, Now: func() time.Time { return clock }})
		if err != nil {
			b.Fatal(err)
		}
		f.dir.Instances = append(f.dir.Instances, make([]*status.InstanceInfo, capacity-n)...)
		before := heap()
		h, err := history.New(history.Config{Table: p, Now: func() time.Time { return clock }})
		if err != nil {
			b.Fatal(err)
		}
		for step := range ramp + 2 {
			clock = clock.Add(time.Second)
			for i := range n {
				src[i] = f.src[0][i]
				src[i].Weight = uint16(10 + 90*min(step, ramp)/ramp)
			}
			f.build(b, p, src)
			record(p, h)
		}
		after := heap()
		b.ReportMetric(float64(after-before)/n, "B/instance")
		b.ReportMetric(float64(h.Stats().Bytes)/n, "counted-B/instance")
		runtime.KeepAlive(h)
	}
}
