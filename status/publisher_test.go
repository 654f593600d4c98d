package status

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"
)

func TestNew(t *testing.T) {
	p := mustNew(t, Config{})
	if p.Capacity() != DefaultCapacity {
		t.Errorf("Capacity = %d; want %d", p.Capacity(), DefaultCapacity)
	}
	if s := p.Stats(); s.Tables != DefaultTables || s.Version != 0 || s.Builds != 0 {
		t.Errorf("Stats = %+v; want %d tables, nothing built", s, DefaultTables)
	}
	for _, tt := range []struct {
		cfg  Config
		want string
	}{
		{Config{Capacity: -1}, "Capacity must not be negative"},
		{Config{Capacity: MaxCapacity + 1}, "at most MaxCapacity"},
		{Config{Tables: -1}, "Tables must not be negative"},
		{Config{Tables: 1}, "at least 2"},
	} {
		if _, err := New(tt.cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("New(%+v) = %v; want an error containing %q", tt.cfg, err, tt.want)
		}
	}
}

func TestBuild(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	p := mustNew(t, Config{Capacity: 8, Now: func() time.Time { return now }})

	t.Run("nothing before the first build", func(t *testing.T) {
		if tb := p.Acquire(); tb != nil {
			t.Fatalf("Acquire = version %d; want nil", tb.Version())
		}
	})

	services := NewNames("shop/cart", "shop/pay")
	localities := NewNames("eu", "eu-1a", "eu-1b")
	cart := KeyHash("shop/cart/c1")
	t.Run("publishes what fill wrote", func(t *testing.T) {
		v, err := p.Build(func(b *Builder) error {
			if b.Version() != 1 {
				t.Errorf("Builder.Version = %d; want 1", b.Version())
			}
			b.SetStoreRevision(42)
			b.SetServices(services)
			b.SetLocalities(localities)
			entries := b.Entries()
			if len(entries) != 8 {
				t.Fatalf("len(Entries) = %d; want Capacity 8", len(entries))
			}
			clear(entries)
			entries[5] = Entry{Key: cart, Incarnation: 7, Service: 1, Weight: 50, BaseWeight: 100,
				Region: 1, Zone: 2, Verdict: Healthy, Lifecycle: Ready, Flags: Eligible | SlowStart}
			return nil
		})
		if err != nil || v != 1 {
			t.Fatalf("Build = %d, %v; want 1, nil", v, err)
		}
		tb := p.Acquire()
		defer tb.Release()
		if tb.Version() != 1 || tb.StoreRevision() != 42 || !tb.Built().Equal(now) || tb.Capacity() != 8 {
			t.Errorf("table: version %d, revision %d, built %v, capacity %d; want 1, 42, %v, 8",
				tb.Version(), tb.StoreRevision(), tb.Built(), tb.Capacity(), now)
		}
		e, ok := tb.Lookup(5, cart)
		if !ok || e.Weight != 50 || e.Verdict != Healthy || tb.Locality(e.Region) != "eu" || tb.Locality(e.Zone) != "eu-1a" {
			t.Errorf("Lookup(5) = %+v, %v", e, ok)
		}
		for _, tt := range []struct {
			slot int
			key  uint64
		}{{4, cart}, {5, cart + 1}, {5, 0}, {-1, cart}, {8, cart}} {
			if _, ok := tb.Lookup(tt.slot, tt.key); ok {
				t.Errorf("Lookup(%d, %#x) found an entry", tt.slot, tt.key)
			}
		}
		if tb.Services() != services || tb.Localities() != localities {
			t.Error("table does not carry the names it was given")
		}
		if got := tb.Members(1); len(got) != 1 || got[0] != 5 {
			t.Errorf("Members(cart) = %v; want [5]", got)
		}
		if got := tb.Members(2); len(got) != 0 {
			t.Errorf("Members(pay) = %v; want none", got)
		}
		if got := tb.Members(3); got != nil {
			t.Errorf("Members(3) = %v; want nil, out of range", got)
		}
	})

	t.Run("revision and names carry over", func(t *testing.T) {
		v, err := p.Build(func(b *Builder) error { clear(b.Entries()); return nil })
		if err != nil || v != 2 {
			t.Fatalf("Build = %d, %v; want 2, nil", v, err)
		}
		tb := p.Acquire()
		defer tb.Release()
		if tb.StoreRevision() != 42 || tb.Services() != services || tb.Localities() != localities {
			t.Errorf("version 2 lost the previous revision or names")
		}
	})

	t.Run("a failed fill publishes nothing", func(t *testing.T) {
		boom := errors.New("boom")
		if _, err := p.Build(func(b *Builder) error { b.SetStoreRevision(99); return boom }); !errors.Is(err, boom) {
			t.Fatalf("Build = %v; want boom", err)
		}
		if _, err := p.Build(func(b *Builder) error {
			b.SetLocalities(NewNames(manyNames(1 << 16)...))
			return nil
		}); err == nil || !strings.Contains(err.Error(), "16 bits") {
			t.Fatalf("Build with 65537 localities = %v; want an error", err)
		}
		tb := p.Acquire()
		defer tb.Release()
		if tb.Version() != 2 || tb.StoreRevision() != 42 {
			t.Errorf("current is version %d, revision %d; want 2, 42", tb.Version(), tb.StoreRevision())
		}
		if v, err := p.Build(stamp); err != nil || v != 3 {
			t.Errorf("next Build = %d, %v; want version 3: failures use no version", v, err)
		}
		if s := p.Stats(); s.Builds != 3 || s.FailedBuilds != 2 || s.Version != 3 {
			t.Errorf("Stats = %+v; want 3 builds, 2 failed, version 3", s)
		}
	})

	t.Run("Builder is dead after fill", func(t *testing.T) {
		var kept *Builder
		if _, err := p.Build(func(b *Builder) error { kept = b; return stamp(b) }); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if recover() == nil {
				t.Error("Entries on a Builder kept after fill did not panic")
			}
		}()
		_ = kept.Entries()
	})
}

