// Package statusbench measures the status table's constant-work claim
// (SPEC §0.6, issue 3 item 5): a rebuild costs the same whether 0%, 50%
// or 100% of the instances changed since the last one.
//
//	go test -run='^$' -bench=. -benchmem -benchtime=2s -count=5 ./bench/status/
package statusbench

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/cairn-sd/cairn/status"
)

// fleet is the evaluator's side of a rebuild: two source arrays of
// per-instance verdicts, one per slot, that differ in exactly pct% of the
// slots. Builds alternate between them, so consecutive tables differ in
// pct% of their entries. Both arrays always exist, so that the memory
// touched is the same at every pct.
type fleet struct {
	src        [2][]status.Entry
	services   *status.Names
	localities *status.Names
}

// newFleet fills every slot (a full table is the most work) with an
// eligible, healthy instance of one of n/100 services in one of 9 zones,
// then flips pct% of them, chosen at random, in the second array:
// eligible ↔ withdrawn, healthy ↔ unhealthy, and the shared-dependency
// factor on ↔ off, so that the published weight changes too.
func newFleet(n, pct int) *fleet {
	rng := rand.New(rand.NewPCG(1, uint64(pct)))
	nsvc := max(n/100, 1)
	svcNames := make([]string, nsvc)
	for i := range svcNames {
		svcNames[i] = fmt.Sprintf("bench/svc-%d", i)
	}
	var locNames []string
	for r := range 3 {
		locNames = append(locNames, fmt.Sprintf("region-%d", r))
		for z := range 3 {
			locNames = append(locNames, fmt.Sprintf("region-%d-%c", r, 'a'+z))
		}
	}
	f := &fleet{services: status.NewNames(svcNames...), localities: status.NewNames(locNames...)}
	a := make([]status.Entry, n)
	for i := range a {
		r := rng.IntN(3)
		a[i] = status.Entry{
			Key:         status.KeyHash(fmt.Sprintf("bench/svc-%d/i-%d", i%nsvc, i)),
			Incarnation: uint64(i) + 1,
			Service:     uint32(1 + rng.IntN(nsvc)),
			BaseWeight:  100,
			Region:      uint16(1 + 4*r),
			Zone:        uint16(2 + 4*r + rng.IntN(3)),
			Verdict:     status.Healthy,
			Lifecycle:   status.Ready,
			Flags:       status.Eligible,
		}
	}
	b := make([]status.Entry, n)
	copy(b, a)
	for _, i := range rng.Perm(n)[:n*pct/100] {
		b[i].Flags ^= status.Eligible | status.DependencyDegraded
		if b[i].Verdict == status.Healthy {
			b[i].Verdict = status.Unhealthy
		} else {
			b[i].Verdict = status.Healthy
		}
	}
	f.src = [2][]status.Entry{a, b}
	return f
}

// derive is the evaluator's per-slot step, written in place: the entry
// from its source, then the published weight from the base weight and the
// flags (SPEC §2: withdrawn → 0, a failing shared dependency × 0.5).
//
// In place matters: building the Entry as a value, setting Weight on it
// and storing it (e.Weight = w; entries[i] = e) makes the 32-byte copy
// read back the 2-byte write through the stack, a store-forwarding stall
// that measured about 5× slower per slot on the bench machine.
func derive(d *status.Entry, s *status.Entry) {
	*d = *s
	w := d.BaseWeight
	if d.Flags&status.DependencyDegraded != 0 {
		w /= 2
	}
	if d.Flags&status.Eligible == 0 {
		w = 0
	}
	d.Weight = w
}

// fillFrom returns a Build fill that derives every slot from *src.
func (f *fleet) fillFrom(src *[]status.Entry) func(b *status.Builder) error {
	return func(b *status.Builder) error {
		b.SetServices(f.services)
		b.SetLocalities(f.localities)
		b.SetStoreRevision(b.Version())
		entries := b.Entries()
		s := (*src)[:len(entries)]
		for i := range entries {
			derive(&entries[i], &s[i])
		}
		return nil
	}
}

