package probe

import (
	"cmp"
	"slices"
)

// Assign returns the members that probe targetID: the min(replicas,
// distinct members) members with the highest rendezvous
// (highest-random-weight) score for it, best first. Every node computes
// the same answer from the same live member list, whatever its order and
// with no coordination; when a member leaves, only the targets it probed
// move (each to the member ranked next for it), and when one joins it
// takes about 1/n of the targets, each from one member.
//
// members is the cluster's live nodes, a small set: Assign costs
// O(n log n) in it. Duplicates count once. Replicas of 2 gives every
// target two observers where there are two or more members (issue 3).
//
// The score is a fixed function of (targetID, member) so that nodes of
// different builds agree; changing it reassigns every target at once.
func Assign(targetID string, members []string, replicas int) []string {
	if replicas <= 0 || len(members) == 0 {
		return nil
	}
	type cand struct {
		m string
		s uint64
	}
	cs := make([]cand, 0, len(members))
	for i, m := range members {
		if !firstOf(members, i) {
			continue
		}
		cs = append(cs, cand{m, score(targetID, m)})
	}
	slices.SortFunc(cs, func(a, b cand) int {
		if c := cmp.Compare(b.s, a.s); c != 0 {
			return c
		}
		return cmp.Compare(a.m, b.m)
	})
	out := make([]string, min(replicas, len(cs)))
	for i := range out {
		out[i] = cs[i].m
	}
	return out
}

// Assigned reports whether observer is one of Assign(targetID, members,
// replicas), without allocating. The evaluator calls it for every result
// with the result's Observer, and discards and counts a result from an
// observer the target is not assigned to (SPEC §0.7: a prober reports
// only about its assigned targets). An observer missing from members is
// not assigned anything.
func Assigned(targetID, observer string, members []string, replicas int) bool {
	if replicas <= 0 {
		return false
	}
	own := score(targetID, observer)
	found, better := false, 0
	for i, m := range members {
		switch {
		case m == observer:
			found = true
		case !firstOf(members, i):
		default:
			s := score(targetID, m)
			if s > own || (s == own && m < observer) {
				better++
			}
		}
	}
	return found && better < replicas
}

// firstOf reports whether members[i] is its first occurrence. Member
// lists are a cluster's nodes, a handful, for which a quadratic scan is
// cheaper than a map.
func firstOf(members []string, i int) bool {
	return !slices.Contains(members[:i], members[i])
}

// score is the rendezvous weight of member for targetID: FNV-1a over
// targetID, a zero byte and member, finished with the SplitMix64 mixer so
// that names differing in one byte get unrelated scores.
func score(targetID, member string) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(targetID); i++ {
		h = (h ^ uint64(targetID[i])) * prime64
	}
	h *= prime64 // the separator: a zero byte
	for i := 0; i < len(member); i++ {
		h = (h ^ uint64(member[i])) * prime64
	}
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
