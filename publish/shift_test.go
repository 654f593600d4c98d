package publish

import (
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// shiftOf: the largest shift of the evacuations covering an instance,
// from its service's shift_back window.
func TestShiftOf(t *testing.T) {
	window := wire.Duration(100 * time.Second)
	cs := Service{Key: wire.ServiceKey{Namespace: "shop", Name: "cart"},
		Def: wire.Service{Policy: wire.Policy{ShiftBack: &window}},
		Instances: []Instance{
			{Key: "a1", Loc: &Locality{"r1", "a"}},
			{Key: "b1", Loc: &Locality{"r1", "b"}},
			{Key: "c1", Loc: &Locality{"r2", "c"}},
			{Key: "x1", Loc: &Locality{"r2", "a"}},
		}}
	ended := time.Unix(1000, 0)
	evs := []wire.Evacuation{
		// Zone b of every service, returning for 35 s of 100: 0.4.
		{ID: 1, Zone: "b", EndedAt: ended, Returned: wire.Duration(35 * time.Second)},
		// Zone a of region r1, this service: evacuated.
		{ID: 2, Region: "r1", Zone: "a", Namespace: "shop", Service: "cart"},
		// Zone b again, of this service, returning at 0.1: the larger
		// shift wins.
		{ID: 3, Zone: "b", Namespace: "shop", Service: "cart", EndedAt: ended},
		// Zone c of another service: not this one's.
		{ID: 4, Zone: "c", Namespace: "shop", Service: "web"},
	}
	shiftOf(&cs, evs)
	want := map[string]uint8{"a1": status.ShiftAll, "b1": 90, "c1": 0, "x1": 0}
	for _, in := range cs.Instances {
		if in.Shift != want[in.Key] {
			t.Errorf("%s: shift %d, want %d", in.Key, in.Shift, want[in.Key])
		}
	}
}
