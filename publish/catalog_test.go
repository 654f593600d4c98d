package publish

import (
	"testing"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestLifecycleMapping: each store lifecycle maps to its own status value
// and back, and anything unknown reads as starting.
func TestLifecycleMapping(t *testing.T) {
	seen := map[status.Lifecycle]bool{}
	for _, l := range []wire.Lifecycle{wire.Starting, wire.Ready, wire.Draining, wire.Terminated} {
		s := lifecycleOf(l)
		if seen[s] {
			t.Errorf("%s maps to %v, as another lifecycle does", l, s)
		}
		seen[s] = true
		if back := storeLifecycle(s); back != l {
			t.Errorf("%s → %v → %s", l, s, back)
		}
	}
	if got := lifecycleOf("bogus"); got != status.Starting {
		t.Errorf("an unknown lifecycle maps to %v, want starting", got)
	}
}
