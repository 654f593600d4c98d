package status

// Locality is a caller's or an endpoint's place: region and zone ids in a
// table's Localities (0: not known).
type Locality struct{ Region, Zone uint16 }

// LocalityOf returns the ids of a region and a zone in t's Localities;
// a name the table does not hold (no instance is there) gets 0.
func (t *Table) LocalityOf(region, zone string) Locality {
	r, _ := t.localities.ID(region)
	z, _ := t.localities.ID(zone)
	return Locality{Region: uint16(r), Zone: uint16(z)}
}

// Tiers (SPEC §3): how near an endpoint is to a caller. The DNS server
// prefers the nearest tier with enough healthy endpoints; the xDS server
// publishes the tiers as priorities, nearest first. An evacuated zone's
// endpoints are last for every caller, wherever they are (SPEC §6): a
// preference shift, not a withdrawal, so a caller spills into them by
// the tier rules when nothing else can carry it.
const (
	TierZone      = 0 // the caller's zone
	TierRegion    = 1 // the caller's region, another zone
	TierOther     = 2 // another region
	TierEvacuated = 3 // an evacuated zone, wherever it is
	NumTiers      = 4
)

// TierOf returns the tier of an endpoint at e for a caller at loc. An
// endpoint or a caller without a locality is in TierZone: nothing is
// known to be nearer. An evacuated endpoint is in TierEvacuated.
func TierOf(loc Locality, e Entry) int {
	switch {
	case e.Evacuated():
		return TierEvacuated
	case loc.Region == 0 && loc.Zone == 0, e.Region == 0 && e.Zone == 0:
		return TierZone
	case e.Region == loc.Region && e.Zone == loc.Zone:
		return TierZone
	case e.Region == loc.Region:
		return TierRegion
	}
	return TierOther
}
