package dnsserver

import (
	"cmp"
	"math"
	"slices"

	"github.com/cairn-sd/cairn/status"
)

// candidate is one endpoint of an answer in the making.
type candidate struct {
	slot   uint32
	tier   uint8
	weight uint16
	key    float64 // the sampling key: smaller is chosen first
	// disregarded: served only because health is disregarded.
	disregarded bool
	// peerStale: another region's endpoint, from a view older than
	// stale-after (status.PeerStale).
	peerStale bool
}

// selection is the outcome of choosing a service's endpoints for one
// caller: the chosen candidates, best first, and whether health was
// disregarded for any of them.
type selection struct {
	chosen      []candidate
	disregarded bool
	// evacuated: the answer holds endpoints of an evacuated zone, because
	// nothing nearer could carry the caller (status.TierEvacuated).
	evacuated bool
	// stale: the answer holds another region's endpoints from a view
	// older than stale-after: it is a stale answer (RFC 8767).
	stale bool
}

// servable reports whether an entry's instance may be served at all when
// health is disregarded: ready, not draining, terminated or starting
// (SPEC §2: those never come back through the guard).
func servable(e status.Entry) bool { return e.Lifecycle == status.Ready }

// healthy reports whether the evidence keeps an entry in rotation: it is
// eligible, and not only because the evaluator's own guard serves it
// (status.HealthDisregarded). An instance whose withdrawal the shrink cap
// defers still counts.
func healthy(e status.Entry) bool {
	return e.Flags.Has(status.Eligible) && !e.Flags.Has(status.HealthDisregarded)
}

// weightOf is the weight an entry is sampled with: its published weight
// when healthy, its base weight when served with health disregarded. It
// stays small enough to inline (the hot path calls it for every member
// of every answer); the share of a zone returning from an evacuation is
// applied beside it (sampleWeight, srvWeight).
func weightOf(e status.Entry) uint16 {
	if healthy(e) && e.Weight > 0 {
		return e.Weight
	}
	return max(e.BaseWeight, 1)
}

// sampleWeight is weightOf times the entry's share (status.Entry.Share:
// 1 unless its zone returns from an evacuation).
func sampleWeight(e status.Entry) float64 { return float64(weightOf(e)) * e.Share() }

// sharedWeight is the SRV weight of an entry whose zone an evacuation
// shifts: weightOf times its share, at least 1 (the callers test Shift
// first, so that the common path makes no call).
func sharedWeight(e status.Entry) uint16 { return uint16(max(math.Round(sampleWeight(e)), 1)) }

// selectA chooses the A/AAAA endpoints of a service for a caller at loc
// (SPEC §3). Every member is examined, whatever its state (constant work
// per query).
//
// The caller uses the best tier with candidates and spills into the next
// ones while the last tier used has a healthy fraction × 1.4 below 1.
// The tiers used share the load as Envoy's priority levels do: tier 0
// takes min(1, 1.4 × its healthy fraction), the next what remains up to
// its own share, the last used all that is left. When the tiers used
// together have fewer healthy endpoints than minFrac of their servable
// ones, health is disregarded: every servable endpoint of them is a
// candidate, the load shared by their numbers, healthy ones listed first.
//
// Candidates are sampled without replacement with weight × their tier's
// load ÷ the tier's total weight (Efraimidis–Spirakis), up to limit, so
// the first record of an answer falls on an endpoint in proportion to its
// share of the load. has filters endpoints with no address of the asked
// family. rnd returns uniform floats in [0, 1). buf is reused for the
// result's candidates.
func selectA(t *status.Table, members []uint32, loc status.Locality, minFrac float64, limit int,
	has func(slot uint32) bool, rnd func() float64, buf []candidate) selection {
	var counts status.TierCounts
	for _, slot := range members {
		e := t.Entry(int(slot))
		if !servable(e) || !has(slot) {
			continue
		}
		w := sampleWeight(e)
		counts.Add(status.TierOf(loc, e), healthy(e), e.Share(), w, w)
	}
	sp := counts.Spill(minFrac)
	sel := selection{chosen: buf[:0]}
	if sp.Used == 0 {
		return sel
	}
	// Each used tier's share of the load, spread over its weight.
	var perW [status.NumTiers]float64
	for tr := range status.NumTiers {
		if sp.Use[tr] && sp.Weight[tr] > 0 {
			perW[tr] = sp.Load[tr] / sp.Weight[tr]
		}
	}
	for _, slot := range members {
		e := t.Entry(int(slot))
		if !servable(e) || !has(slot) {
			continue
		}
		tr := status.TierOf(loc, e)
		ok := healthy(e)
		if !sp.Use[tr] || !ok && !sp.Disregard || perW[tr] == 0 {
			continue
		}
		c := candidate{slot: slot, tier: uint8(tr), weight: weightOf(e), disregarded: !ok, peerStale: e.Flags.Has(status.PeerStale)}
		c.key = sampleKey(rnd(), sampleWeight(e)*perW[tr])
		sel.chosen = append(sel.chosen, c)
	}
	slices.SortFunc(sel.chosen, func(a, b candidate) int {
		return cmp.Or(cmpBool(a.disregarded, b.disregarded), cmp.Compare(a.key, b.key), cmp.Compare(a.slot, b.slot))
	})
	if len(sel.chosen) > limit {
		sel.chosen = sel.chosen[:limit]
	}
	for _, c := range sel.chosen {
		sel.disregarded = sel.disregarded || c.disregarded
		sel.evacuated = sel.evacuated || c.tier == status.TierEvacuated
		sel.stale = sel.stale || c.peerStale
	}
	return sel
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}

