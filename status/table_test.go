package status

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestMembers checks the service index against a naive scan, over builds
// that reuse tables while the number of services grows and shrinks.
func TestMembers(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := rapid.IntRange(1, 64).Draw(t, "capacity")
		p := mustNew(t, Config{Capacity: capacity, Tables: 2})
		var unindexed uint64
		for build := range rapid.IntRange(1, 6).Draw(t, "builds") {
			nsvc := rapid.IntRange(0, 80).Draw(t, fmt.Sprint("services", build))
			names := make([]string, nsvc)
			for i := range names {
				names[i] = fmt.Sprint("ns/svc", i)
			}
			services := NewNames(names...)
			want := make([][]uint32, services.Len())
			bad := 0
			_, err := p.Build(func(b *Builder) error {
				b.SetServices(services)
				entries := b.Entries()
				for i := range entries {
					e := Entry{}
					if rapid.Bool().Draw(t, "used") {
						// Now and then an id past the list: an evaluator bug.
						e = Entry{Key: uint64(i) + 1, Service: uint32(rapid.IntRange(0, services.Len()).Draw(t, "service"))}
						if int(e.Service) < services.Len() {
							want[e.Service] = append(want[e.Service], uint32(i))
						} else {
							bad++
						}
					}
					entries[i] = e
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			unindexed += uint64(bad)
			tb := p.Acquire()
			for s := range services.Len() + 2 {
				got := tb.Members(uint32(s))
				var w []uint32
				if s < len(want) {
					w = want[s]
				}
				if !slices.Equal(got, w) {
					t.Fatalf("build %d: Members(%d) = %v; want %v", build, s, got, w)
				}
			}
			tb.Release()
			if got := p.Stats().Unindexed; got != unindexed {
				t.Fatalf("Unindexed = %d; want %d", got, unindexed)
			}
		}
	})
}

// Members must not let a reader append into the next service's slots.
func TestMembersIsFull(t *testing.T) {
	p := mustNew(t, Config{Capacity: 4})
	_, err := p.Build(func(b *Builder) error {
		b.SetServices(NewNames("a/x", "a/y"))
		e := b.Entries()
		e[0] = Entry{Key: 1, Service: 1}
		e[1] = Entry{Key: 2, Service: 2}
		e[2], e[3] = Entry{}, Entry{}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tb := p.Acquire()
	defer tb.Release()
	if m := tb.Members(1); len(m) != 1 || cap(m) != 1 {
		t.Errorf("Members(1): len %d cap %d; want 1, 1", len(m), cap(m))
	}
}
