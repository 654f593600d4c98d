package status

import (
	"fmt"
	"testing"
)

// TestWriterGrowsTheTables: tables that start at 2 slots double, up to
// Capacity, as a layout holds more instances; every instance is in the
// table of its layout with its name, past the first size; a reader
// holding a table of the old size keeps reading it whole; the tables do
// not shrink when the layout does, and past Capacity instances are
// dropped.
func TestWriterGrowsTheTables(t *testing.T) {
	pub, err := New(Config{Capacity: 16, Initial: 2})
	if err != nil {
		t.Fatal(err)
	}
	var dropped []string
	w := NewWriter(pub, WriterConfig{Dropped: func(k string, err error) { dropped = append(dropped, k) }})
	ids := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("i%02d", i)
		}
		return out
	}
	layOut(t, w, 1, ids(2)...)
	old := pub.Acquire()
	defer old.Release()
	if pub.Size() != 2 || old.Capacity() != 2 {
		t.Fatalf("size %d, table of %d; want 2", pub.Size(), old.Capacity())
	}
	check := func(rev uint64, n, size int) {
		t.Helper()
		tb := pub.Acquire()
		defer tb.Release()
		svc, _ := tb.Services().ID("ns/web")
		if pub.Size() != size || tb.Capacity() != size || len(tb.Members(svc)) != n || tb.StoreRevision() != rev {
			t.Fatalf("size %d, table of %d, %d members at revision %d; want %d slots, %d members at %d",
				pub.Size(), tb.Capacity(), len(tb.Members(svc)), tb.StoreRevision(), size, n, rev)
		}
		for _, id := range ids(n) {
			slot, ok := tb.Directory().SlotOf(id + ".web.ns")
			if e, held := tb.Lookup(int(slot), KeyHash("ns/web/"+id)); !ok || !held || !e.Flags.Has(Eligible) {
				t.Fatalf("%s: slot %d (%v), entry %+v (%v)", id, slot, ok, e, held)
			}
		}
	}
	layOut(t, w, 2, ids(5)...) // 2 → 4 → 8
	check(2, 5, 8)
	// The reader of the first table still reads it as it was.
	if svc, _ := old.Services().ID("ns/web"); len(old.Members(svc)) != 2 || old.Capacity() != 2 || old.StoreRevision() != 1 {
		t.Fatalf("the old table changed under its reader: %d members, %d slots", len(old.Members(svc)), old.Capacity())
	}
	// Shrinking and growing again reuses the slots: no growth.
	layOut(t, w, 3, ids(1)...)
	check(3, 1, 8)
	layOut(t, w, 4, ids(1)...) // the freed slots recycled
	layOut(t, w, 5, ids(8)...)
	check(5, 8, 8)
	layOut(t, w, 6, ids(16)...)
	check(6, 16, 16)
	if len(dropped) != 0 {
		t.Fatalf("dropped %v", dropped)
	}
	w.Begin(7, []ServiceInfo{{Namespace: "ns", Name: "web"}})
	for _, id := range ids(17) {
		w.Add(0, Instance{ID: id, Incarnation: 1, Lifecycle: Ready, Flags: Eligible})
	}
	w.End()
	if _, err := w.Build(nil); err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 1 || dropped[0] != "ns/web/i16" || pub.Size() != 16 {
		t.Fatalf("dropped %v at size %d; want ns/web/i16 past Capacity 16", dropped, pub.Size())
	}
	if st := pub.Stats(); st.ExtraTables != 0 || st.Tables > DefaultTables {
		t.Errorf("stats %+v: the tables of old sizes were kept, or counted as extra", st)
	}
}

// TestSlotsGrowKeepsTheOrder: the free slots are handed out in the
// order they were freed, then the new ones.
func TestSlotsGrowKeepsTheOrder(t *testing.T) {
	s := NewSlots(4)
	for _, k := range []string{"a", "b", "c", "d"} {
		if _, err := s.Assign(k); err != nil {
			t.Fatal(err)
		}
	}
	s.Free("c")
	s.Free("a")
	s.Recycle()
	s.Free("d") // pending: not handed out before the next Recycle
	s.Grow(6)
	var got []int
	for _, k := range []string{"e", "f", "g", "h"} {
		slot, err := s.Assign(k)
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		got = append(got, slot)
	}
	if want := []int{2, 0, 4, 5}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("slots %v, want %v", got, want)
	}
	if _, err := s.Assign("i"); err == nil {
		t.Fatal("a slot past the free ones and d's, pending")
	}
	s.Recycle()
	if slot, err := s.Assign("i"); err != nil || slot != 3 {
		t.Fatalf("slot %d (%v), want d's 3", slot, err)
	}
}

func TestConfigInitial(t *testing.T) {
	for _, c := range []Config{{Capacity: 4, Initial: 5}, {Capacity: 4, Initial: -1}} {
		if _, err := New(c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	pub, err := New(Config{Capacity: 8})
	if err != nil || pub.Size() != 8 {
		t.Fatalf("size %d (%v); want Capacity when Initial is 0", pub.Size(), err)
	}
	if err := pub.Grow(4); err == nil {
		t.Error("Grow below the size: no error")
	}
	if err := pub.Grow(9); err == nil {
		t.Error("Grow past Capacity: no error")
	}
}
