package status

// Overprovisioning is Envoy's factor, and cairn's (SPEC §3): a tier whose
// healthy fraction times it is below 1 spills its callers into the next
// tier.
const Overprovisioning = 1.4

// TierCounts gathers, per tier of one caller, a service's servable
// endpoints (ready: SPEC §2's draining, starting and terminated ones are
// never counted) and the healthy ones among them, with their weights.
// The DNS server and the xDS server both fill one per caller and ask it
// how the caller spills, so that an answer and an assignment agree.
type TierCounts struct {
	total, good [NumTiers]int
	// share counts the healthy endpoints each in its Entry.Share: a zone
	// returning from an evacuation is as healthy, for the spill, as the
	// share it has taken back.
	share       [NumTiers]float64
	allW, goodW [NumTiers]float64
}

// Add counts one servable endpoint in tier: share is its Entry.Share,
// weight what it weighs when health is disregarded, healthyWeight what
// it weighs in rotation (used only if healthy; its share already
// applied).
func (c *TierCounts) Add(tier int, healthy bool, share, weight, healthyWeight float64) {
	c.total[tier]++
	c.allW[tier] += weight
	if healthy {
		c.good[tier]++
		c.share[tier] += share
		c.goodW[tier] += healthyWeight
	}
}

// Spill is how a caller uses the tiers (SPEC §2, §3).
type Spill struct {
	// Use marks the tiers the caller uses: the best tier with servable
	// endpoints, and the next ones while the last one used has a healthy
	// fraction × Overprovisioning below 1 (the fraction counts a
	// returning zone's endpoints in their share). Used counts them. A
	// caller that uses TierEvacuated is served from an evacuated zone
	// because nothing nearer can carry it, and its answer says so.
	Use  [NumTiers]bool
	Used int
	// Disregard: the tiers used together have fewer healthy endpoints
	// than the minimum healthy fraction of their servable ones, so every
	// servable endpoint of them is served, healthy or not. (A returning
	// zone's healthy endpoints count whole here: the guard is about
	// health, not preference.)
	Disregard bool
	// Load is each used tier's share of the caller's load, as Envoy's
	// priority levels share it: the first min(1, 1.4 × its healthy
	// fraction), the next what remains up to its own, the last what is
	// left; under Disregard, in proportion to their servable endpoints.
	// Weight is the total weight that share is spread over: the healthy
	// endpoints' (under Disregard, every servable one's).
	Load, Weight [NumTiers]float64
}

// Spill returns how the caller whose endpoints c counted uses the tiers,
// for a service whose minimum healthy fraction is minFrac (0: never
// disregard health). It does no allocation.
func (c *TierCounts) Spill(minFrac float64) Spill {
	var sp Spill
	usedTotal, usedGood, last := 0, 0, -1
	for tr := range NumTiers {
		if c.total[tr] == 0 {
			continue
		}
		sp.Use[tr], last = true, tr
		sp.Used++
		usedTotal += c.total[tr]
		usedGood += c.good[tr]
		if c.share[tr]/float64(c.total[tr])*Overprovisioning >= 1 {
			break
		}
	}
	if last < 0 {
		return sp
	}
	sp.Disregard = minFrac > 0 && float64(usedGood) < minFrac*float64(usedTotal)
	remaining := 1.0
	for tr := range NumTiers {
		if !sp.Use[tr] {
			continue
		}
		switch {
		case sp.Disregard:
			sp.Load[tr], sp.Weight[tr] = float64(c.total[tr])/float64(usedTotal), c.allW[tr]
		case tr == last:
			sp.Load[tr], sp.Weight[tr] = remaining, c.goodW[tr]
		default:
			sp.Load[tr], sp.Weight[tr] = min(remaining, c.share[tr]/float64(c.total[tr])*Overprovisioning), c.goodW[tr]
		}
		remaining -= sp.Load[tr]
	}
	return sp
}