func manyNames(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = fmt.Sprint("z", i)
	}
	return s
}

func TestRelease(t *testing.T) {
	p := mustNew(t, Config{Capacity: 1})
	if _, err := p.Build(stamp); err != nil {
		t.Fatal(err)
	}
	tb := p.Acquire()
	tb.Release()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "released more often") {
			t.Errorf("second Release: recover() = %v; want a panic", r)
		}
	}()
	tb.Release()
}

func TestBuildReusesTables(t *testing.T) {
	t.Run("no allocation without readers", func(t *testing.T) {
		p := mustNew(t, Config{Capacity: 1000})
		if allocs := testing.AllocsPerRun(100, func() {
			if _, err := p.Build(stamp); err != nil {
				t.Fatal(err)
			}
		}); allocs != 0 {
			t.Errorf("Build allocates %v times; want 0", allocs)
		}
		if s := p.Stats(); s.Tables != DefaultTables || s.ExtraTables != 0 {
			t.Errorf("Stats = %+v; want the %d preallocated tables only", s, DefaultTables)
		}
	})

	t.Run("no allocation with readers that release", func(t *testing.T) {
		p := mustNew(t, Config{Capacity: 1000})
		if allocs := testing.AllocsPerRun(100, func() {
			if _, err := p.Build(stamp); err != nil {
				t.Fatal(err)
			}
			tb := p.Acquire()
			_ = tb.Entry(999)
			tb.Release()
		}); allocs != 0 {
			t.Errorf("Build+Acquire+Release allocates %v times; want 0", allocs)
		}
	})

	t.Run("two tables while readers release", func(t *testing.T) {
		// The third is built into only when a reader holds the previous
		// table: until then the kernel need not back its memory.
		p := mustNew(t, Config{Capacity: 1000})
		for range 10 {
			if _, err := p.Build(stamp); err != nil {
				t.Fatal(err)
			}
			p.Acquire().Release()
		}
		built := 0
		for _, tb := range p.pool {
			if tb.version != 0 {
				built++
			}
		}
		if built != 2 {
			t.Errorf("%d of %d tables built into; want 2", built, len(p.pool))
		}
	})

	t.Run("held tables are never rewritten", func(t *testing.T) {
		p := mustNew(t, Config{Capacity: 1000})
		var held []*Table
		for range 2 {
			if _, err := p.Build(stamp); err != nil {
				t.Fatal(err)
			}
			held = append(held, p.Acquire())
		}
		// Two held tables out of three: the current one is held, and the
		// spare is the only table to build into, until it is current
		// too. Then Build must allocate.
		for range 20 {
			if _, err := p.Build(stamp); err != nil {
				t.Fatal(err)
			}
		}
		s := p.Stats()
		if s.ExtraTables != 1 || s.Tables != DefaultTables+1 || s.Version != 22 {
			t.Errorf("Stats = %+v; want 1 extra table, %d tables, version 22", s, DefaultTables+1)
		}
		for i, tb := range held {
			if tb.Version() != uint64(i+1) {
				t.Errorf("held table %d now has version %d", i+1, tb.Version())
			}
			if slot := whole(tb); slot >= 0 {
				t.Errorf("held table %d was rewritten at slot %d", i+1, slot)
			}
			tb.Release()
		}
		if allocs := testing.AllocsPerRun(20, func() { _, _ = p.Build(stamp) }); allocs != 0 {
			t.Errorf("after release, Build allocates %v times; want 0", allocs)
		}
		if s := p.Stats(); s.ExtraTables != 1 {
			t.Errorf("ExtraTables = %d after release; want still 1", s.ExtraTables)
		}
	})
}

