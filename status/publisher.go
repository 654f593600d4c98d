package status

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
)

// Publisher holds the current Table of a node and swaps in new ones.
//
// It has one writer, the evaluator, which calls Build on a fixed cadence
// (every second) whatever changed, and any number of readers, which call
// Acquire and Release and may wait on Changed. Readers never lock: the
// current table is an atomic pointer, and a reader's reference count
// keeps the writer from reusing a table under it. Build serialises its
// callers. A Publisher starts no goroutine.
//
// The tables are allocated in New and reused: a rebuild allocates nothing
// unless readers hold every spare table (see Config.Tables and Stats).
type Publisher struct {
	cfg Config

	cur atomic.Pointer[Table]
	// published is cur's version, stored after cur: a table's own fields
	// may be read only under a reference, since a released table is
	// rewritten.
	published atomic.Uint64
	closed    chan struct{} // always closed: Changed's answer when a newer table is current

	// nmu orders waiters against publishes: cur and published are stored,
	// and next closed, under it. Only Changed and the end of Build take
	// it; Acquire does not.
	nmu  sync.Mutex
	next chan struct{} // closed at the next publish; made on demand by Changed

	builds, failed, extra, unindexed atomic.Uint64
	tables                           atomic.Int64
	// size is the slots of the tables Build makes now: Config.Initial,
	// then what Grow set. Written under mu.
	size atomic.Int64

	// acquireHook, when set by a test, runs in Acquire between loading
	// the current table and counting the reference.
	acquireHook func(*Table)

	mu      sync.Mutex // serialises Build; guards the fields below
	pool    []*Table   // every table the publisher owns, the current one included
	version uint64     // of the last published table
	b       Builder    // reused by every Build
	scratch []uint32   // size long: the service of each slot, for Table.index
}

// Stats are counters for the metrics of whoever wires the publisher
// (status imports nothing but the standard library).
type Stats struct {
	// Version is the current table's version; 0 before the first Build.
	Version uint64
	// Builds counts the tables published.
	Builds uint64
	// FailedBuilds counts the Builds whose fill returned an error.
	FailedBuilds uint64
	// Tables is the number of tables the publisher owns.
	Tables int
	// ExtraTables counts the tables Build allocated beyond Config.Tables
	// because readers held every spare: readers are holding tables for
	// too long, or never releasing them.
	ExtraTables uint64
	// Unindexed counts, summed over builds, the used entries whose
	// Service was out of the table's Services: an evaluator bug. They are
	// readable by slot but missing from Members.
	Unindexed uint64
}

// Builder is what Build's fill function writes a table through. It is
// valid only during the fill call.
type Builder struct {
	t          *Table
	services   *Names
	localities *Names
	revision   uint64
	directory  *Directory
}

// New validates cfg, applies its defaults and returns a Publisher with
// Config.Tables tables allocated and none published: Acquire returns nil
// until the first Build.
func New(cfg Config) (*Publisher, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Publisher{cfg: cfg, closed: make(chan struct{})}
	close(p.closed)
	p.pool = make([]*Table, cfg.Tables, cfg.Tables+2)
	for i := range p.pool {
		p.pool[i] = newTable(cfg.Initial)
	}
	p.scratch = make([]uint32, cfg.Initial)
	p.tables.Store(int64(cfg.Tables))
	p.size.Store(int64(cfg.Initial))
	return p, nil
}

// Capacity returns the most slots a table may have (Config.Capacity).
func (p *Publisher) Capacity() int { return p.cfg.Capacity }

// Size returns the number of slots of the tables Build makes now:
// Config.Initial until Grow. It is safe for concurrent use.
func (p *Publisher) Size() int { return int(p.size.Load()) }

