package status

import (
	"errors"
	"fmt"
)

// ErrCapacity is wrapped by Slots.Assign's error when every slot is taken.
var ErrCapacity = errors.New("status: every slot is taken")

// Slots gives each instance a slot of the table that it keeps for as long
// as it is registered, so that the writer's per-slot state and the
// readers' references stay valid across rebuilds.
//
// A freed slot is not handed out again until Recycle, which the writer
// calls after each Build: by then the table it published has rewritten
// the slot, empty, so no current table shows the old instance in a slot
// a new instance has. Readers still holding an older table tell reuse
// apart by Entry.Key and Entry.Incarnation. Freed slots are reused oldest
// first.
//
// Slots belongs to the writer: it is not safe for concurrent use.
type Slots struct {
	byKey   map[string]uint32
	keys    []string // per slot; "" when free
	hashes  []uint64 // per slot: KeyHash(keys[slot]); 0 when free
	free    []uint32 // ring of free slots, oldest first
	head, n int      // free[head] is the next to hand out; n are free
	pending []uint32 // freed since the last Recycle
}

// NewSlots returns an allocator of capacity slots, all free, handed out
// from slot 0 up. It panics if capacity is not in [1, MaxCapacity]; pass
// Publisher.Size.
func NewSlots(capacity int) *Slots {
	if capacity < 1 || capacity > MaxCapacity {
		panic(fmt.Sprintf("status: NewSlots(%d): capacity out of range", capacity))
	}
	s := &Slots{
		byKey:  make(map[string]uint32),
		keys:   make([]string, capacity),
		hashes: make([]uint64, capacity),
		free:   make([]uint32, capacity),
		n:      capacity,
	}
	for i := range s.free {
		s.free[i] = uint32(i)
	}
	return s
}

// Capacity returns the number of slots.
func (s *Slots) Capacity() int { return len(s.keys) }

// Len returns the number of keys holding a slot.
func (s *Slots) Len() int { return len(s.byKey) }

// Assign returns key's slot, giving it a free one if it has none. It
// fails, wrapping ErrCapacity, when every slot is held or freed but not
// yet recycled. An empty key is refused.
func (s *Slots) Assign(key string) (int, error) {
	if slot, ok := s.byKey[key]; ok {
		return int(slot), nil
	}
	if key == "" {
		return 0, errors.New("status: assigning a slot: empty key")
	}
	if s.n == 0 {
		return 0, fmt.Errorf("assigning a slot to %q: %w (%d slots, %d awaiting Recycle)", key, ErrCapacity, len(s.keys), len(s.pending))
	}
	slot := s.free[s.head]
	s.head = (s.head + 1) % len(s.free)
	s.n--
	s.byKey[key] = slot
	s.keys[slot] = key
	s.hashes[slot] = KeyHash(key)
	return int(slot), nil
}

// Grow adds free slots up to capacity, after those already free: the
// new slots were never held, so they are handed out at once. It panics
// if capacity is below Capacity or above MaxCapacity.
func (s *Slots) Grow(capacity int) {
	old := len(s.keys)
	if capacity < old || capacity > MaxCapacity {
		panic(fmt.Sprintf("status: Slots.Grow(%d): not between %d and MaxCapacity", capacity, old))
	}
	s.keys = append(s.keys, make([]string, capacity-old)...)
	s.hashes = append(s.hashes, make([]uint64, capacity-old)...)
	// The ring, unrolled from its head: the free slots in order, then
	// the new ones.
	free := make([]uint32, capacity)
	for i := range s.n {
		free[i] = s.free[(s.head+i)%old]
	}
	for i := range capacity - old {
		free[s.n+i] = uint32(old + i)
	}
	s.free, s.head, s.n = free, 0, s.n+capacity-old
}

// Lookup returns key's slot.
func (s *Slots) Lookup(key string) (int, bool) {
	slot, ok := s.byKey[key]
	return int(slot), ok
}

// LookupBytes is Lookup of a key spelled in a byte slice, without making
// a string of it: with Key, it finds the string a slot holds for those
// bytes.
func (s *Slots) LookupBytes(key []byte) (int, bool) {
	slot, ok := s.byKey[string(key)]
	return int(slot), ok
}

// Key returns the key holding slot and its KeyHash, the Entry.Key to
// write there; ok is false for a free slot or one out of range.
func (s *Slots) Key(slot int) (key string, hash uint64, ok bool) {
	if slot < 0 || slot >= len(s.keys) || s.hashes[slot] == 0 {
		return "", 0, false
	}
	return s.keys[slot], s.hashes[slot], true
}

// Free releases key's slot, reporting whether key held one. The slot is
// handed out again only after the next Recycle.
func (s *Slots) Free(key string) bool {
	slot, ok := s.byKey[key]
	if !ok {
		return false
	}
	delete(s.byKey, key)
	s.keys[slot], s.hashes[slot] = "", 0
	s.pending = append(s.pending, slot)
	return true
}

// Recycle makes the slots freed since the last Recycle available to
// Assign. Call it after a Build has published a table that wrote them
// empty.
func (s *Slots) Recycle() {
	for _, slot := range s.pending {
		s.free[(s.head+s.n)%len(s.free)] = slot
		s.n++
	}
	s.pending = s.pending[:0]
}

// KeyHash returns the 64-bit FNV-1a hash of an instance key (the store's
// "namespace/service/id"), never 0: Entry.Key, which lets a reader check
// that a slot holds the instance it expects. It does not allocate.
func KeyHash(key string) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(key); i++ {
		h ^= uint64(key[i])
		h *= prime64
	}
	if h == 0 {
		h = 1 // 0 marks an unused slot
	}
	return h
}
