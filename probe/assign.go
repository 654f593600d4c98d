package probe

import "slices"

// Assign returns the members that probe targetID: the min(replicas,
// distinct members) members with the highest rendezvous
// (highest-random-weight) score for it, best first. Every node computes
// the same answer from the same live member list, whatever its order and
// with no coordination; when a member leaves, only the targets it probed
// move (each to the member ranked next for it), and when one joins it
// takes about 1/n of the targets, each from one member.
//
// members is the cluster's live nodes, a small set: Assign costs
// O(replicas² × n) in it. Duplicates count once. Replicas of 2 gives every
// target two observers where there are two or more members (issue 3).
//
// The score is a fixed function of (targetID, member) so that nodes of
// different builds agree; changing it reassigns every target at once.
func Assign(targetID string, members []string, replicas int) []string {
	return AssignZoned(targetID, members, nil, replicas)
}

// AssignZoned is Assign with the members' zones (zoneOf; nil: all in one
// zone): each next observer is the best-scored member in a zone none of
// the observers chosen so far is in, and only where every zone is taken
// the best-scored of the rest. So a target's two observers stand in
// different zones wherever the cluster has servers in more than one, and
// one zone cut off from the others never leaves a target with no
// observer outside it (SPEC §2).
func AssignZoned(targetID string, members []string, zoneOf func(string) string, replicas int) []string {
	var out []string
	pick(targetID, members, zoneOf, replicas, func(m string) bool {
		out = append(out, m)
		return true
	})
	return out
}

// Assigned reports whether observer is one of Assign(targetID, members,
// replicas), without allocating. The evaluator calls it for every result
// with the result's Observer, and discards and counts a result from an
// observer the target is not assigned to (SPEC §0.7: a prober reports
// only about its assigned targets). An observer missing from members is
// not assigned anything.
func Assigned(targetID, observer string, members []string, replicas int) bool {
	return AssignedZoned(targetID, observer, members, nil, replicas)
}

// AssignedZoned is Assigned for AssignZoned.
func AssignedZoned(targetID, observer string, members []string, zoneOf func(string) string, replicas int) bool {
	found := false
	pick(targetID, members, zoneOf, replicas, func(m string) bool {
		found = m == observer
		return !found
	})
	return found
}

// pick calls yield with the members assigned to targetID, best first,
// until it returns false. It allocates nothing for up to 8 replicas.
func pick(targetID string, members []string, zoneOf func(string) string, replicas int, yield func(string) bool) {
	if replicas <= 0 || len(members) == 0 {
		return
	}
	var buf [8]int
	chosen := buf[:0]
	zone := func(m string) string {
		if zoneOf == nil {
			return ""
		}
		return zoneOf(m)
	}
	taken := func(z string) bool {
		for _, c := range chosen {
			if zone(members[c]) == z {
				return true
			}
		}
		return false
	}
	better := func(i, j int) bool { // members[i] outranks members[j]
		si, sj := score(targetID, members[i]), score(targetID, members[j])
		return si > sj || si == sj && members[i] < members[j]
	}
	for len(chosen) < replicas {
		best, bestNew := -1, -1 // best of the rest; best in a zone not taken
		for i, m := range members {
			if !firstOf(members, i) || slices.Contains(chosen, i) {
				continue
			}
			if best < 0 || better(i, best) {
				best = i
			}
			if !taken(zone(m)) && (bestNew < 0 || better(i, bestNew)) {
				bestNew = i
			}
		}
		if best < 0 {
			return
		}
		if bestNew >= 0 {
			best = bestNew
		}
		chosen = append(chosen, best)
		if !yield(members[best]) {
			return
		}
	}
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