// Grow makes the tables of the next Builds n slots long, n between
// Size and Capacity; the current table, and those readers hold, keep
// their size (each table is read on its own: its entries, index and
// Directory agree). The tables of the old size are let go as readers
// release them; the new ones are allocated as Build needs them. The
// table's writer calls it, before laying out an instance past Size.
func (p *Publisher) Grow(n int) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	size := int(p.size.Load())
	if n < size || n > p.cfg.Capacity {
		return fmt.Errorf("status: growing the tables to %d slots: not between their size (%d) and Capacity (%d)", n, size, p.cfg.Capacity)
	}
	if n == size {
		return nil
	}
	p.size.Store(int64(n))
	p.scratch = make([]uint32, n)
	return nil
}

// Acquire returns the current table, held until its Release, or nil
// before the first Build. It never blocks: it retries only if a Build
// swapped the table in the few instructions between its two loads.
//
// Release it promptly (one DNS answer, one xDS snapshot build): while a
// reader holds a table the writer cannot reuse it, and when readers hold
// every table but the current one, Build allocates another, which stays
// in the pool (Stats.ExtraTables). A table never released is a leak.
func (p *Publisher) Acquire() *Table {
	for {
		t := p.cur.Load()
		if t == nil {
			return nil
		}
		if p.acquireHook != nil {
			p.acquireHook(t)
		}
		t.refs.Add(1)
		// The writer reuses only a table that is not current and has no
		// references. If t is still current after our reference is
		// counted, no Build can pick it until we release it; if not, the
		// writer may already be rewriting it, so let go and retry.
		if p.cur.Load() == t {
			return t
		}
		t.refs.Add(-1)
	}
}

// Changed returns a channel that is closed once a table newer than
// version after is current: at once if one already is. Waiting is "latest
// wins": several publishes may close one channel, and the reader should
// Acquire and read the table's Version rather than count wake-ups. Pass
// the Version of the last table read (0 before any):
//
//	for seen := uint64(0); ; {
//		select {
//		case <-ctx.Done():
//			return ctx.Err()
//		case <-pub.Changed(seen):
//		}
//		t := pub.Acquire()
//		seen = t.Version()
//		// … build a snapshot from t …
//		t.Release()
//	}
//
// If after is larger than any version published, the channel closes at
// the next publish. Changed is safe for concurrent use. When a newer
// table is already current it returns without locking or allocating;
// otherwise it takes a lock held only for a few instructions, and shared
// only with the end of Build (never with Acquire or a Table's methods),
// and allocates a channel if nobody is waiting for the next publish yet.
func (p *Publisher) Changed(after uint64) <-chan struct{} {
	if p.published.Load() > after {
		return p.closed
	}
	p.nmu.Lock()
	defer p.nmu.Unlock()
	// Under nmu, published and next change together: a version newer
	// than after is visible here, or its publish will close next.
	if p.published.Load() > after {
		return p.closed
	}
	if p.next == nil {
		p.next = make(chan struct{})
	}
	return p.next
}

// Build makes and publishes the next table. It picks a table no reader
// holds, calls fill to write it, and, if fill returns nil, indexes it,
// stamps it with the next version and swaps it in atomically, then wakes
// Changed's waiters. It returns the new version. If fill returns an
// error, nothing is published and Build returns that error.
//
// fill must write every one of the Size entries (Builder.Entries),
// unused slots as the zero Entry: the entries it receives hold whatever
// an older table held, and are not cleared first. Writing every slot at
// every build is the point: the cost of a rebuild is the same whether no
// status changed or all of them did (SPEC §0.6). fill must not keep the
// Builder or the entries after it returns.
//
// Build may be called from any goroutine; calls are serialised.
func (p *Publisher) Build(fill func(b *Builder) error) (uint64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prev := p.cur.Load()
	t := p.spare(prev)
	p.b = Builder{t: t}
	if prev != nil {
		p.b.services, p.b.localities, p.b.revision = prev.services, prev.localities, prev.storeRevision
		p.b.directory = prev.directory
	}
	t.version = p.version + 1
	t.built = p.cfg.Now()
	err := fill(&p.b)
	b := p.b
	p.b = Builder{}
	if err == nil && b.localities.Len() > 1<<16 {
		err = fmt.Errorf("status: %d locality names; their ids are 16 bits", b.localities.Len())
	}
	if err != nil {
		p.failed.Add(1)
		return 0, err
	}
	t.services, t.localities, t.storeRevision = b.services, b.localities, b.revision
	t.directory = b.directory
	t.index(p.scratch)
	p.version = t.version
	// The swap is inside nmu with the rest, so that a reader that has
	// acquired t and then calls Changed(t.Version()) finds next already
	// closed and cleared, and waits for the publish after t.
	p.nmu.Lock()
	p.cur.Store(t)
	p.published.Store(t.version)
	if p.next != nil {
		close(p.next)
		p.next = nil
	}
	p.nmu.Unlock()
	p.builds.Add(1)
	p.unindexed.Add(uint64(t.unindexed))
	return t.version, nil
}

