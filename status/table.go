package status

import (
	"sync/atomic"
	"time"
)

// Table is one published version of the status of every slot: an
// immutable snapshot that the DNS and xDS servers read without locking.
//
// A reader gets a Table from Publisher.Acquire and must call Release when
// it is done with it, promptly: after one DNS answer, or one xDS snapshot
// build. Between the two the table does not change; after Release the
// reader must not touch it again, because the Publisher reuses released
// tables for later versions. Every method may be called from any number
// of goroutines.
type Table struct {
	// refs counts the readers holding the table. It has a cache line of
	// its own: every Acquire and Release writes it, and every read of the
	// fields below would otherwise share the line.
	refs atomic.Int32
	_    [64 - 4]byte

	version       uint64
	built         time.Time
	storeRevision uint64
	entries       []Entry // len == capacity, always
	services      *Names
	localities    *Names
	directory     *Directory
	// offsets and members index the used entries by service, in slot
	// order: the slots of service s are members[offsets[s]:offsets[s+1]].
	// Both are derived from entries at every build.
	offsets   []uint32 // len services.Len()+1
	members   []uint32 // cap == capacity
	unindexed int      // used entries whose Service is not in services
}

func newTable(capacity int) *Table {
	return &Table{
		entries: make([]Entry, capacity),
		members: make([]uint32, 0, capacity),
		offsets: make([]uint32, 0, 64),
	}
}

// Release gives the table back. Each Acquire is paired with exactly one
// Release; releasing more panics when the surplus is detected.
func (t *Table) Release() {
	if t.refs.Add(-1) < 0 {
		panic("status: Table released more often than acquired")
	}
}

// Version numbers the published tables of a Publisher, strictly
// increasing from 1. The xDS snapshot version and the logs carry it, so
// that DNS and xDS answers can be correlated.
func (t *Table) Version() uint64 { return t.version }

// Built is when the table was built, by the Publisher's clock.
func (t *Table) Built() time.Time { return t.built }

// StoreRevision is the revision of the local store replica the table was
// built from, as the writer recorded it (Builder.SetStoreRevision).
func (t *Table) StoreRevision() uint64 { return t.storeRevision }

// Capacity returns the number of slots, used or not. It never changes.
func (t *Table) Capacity() int { return len(t.entries) }

// Entry returns the entry in slot, by value. It panics if slot is out of
// range [0, Capacity()).
func (t *Table) Entry(slot int) Entry { return t.entries[slot] }

// Lookup returns the entry in slot if the slot holds the instance whose
// KeyHash is key. It reports false for an unused slot, a slot now holding
// another instance, and a slot out of range. A reader that also knows the
// incarnation compares Entry.Incarnation itself: a newer one means the
// instance re-registered.
func (t *Table) Lookup(slot int, key uint64) (Entry, bool) {
	if slot < 0 || slot >= len(t.entries) || key == 0 {
		return Entry{}, false
	}
	e := t.entries[slot]
	return e, e.Key == key
}

// Services returns the service names that Entry.Service refers to.
func (t *Table) Services() *Names { return t.services }

// Directory returns the names and addresses the entries refer to by
// slot and service id; nil if the writer set none.
func (t *Table) Directory() *Directory { return t.directory }

// Localities returns the locality names that Entry.Region and Entry.Zone
// refer to.
func (t *Table) Localities() *Names { return t.localities }

// Locality returns the locality name with the given id ("" if unknown).
func (t *Table) Locality(id uint16) string { return t.localities.Name(uint32(id)) }

// Members returns the slots of the used entries of a service, in slot
// order; none for a service without instances or out of range. The
// slice belongs to the table: do not modify it, or keep it after
// Release. It covers every candidate of the service, whatever its
// verdict, so a query's work does not depend on how many are healthy
// (SPEC §3).
func (t *Table) Members(service uint32) []uint32 {
	if uint64(service)+1 >= uint64(len(t.offsets)) {
		return nil
	}
	return t.members[t.offsets[service]:t.offsets[service+1]:t.offsets[service+1]]
}

// index rebuilds offsets and members from entries with a counting sort:
// one pass over every entry, whatever it holds, that counts and notes
// each slot's service in svc (a writer-side scratch of Capacity), then a
// pass over svc that places the slots. Its cost is constant for a given
// capacity and number of services.
func (t *Table) index(svc []uint32) {
	n := t.services.Len()
	if cap(t.offsets) < n+1 {
		// Only when the service list grew past what this table has held.
		t.offsets = make([]uint32, n+1, n+1+n/4)
	}
	off := t.offsets[:n+1]
	clear(off)
	svc = svc[:len(t.entries)]
	bad := 0
	for i := range t.entries {
		e := &t.entries[i]
		s := e.Service
		switch {
		case e.Key == 0:
			s = uint32(n) // not indexed
		case uint64(s) >= uint64(n):
			s = uint32(n)
			bad++
		}
		svc[i] = s
		off[s]++ // off[n] counts the slots not indexed
	}
	// Exclusive prefix sum: off[s] = first position of service s.
	var sum uint32
	for s := range n {
		c := off[s]
		off[s] = sum
		sum += c
	}
	off[n] = sum
	members := t.members[:sum]
	for i, s := range svc {
		if s == uint32(n) {
			continue
		}
		members[off[s]] = uint32(i)
		off[s]++
	}
	// Placing moved each off[s] to the end of s, the start of s+1: shift
	// them back.
	for s := n - 1; s > 0; s-- {
		off[s] = off[s-1]
	}
	off[0] = 0
	t.offsets, t.members, t.unindexed = off, members, bad
}