func BenchmarkRebuild(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		for _, pct := range []int{0, 50, 100} {
			b.Run(fmt.Sprintf("%dk/%dpct", n/1000, pct), func(b *testing.B) {
				f := newFleet(n, pct)
				p, err := status.New(status.Config{Capacity: n})
				if err != nil {
					b.Fatal(err)
				}
				var src []status.Entry
				fill := f.fillFrom(&src)
				checkChanges(b, p, f, fill, &src, n*pct/100)
				i := 0
				for b.Loop() {
					src = f.src[i&1]
					i++
					if _, err := p.Build(fill); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i)/float64(n), "ns/slot")
				if s := p.Stats(); s.ExtraTables != 0 {
					b.Errorf("Build allocated %d tables", s.ExtraTables)
				}
			})
		}
	}
}

// checkChanges builds once from each source and checks that the two
// tables differ in exactly want entries, and that every slot is indexed:
// the benchmark measures what it says.
func checkChanges(b *testing.B, p *status.Publisher, f *fleet, fill func(*status.Builder) error, src *[]status.Entry, want int) {
	b.Helper()
	var ts [2]*status.Table
	for i := range ts {
		*src = f.src[i]
		if _, err := p.Build(fill); err != nil {
			b.Fatal(err)
		}
		ts[i] = p.Acquire()
		defer ts[i].Release()
	}
	diff, members := 0, 0
	for slot := range ts[0].Capacity() {
		if ts[0].Entry(slot) != ts[1].Entry(slot) {
			diff++
		}
	}
	for s := range f.services.Len() {
		members += len(ts[1].Members(uint32(s)))
	}
	if diff != want || members != ts[1].Capacity() {
		b.Fatalf("consecutive tables differ in %d entries and index %d; want %d and %d", diff, members, want, ts[1].Capacity())
	}
}

// BenchmarkAcquireRelease is a reader's fixed cost per DNS answer or xDS
// build: acquire the current table, read one entry, release it.
func BenchmarkAcquireRelease(b *testing.B) {
	const n = 100_000
	f := newFleet(n, 0)
	p, err := status.New(status.Config{Capacity: n})
	if err != nil {
		b.Fatal(err)
	}
	src := f.src[0]
	if _, err := p.Build(f.fillFrom(&src)); err != nil {
		b.Fatal(err)
	}
	key := src[n/2].Key
	read := func() {
		t := p.Acquire()
		if _, ok := t.Lookup(n/2, key); !ok {
			b.Error("lookup failed")
		}
		t.Release()
	}
	b.Run("serial", func(b *testing.B) {
		for b.Loop() {
			read()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				read()
			}
		})
	})
}

// BenchmarkWriterBuild is BenchmarkRebuild through status.Writer, as the
// server's and the agent's tables are built: the layout's entry copied
// into each used slot, then the fill's per-slot rewrite of what moved
// (the verdict, the flags, the weight) from the source. Its ns/slot,
// against BenchmarkRebuild's, is what the one writer costs per slot.
func BenchmarkWriterBuild(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("%dk", n/1000), func(b *testing.B) {
			f := newFleet(n, 50)
			p, err := status.New(status.Config{Capacity: n})
			if err != nil {
				b.Fatal(err)
			}
			w := status.NewWriter(p, status.WriterConfig{})
			nsvc := f.services.Len() - 1
			infos := make([]status.ServiceInfo, nsvc)
			for i := range infos {
				infos[i] = status.ServiceInfo{Namespace: "bench", Name: fmt.Sprintf("svc-%d", i)}
			}
			w.Begin(1, infos)
			slotOf := make([]int, n)
			for i := range n {
				_, slotOf[i] = w.Add(i%nsvc, status.Instance{ID: fmt.Sprintf("i-%d", i), Incarnation: uint64(i) + 1,
					Region: "region-0", Zone: "region-0-a", Lifecycle: status.Ready, BaseWeight: 100})
			}
			w.End()
			src := f.src[0]
			bySlot := make([]int, n)
			for i, s := range slotOf {
				bySlot[s] = i
			}
			fill := func(slot int, _ status.Ref, e *status.Entry) {
				s := &src[bySlot[slot]]
				e.Verdict, e.Flags = s.Verdict, s.Flags
				wt := e.BaseWeight
				if e.Flags&status.DependencyDegraded != 0 {
					wt /= 2
				}
				if e.Flags&status.Eligible == 0 {
					wt = 0
				}
				e.Weight = wt
			}
			i := 0
			for b.Loop() {
				src = f.src[i&1]
				i++
				if _, err := w.Build(fill); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i)/float64(n), "ns/slot")
		})
	}
}