// spare returns a table of Size slots that is not current and that no
// reader holds, allocating one if there is none. The most recently
// published is preferred, so that builds alternate between two tables
// while readers release promptly: a table never built into is memory
// the kernel has not backed yet (3.2 MB at the default capacity), and
// it is only written when a reader holds the previous table at a build.
// Tables of an older size (before Grow) leave the pool, but for the
// current one, which leaves it at the next build. Called with p.mu held.
func (p *Publisher) spare(cur *Table) *Table {
	size := int(p.size.Load())
	p.pool = slices.DeleteFunc(p.pool, func(t *Table) bool { return t != cur && len(t.entries) != size })
	var best *Table
	for _, t := range p.pool {
		if t == cur || t.refs.Load() != 0 || len(t.entries) != size {
			continue
		}
		if best == nil || t.version > best.version {
			best = t
		}
	}
	if best != nil {
		return best
	}
	best = newTable(size)
	if len(p.pool) >= p.cfg.Tables {
		p.extra.Add(1) // readers hold every spare
	}
	p.pool = append(p.pool, best)
	p.tables.Store(int64(len(p.pool)))
	return best
}

// Stats returns the publisher's counters. It is safe for concurrent use.
func (p *Publisher) Stats() Stats {
	return Stats{
		Version:      p.published.Load(),
		Builds:       p.builds.Load(),
		FailedBuilds: p.failed.Load(),
		Tables:       int(p.tables.Load()),
		ExtraTables:  p.extra.Load(),
		Unindexed:    p.unindexed.Load(),
	}
}

// Version returns the version of the table being built.
func (b *Builder) Version() uint64 { return b.t.version }

// Entries returns the table's entries, Size of them, for fill to
// write, every one (see Build).
//
// Write them in place (e := &entries[i]; *e = …; e.Weight = …), not by
// setting a field on a local Entry and then storing it: that makes the
// 32-byte store read back the narrow write through the stack (a
// store-forwarding stall), measured at about 5× the cost per slot
// (bench/status).
func (b *Builder) Entries() []Entry { return b.t.entries }

// SetStoreRevision records the store revision the table is built from.
// It defaults to the previous table's.
func (b *Builder) SetStoreRevision(rev uint64) { b.revision = rev }

// SetServices sets the names Entry.Service refers to. It defaults to the
// previous table's. The table keeps n: the writer passes the same *Names
// until the set of services changes.
func (b *Builder) SetServices(n *Names) { b.services = n }

// SetDirectory sets the table's Directory. It defaults to the previous
// table's. The writer passes the same *Directory until the store changes.
func (b *Builder) SetDirectory(d *Directory) { b.directory = d }

// SetLocalities sets the names Entry.Region and Entry.Zone refer to, at
// most 65536 of them with the empty name. It defaults to the previous
// table's.
func (b *Builder) SetLocalities(n *Names) { b.localities = n }
