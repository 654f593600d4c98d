package status

import "testing"

func TestTierOf(t *testing.T) {
	// ids: 1 eu, 2 eu-1a, 3 eu-1b, 4 us, 5 us-1a
	at := func(r, z uint16) Entry { return Entry{Region: r, Zone: z} }
	for _, tc := range []struct {
		name   string
		caller Locality
		e      Entry
		want   int
	}{
		{"same zone", Locality{1, 2}, at(1, 2), TierZone},
		{"same region, other zone", Locality{1, 2}, at(1, 3), TierRegion},
		{"other region", Locality{1, 2}, at(4, 5), TierOther},
		{"caller without a place", Locality{}, at(4, 5), TierZone},
		{"endpoint without a place", Locality{1, 2}, at(0, 0), TierZone},
		{"caller knows only its region", Locality{1, 0}, at(1, 2), TierRegion},
		{"caller's region not held", Locality{0, 2}, at(1, 2), TierOther},
	} {
		if got := TierOf(tc.caller, tc.e); got != tc.want {
			t.Errorf("%s: TierOf(%v, %v/%v) = %d, want %d", tc.name, tc.caller, tc.e.Region, tc.e.Zone, got, tc.want)
		}
	}
}

func TestLocalityOf(t *testing.T) {
	tab := &Table{localities: NewNames("eu", "eu-1a")}
	if got, want := tab.LocalityOf("eu", "eu-1a"), (Locality{1, 2}); got != want {
		t.Errorf("LocalityOf(eu, eu-1a) = %v, want %v", got, want)
	}
	if got := tab.LocalityOf("mars", ""); got != (Locality{}) {
		t.Errorf("LocalityOf of names the table does not hold = %v, want zero", got)
	}
}