// TestConcurrentReadersSeeWholeTables runs readers that hold a table while
// they check every entry against its version, against a writer building
// as fast as it can. Under -race, it also checks that the writer never
// writes a table a reader reads.
func TestConcurrentReadersSeeWholeTables(t *testing.T) {
	const (
		readers  = 4
		builds   = 1500
		capacity = 2048
	)
	p := mustNew(t, Config{Capacity: capacity})
	if _, err := p.Build(stamp); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	reads := make([]int, readers)
	for r := range readers {
		wg.Go(func() {
			var seen uint64
			for {
				tb := p.Acquire()
				v := tb.Version()
				if v < seen {
					t.Errorf("reader %d: version %d after %d", r, v, seen)
				}
				seen = v
				slot := whole(tb)
				if tb.Version() != v {
					t.Errorf("reader %d: version changed from %d to %d while held", r, v, tb.Version())
				}
				tb.Release()
				if slot >= 0 {
					t.Errorf("reader %d: table %d is torn at slot %d", r, v, slot)
					return
				}
				reads[r]++
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	for range builds {
		if _, err := p.Build(stamp); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	s := p.Stats()
	if s.Version != builds+1 {
		t.Errorf("Version = %d; want %d", s.Version, builds+1)
	}
	// Each reader holds at most one table; a build allocates only when
	// every table but the current one is held.
	if s.Tables > max(DefaultTables, readers+2) {
		t.Errorf("%d tables for %d readers: Build allocated while a spare was free", s.Tables, readers)
	}
	t.Logf("reads per reader %v; stats %+v", reads, s)
}

func TestChanged(t *testing.T) {
	t.Run("closes at the next publish", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			p := mustNew(t, Config{Capacity: 4})
			woke := make(chan uint64)
			go func() {
				<-p.Changed(0)
				tb := p.Acquire()
				defer tb.Release()
				woke <- tb.Version()
			}()
			synctest.Wait() // the waiter is blocked in Changed
			if _, err := p.Build(stamp); err != nil {
				t.Fatal(err)
			}
			if v := <-woke; v != 1 {
				t.Errorf("woke to version %d; want 1", v)
			}
		})
	})

	t.Run("closed at once for an older version", func(t *testing.T) {
		p := mustNew(t, Config{Capacity: 4})
		ch0 := p.Changed(0)
		if isClosed(ch0) {
			t.Fatal("Changed(0) is closed before any build")
		}
		if _, err := p.Build(stamp); err != nil {
			t.Fatal(err)
		}
		if !isClosed(ch0) || !isClosed(p.Changed(0)) {
			t.Error("Changed(0) is open after version 1")
		}
		ch1 := p.Changed(1)
		if isClosed(ch1) {
			t.Error("Changed(1) is closed at version 1")
		}
		if ch := p.Changed(1); ch != ch1 {
			t.Error("two waiters for the same publish got different channels")
		}
		if _, err := p.Build(func(*Builder) error { return errors.New("no") }); err == nil {
			t.Fatal("failed fill did not fail")
		}
		if isClosed(ch1) {
			t.Error("a failed build closed Changed(1)")
		}
		if _, err := p.Build(stamp); err != nil {
			t.Fatal(err)
		}
		if !isClosed(ch1) {
			t.Error("Changed(1) is open at version 2")
		}
	})

	t.Run("no allocation when nobody waits", func(t *testing.T) {
		p := mustNew(t, Config{Capacity: 4})
		_, _ = p.Build(stamp)
		if allocs := testing.AllocsPerRun(10, func() { _ = p.Changed(0) }); allocs != 0 {
			t.Errorf("Changed for a published version allocates %v times", allocs)
		}
	})

	// Waiters that always wait for a version newer than the last they read
	// reach the final version: no publish is missed, and versions never
	// go back.
	t.Run("waiters never miss the latest", func(t *testing.T) {
		const builds = 2000
		p := mustNew(t, Config{Capacity: 16})
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Go(func() {
				var seen uint64
				wakeups := 0
				for seen < builds {
					select {
					case <-p.Changed(seen):
					case <-time.After(10 * time.Second): // a failure guard, not synchronisation
						t.Errorf("waiter %d: no wake-up after version %d", w, seen)
						return
					}
					tb := p.Acquire()
					if tb.Version() <= seen {
						t.Errorf("waiter %d: woke to version %d after %d", w, tb.Version(), seen)
					}
					seen = tb.Version()
					tb.Release()
					wakeups++
				}
				t.Logf("waiter %d: %d wake-ups for %d builds", w, wakeups, builds)
			})
		}
		for range builds {
			if _, err := p.Build(stamp); err != nil {
				t.Fatal(err)
			}
		}
		wg.Wait()
	})
}

// TestPublisherModel drives a publisher with random builds, failed builds,
// acquires and releases, and checks it against a model after each: a
// reader never gets a table older than one already seen, held tables
// never change, Changed is closed exactly when a newer table is current,
// and Build allocates exactly when every spare is held.
func TestPublisherModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tables := rapid.IntRange(2, 4).Draw(t, "tables")
		p := mustNew(t, Config{Capacity: rapid.IntRange(1, 16).Draw(t, "capacity"), Tables: tables})
		var (
			held      []*Table
			published uint64 // the model's current version
			seen      uint64 // the newest version any reader got
			extra     uint64
		)
		// noSpare reports whether every table but the current one is held,
		// so that the next Build, failed or not, must allocate.
		noSpare := func() bool {
			cur := p.cur.Load()
			busy := map[*Table]bool{}
			for _, tb := range held {
				if tb != cur {
					busy[tb] = true
				}
			}
			free := p.Stats().Tables - len(busy)
			if cur != nil {
				free--
			}
			return free == 0
		}
		t.Repeat(map[string]func(*rapid.T){
			"build": func(t *rapid.T) {
				if noSpare() {
					extra++
				}
				v, err := p.Build(stamp)
				if err != nil || v != published+1 {
					t.Fatalf("Build = %d, %v; want %d", v, err, published+1)
				}
				published = v
			},
			"fail": func(t *rapid.T) {
				if noSpare() {
					extra++
				}
				if _, err := p.Build(func(b *Builder) error {
					clear(b.Entries()[:rapid.IntRange(0, b.t.Capacity()).Draw(t, "written")])
					return errors.New("no")
				}); err == nil {
					t.Fatal("failed fill did not fail")
				}
			},
			"acquire": func(t *rapid.T) {
				tb := p.Acquire()
				if published == 0 {
					if tb != nil {
						t.Fatalf("Acquire before any build = version %d", tb.Version())
					}
					return
				}
				if tb.Version() != published || tb.Version() < seen {
					t.Fatalf("Acquire = version %d; want %d (seen %d)", tb.Version(), published, seen)
				}
				seen = tb.Version()
				held = append(held, tb)
			},
			"release": func(t *rapid.T) {
				if len(held) == 0 {
					t.Skip("nothing held")
				}
				i := rapid.IntRange(0, len(held)-1).Draw(t, "i")
				held[i].Release()
				held = append(held[:i], held[i+1:]...)
			},
			"": func(t *rapid.T) {
				for _, tb := range held {
					if slot := whole(tb); slot >= 0 {
						t.Fatalf("held table %d rewritten at slot %d", tb.Version(), slot)
					}
				}
				s := p.Stats()
				if s.Version != published || s.ExtraTables != extra || s.Tables != tables+int(extra) {
					t.Fatalf("Stats = %+v; want version %d, %d extra of %d", s, published, extra, tables)
				}
				if isClosed(p.Changed(seen)) != (published > seen) {
					t.Fatalf("Changed(%d) closed = %v at version %d", seen, !(published > seen), published)
				}
				if published > 0 && isClosed(p.Changed(published)) {
					t.Fatalf("Changed(%d) closed at version %d", published, published)
				}
			},
		})
		for _, tb := range held {
			tb.Release()
		}
	})
}

