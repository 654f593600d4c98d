package probe

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func TestAssign(t *testing.T) {
	members := []string{"n1", "n2", "n3", "n4", "n5"}

	t.Run("deterministic and order-independent", func(t *testing.T) {
		shuffled := []string{"n4", "n1", "n5", "n3", "n2"}
		for i := range 1000 {
			id := fmt.Sprintf("ns/svc/i%d#1", i)
			a, b := Assign(id, members, 2), Assign(id, shuffled, 2)
			if !slices.Equal(a, b) || !slices.Equal(a, Assign(id, members, 2)) {
				t.Fatalf("%s: %v, then %v", id, a, b)
			}
		}
	})

	t.Run("min(replicas, members) distinct members", func(t *testing.T) {
		for _, tc := range []struct {
			members  []string
			replicas int
			want     int
		}{
			{members, 2, 2}, {members, 5, 5}, {members, 9, 5},
			{[]string{"solo"}, 2, 1}, {nil, 2, 0}, {members, 0, 0},
			{[]string{"a", "a", "b"}, 3, 2}, // duplicates count once
		} {
			got := Assign("x", tc.members, tc.replicas)
			if len(got) != tc.want {
				t.Errorf("Assign(%v, %d) = %v; want %d members", tc.members, tc.replicas, got, tc.want)
			}
			seen := map[string]bool{}
			for _, m := range got {
				if seen[m] || !slices.Contains(tc.members, m) {
					t.Errorf("Assign(%v, %d) = %v: repeated or foreign member", tc.members, tc.replicas, got)
				}
				seen[m] = true
			}
		}
	})

	t.Run("balanced over 10000 targets", func(t *testing.T) {
		const n = 10000
		load := map[string]int{}
		for i := range n {
			for _, m := range Assign(fmt.Sprintf("ns/svc/i%d#7", i), members, 2) {
				load[m]++
			}
		}
		want := n * 2 / len(members) // 4000
		for _, m := range members {
			// ±5% is about 5 standard deviations.
			if d := load[m] - want; d < -want/20 || d > want/20 {
				t.Errorf("%s probes %d targets; want %d ± 5%% (%v)", m, load[m], want, load)
			}
		}
	})

	t.Run("Assigned agrees with Assign", func(t *testing.T) {
		for i := range 2000 {
			id := fmt.Sprintf("t%d", i)
			got := Assign(id, members, 2)
			for _, m := range append(slices.Clone(members), "stranger") {
				if Assigned(id, m, members, 2) != slices.Contains(got, m) {
					t.Fatalf("Assigned(%s, %s) disagrees with Assign = %v", id, m, got)
				}
			}
		}
		if Assigned("t", "n1", members, 0) {
			t.Error("assigned with replicas 0")
		}
		if n := testing.AllocsPerRun(100, func() { Assigned("ns/svc/i#1", "n3", members, 2) }); n != 0 {
			t.Errorf("Assigned allocates %v times a call; want 0", n)
		}
	})
}

// TestAssignProperties checks, over generated member sets, that Assign and
// Assigned agree and that a member leaving moves only its own targets.
func TestAssignProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		members := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z][a-z0-9-]{0,8}`), 1, 9, rapid.ID[string]).Draw(t, "members")
		replicas := rapid.IntRange(1, 4).Draw(t, "replicas")
		gone := rapid.SampledFrom(members).Draw(t, "gone")
		rest := slices.DeleteFunc(slices.Clone(members), func(m string) bool { return m == gone })
		ids := rapid.SliceOfN(rapid.String(), 1, 50).Draw(t, "ids")
		for _, id := range ids {
			before := Assign(id, members, replicas)
			if len(before) != min(replicas, len(members)) {
				t.Fatalf("Assign(%q) = %v; want %d members", id, before, min(replicas, len(members)))
			}
			for _, m := range members {
				if Assigned(id, m, members, replicas) != slices.Contains(before, m) {
					t.Fatalf("Assigned(%q, %q) disagrees with %v", id, m, before)
				}
			}
			after := Assign(id, rest, replicas)
			if !slices.Contains(before, gone) {
				if !slices.Equal(before, after) {
					t.Fatalf("%q moved from %v to %v when %q, not one of its members, left", id, before, after, gone)
				}
				continue
			}
			// The survivors keep it, in the same order; at most one
			// member (the next in rank) takes the leaver's place.
			kept := slices.DeleteFunc(slices.Clone(before), func(m string) bool { return m == gone })
			if !slices.Equal(after[:len(kept)], kept) || len(after)-len(kept) > 1 {
				t.Fatalf("%q: %v became %v when %q left; want %v plus at most one", id, before, after, gone, kept)
			}
		}
	})
}

// TestAssignZoned: where the cluster has servers in more than one zone,
// every target's two observers stand in different zones; where it has
// one zone, the assignment is Assign's; AssignedZoned agrees with
// AssignZoned and allocates nothing.
func TestAssignZoned(t *testing.T) {
	zones := map[string]string{"n1": "r/a", "n2": "r/a", "n3": "r/a", "n4": "r/b", "n5": "r/c"}
	zoneOf := func(m string) string { return zones[m] }
	members := []string{"n1", "n2", "n3", "n4", "n5"}
	picked := map[string]int{}
	for i := range 2000 {
		id := fmt.Sprintf("ns/svc/i%d#1", i)
		got := AssignZoned(id, members, zoneOf, 2)
		if len(got) != 2 || zones[got[0]] == zones[got[1]] {
			t.Fatalf("AssignZoned(%s) = %v: want two observers in two zones", id, got)
		}
		if first := Assign(id, members, 1); got[0] != first[0] {
			t.Fatalf("AssignZoned(%s) = %v: the first observer is not the best-scored %v", id, got, first)
		}
		for _, m := range members {
			if AssignedZoned(id, m, members, zoneOf, 2) != slices.Contains(got, m) {
				t.Fatalf("AssignedZoned(%s, %s) disagrees with %v", id, m, got)
			}
		}
		for _, m := range got {
			picked[m]++
		}
	}
	for _, m := range members {
		if picked[m] == 0 {
			t.Errorf("%s observes nothing: %v", m, picked)
		}
	}
	oneZone := func(string) string { return "r/a" }
	for i := range 200 {
		id := fmt.Sprintf("ns/svc/j%d#1", i)
		if a, b := AssignZoned(id, members, oneZone, 2), Assign(id, members, 2); !slices.Equal(a, b) {
			t.Fatalf("one zone: AssignZoned(%s) = %v, Assign = %v", id, a, b)
		}
	}
	if n := testing.AllocsPerRun(100, func() { AssignedZoned("ns/svc/i#1", "n4", members, zoneOf, 2) }); n != 0 {
		t.Errorf("AssignedZoned allocates %v times per call", n)
	}
}