// srvMergedWeight is what the weights of tiers merged into one SRV
// priority add up to: within SRV's 16 bits, fine enough for a tier's
// share.
const srvMergedWeight = 60000

// selectSRV chooses the SRV endpoints of a service for a caller: every
// eligible endpoint (every servable one of the tiers used, when health is
// disregarded as for selectA), priority = tier, in weighted random order
// within a tier, so a client that takes the first record still spreads
// its load by weight.
//
// One exception: while a zone returns from an evacuation and the caller
// uses its tier together with the next ones (the spill selectA
// computes), those tiers share the priority of the first of them, each
// endpoint's weight its tier's share of the load (as the xDS server
// merges them). A client takes the lowest priority whole, so the
// returning zone alone at priority 0 would take back all its callers at
// once; merged, it takes its share.
func selectSRV(t *status.Table, members []uint32, loc status.Locality, minFrac float64,
	has func(slot uint32) bool, rnd func() float64, buf []candidate) selection {
	var total, good int
	returning := false
	for _, slot := range members {
		e := t.Entry(int(slot))
		if !servable(e) || !has(slot) {
			continue
		}
		total++
		if healthy(e) {
			good++
			returning = returning || e.Returning()
		}
	}
	disregard := total > 0 && minFrac > 0 && float64(good) < minFrac*float64(total)
	// perW[tr] turns a weight of merged tier tr into its share of
	// srvMergedWeight; 0 for a tier not merged (every tier, unless a zone
	// returns: the common path pays nothing for the rule).
	var (
		first = -1
		perW  [status.NumTiers]float64
	)
	if returning && !disregard {
		first, perW = mergedTiers(t, members, loc, minFrac, has)
	}
	sel := selection{chosen: buf[:0]}
	for _, slot := range members {
		e := t.Entry(int(slot))
		if !servable(e) || !has(slot) {
			continue
		}
		ok := healthy(e)
		if !ok && !disregard {
			continue
		}
		tr := status.TierOf(loc, e)
		c := candidate{slot: slot, tier: uint8(tr), weight: weightOf(e), disregarded: !ok, peerStale: e.Flags.Has(status.PeerStale)}
		if e.Shift != 0 {
			c.weight = sharedWeight(e)
		}
		if perW[tr] > 0 {
			c.tier = uint8(first)
			c.weight = uint16(min(max(math.Round(sampleWeight(e)*perW[tr]), 1), 65535))
		}
		c.key = sampleKey(rnd(), float64(c.weight))
		sel.chosen = append(sel.chosen, c)
		sel.disregarded = sel.disregarded || c.disregarded
		sel.stale = sel.stale || c.peerStale
	}
	sortCandidates(sel.chosen)
	return sel
}

// mergedTiers is selectSRV's rule while a zone returns: when the caller
// uses a tier holding a returning endpoint together with others (the
// spill selectA computes), the first of them and, per tier, the factor
// that turns an endpoint's weight into its tier's share of
// srvMergedWeight; none (-1) otherwise.
func mergedTiers(t *status.Table, members []uint32, loc status.Locality, minFrac float64,
	has func(slot uint32) bool) (first int, perW [status.NumTiers]float64) {
	var (
		counts    status.TierCounts
		returning [status.NumTiers]bool
	)
	for _, slot := range members {
		e := t.Entry(int(slot))
		if !servable(e) || !has(slot) {
			continue
		}
		ok, tr := healthy(e), status.TierOf(loc, e)
		returning[tr] = returning[tr] || ok && e.Returning()
		w := sampleWeight(e)
		counts.Add(tr, ok, e.Share(), w, w)
	}
	sp := counts.Spill(minFrac)
	merged := false
	for tr := range status.NumTiers {
		merged = merged || sp.Use[tr] && returning[tr]
	}
	first = -1
	if sp.Disregard || sp.Used < 2 || !merged {
		return first, perW
	}
	for tr := range status.NumTiers {
		if !sp.Use[tr] {
			continue
		}
		if first < 0 {
			first = tr
		}
		if sp.Weight[tr] > 0 {
			perW[tr] = sp.Load[tr] / sp.Weight[tr] * srvMergedWeight
		}
	}
	return first, perW
}

// sampleKey is the Efraimidis–Spirakis key of weighted sampling without
// replacement, in its exponential form: the k smallest of −ln(u)/w are a
// weighted sample of k.
func sampleKey(u, w float64) float64 {
	if u <= 0 {
		u = math.SmallestNonzeroFloat64
	}
	return -math.Log(u) / w
}

// sortCandidates orders SRV candidates by tier (their priority), then
// key; it allocates nothing.
func sortCandidates(cs []candidate) {
	slices.SortFunc(cs, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.tier, b.tier), cmp.Compare(a.key, b.key), cmp.Compare(a.slot, b.slot))
	})
}
