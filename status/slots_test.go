package status

import (
	"errors"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

func TestSlots(t *testing.T) {
	s := NewSlots(3)
	assign := func(key string) int {
		t.Helper()
		slot, err := s.Assign(key)
		if err != nil {
			t.Fatalf("Assign(%q): %v", key, err)
		}
		return slot
	}
	t.Run("stable", func(t *testing.T) {
		a, b := assign("ns/svc/a"), assign("ns/svc/b")
		if a != 0 || b != 1 {
			t.Errorf("slots %d, %d; want 0, 1", a, b)
		}
		s.Recycle()
		if again := assign("ns/svc/a"); again != a {
			t.Errorf("Assign(a) again = %d; want %d", again, a)
		}
		if slot, ok := s.Lookup("ns/svc/b"); !ok || slot != b {
			t.Errorf("Lookup(b) = %d, %v", slot, ok)
		}
		if key, hash, ok := s.Key(a); !ok || key != "ns/svc/a" || hash != KeyHash("ns/svc/a") {
			t.Errorf("Key(%d) = %q, %#x, %v", a, key, hash, ok)
		}
	})
	t.Run("freed slots wait for Recycle", func(t *testing.T) {
		assign("ns/svc/c")
		if !s.Free("ns/svc/a") || s.Free("ns/svc/a") {
			t.Fatal("Free(a) twice: want true then false")
		}
		if _, _, ok := s.Key(0); ok {
			t.Error("Key(0) still held after Free")
		}
		if _, ok := s.Lookup("ns/svc/a"); ok {
			t.Error("Lookup(a) found after Free")
		}
		_, err := s.Assign("ns/svc/d")
		if !errors.Is(err, ErrCapacity) {
			t.Fatalf("Assign(d) before Recycle = %v; want ErrCapacity", err)
		}
		t.Log(err)
		s.Recycle()
		if d := assign("ns/svc/d"); d != 0 {
			t.Errorf("Assign(d) after Recycle = %d; want the freed slot 0", d)
		}
		if s.Len() != 3 || s.Capacity() != 3 {
			t.Errorf("Len %d, Capacity %d; want 3, 3", s.Len(), s.Capacity())
		}
	})
	t.Run("bad input", func(t *testing.T) {
		if _, err := s.Assign(""); err == nil {
			t.Error("Assign(\"\") succeeded")
		}
		for _, slot := range []int{-1, 3} {
			if _, _, ok := s.Key(slot); ok {
				t.Errorf("Key(%d) ok", slot)
			}
		}
		defer func() {
			if recover() == nil {
				t.Error("NewSlots(0) did not panic")
			}
		}()
		NewSlots(0)
	})
}

// TestSlotsModel checks Slots against a model through any sequence of
// assigns, frees and recycles: live keys and used slots stay a bijection
// within capacity, a key keeps its slot while live, a freed slot is not
// handed out before Recycle, and Assign fails only when no slot is free.
func TestSlotsModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(1, 12).Draw(t, "capacity")
		s := NewSlots(capacity)
		live := map[string]int{}  // key → slot
		pending := map[int]bool{} // freed, not recycled
		keys := rapid.StringMatching(`[a-z]{1,3}`)
		t.Repeat(map[string]func(*rapid.T){
			"assign": func(t *rapid.T) {
				k := keys.Draw(t, "key")
				slot, err := s.Assign(k)
				if old, ok := live[k]; ok {
					if err != nil || slot != old {
						t.Fatalf("Assign(%q) = %d, %v; want its slot %d", k, slot, err, old)
					}
					return
				}
				if len(live)+len(pending) == capacity {
					if !errors.Is(err, ErrCapacity) {
						t.Fatalf("Assign(%q) with no free slot = %d, %v; want ErrCapacity", k, slot, err)
					}
					return
				}
				if err != nil {
					t.Fatalf("Assign(%q) = %v with %d live, %d pending of %d", k, err, len(live), len(pending), capacity)
				}
				if pending[slot] {
					t.Fatalf("Assign(%q) = slot %d, freed but not recycled", k, slot)
				}
				live[k] = slot
			},
			"free": func(t *rapid.T) {
				k := keys.Draw(t, "key")
				slot, ok := live[k]
				if s.Free(k) != ok {
					t.Fatalf("Free(%q) = %v; want %v", k, !ok, ok)
				}
				if ok {
					delete(live, k)
					pending[slot] = true
				}
			},
			"recycle": func(t *rapid.T) {
				s.Recycle()
				clear(pending)
			},
			"": func(t *rapid.T) {
				if s.Len() != len(live) {
					t.Fatalf("Len = %d; want %d", s.Len(), len(live))
				}
				used := map[int]string{}
				for k, slot := range live {
					if slot < 0 || slot >= capacity {
						t.Fatalf("%q has slot %d out of [0, %d)", k, slot, capacity)
					}
					if other, dup := used[slot]; dup {
						t.Fatalf("slot %d held by %q and %q", slot, k, other)
					}
					used[slot] = k
					if got, ok := s.Lookup(k); !ok || got != slot {
						t.Fatalf("Lookup(%q) = %d, %v; want %d", k, got, ok, slot)
					}
				}
				for slot := range capacity {
					key, hash, ok := s.Key(slot)
					if want, held := used[slot]; ok != held || key != want || (ok && hash != KeyHash(want)) {
						t.Fatalf("Key(%d) = %q, %v; want %q, %v", slot, key, ok, want, held)
					}
				}
			},
		})
	})
}

func TestKeyHash(t *testing.T) {
	// FNV-1a 64 test vectors.
	for _, tt := range []struct {
		key  string
		want uint64
	}{
		{"", 0xcbf29ce484222325},
		{"a", 0xaf63dc4c8601ec8c},
		{"foobar", 0x85944171f73967e8},
	} {
		if got := KeyHash(tt.key); got != tt.want {
			t.Errorf("KeyHash(%q) = %#x; want %#x", tt.key, got, tt.want)
		}
	}
	seen := map[uint64]string{}
	for i := range 10000 {
		k := fmt.Sprintf("ns/svc/i-%d", i)
		h := KeyHash(k)
		if h == 0 {
			t.Fatalf("KeyHash(%q) = 0", k)
		}
		if other, dup := seen[h]; dup {
			t.Fatalf("KeyHash(%q) = KeyHash(%q)", k, other)
		}
		seen[h] = k
	}
	if allocs := testing.AllocsPerRun(100, func() { _ = KeyHash("payments/checkout/i-123") }); allocs != 0 {
		t.Errorf("KeyHash allocates %v times", allocs)
	}
}

// TestSlotsLookupBytes: a key spelled in bytes finds the slot, and with
// Key the string the slot holds, without an allocation.
func TestSlotsLookupBytes(t *testing.T) {
	s := NewSlots(4)
	want, err := s.Assign("shop/cart/web-1")
	if err != nil {
		t.Fatal(err)
	}
	b := []byte("shop/cart/web-1")
	slot, ok := s.LookupBytes(b)
	if k, _, _ := s.Key(slot); !ok || slot != want || k != "shop/cart/web-1" {
		t.Errorf("LookupBytes = %d, %v (key %q); want %d, true", slot, ok, k, want)
	}
	if _, ok := s.LookupBytes([]byte("shop/cart/web-2")); ok {
		t.Error("LookupBytes found a key that holds no slot")
	}
	if n := testing.AllocsPerRun(100, func() { s.LookupBytes(b) }); n != 0 {
		t.Errorf("LookupBytes allocates %v times, want 0", n)
	}
}