// TestAcquireRacesReuse stops a reader between loading the current table
// and counting its reference, and meanwhile has the writer publish once
// and start rewriting that very table. Acquire must notice and return
// the current table instead.
func TestAcquireRacesReuse(t *testing.T) {
	p := mustNew(t, Config{Capacity: 64})
	if _, err := p.Build(stamp); err != nil {
		t.Fatal(err)
	}
	filling, proceed := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	var loaded *Table
	p.acquireHook = func(tb *Table) {
		p.acquireHook = nil // once
		loaded = tb
		wg.Go(func() {
			if _, err := p.Build(stamp); err != nil {
				t.Error(err)
			}
			// The next build reuses the table the reader loaded: the
			// most recently published spare, and not yet referenced.
			if _, err := p.Build(func(b *Builder) error {
				if b.t != loaded {
					t.Errorf("build %d reuses table %d, not the loaded one", b.Version(), b.t.version)
				}
				close(filling)
				<-proceed // hold the table half-built while the reader goes on
				return stamp(b)
			}); err != nil {
				t.Error(err)
			}
		})
		<-filling
	}
	tb := p.Acquire()
	got, slot := tb.Version(), whole(tb)
	if tb == loaded {
		t.Error("Acquire returned the table the writer is rewriting")
	}
	tb.Release()
	close(proceed)
	if got != 2 || slot >= 0 {
		t.Errorf("Acquire = version %d (torn at %d); want the current version 2, whole", got, slot)
	}
}
