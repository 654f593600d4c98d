package scenarios

import (
	"slices"
	"testing"
	"time"
)

// TestXRCap: 5% of the expected count, at least 50.
func TestXRCap(t *testing.T) {
	for _, c := range []struct{ expected, want int }{{0, 50}, {667, 50}, {1000, 50}, {1001, 51}, {2000, 100}, {20000, 1000}} {
		if got := xrCap(c.expected); got != c.want {
			t.Errorf("xrCap(%d) = %d, want %d", c.expected, got, c.want)
		}
	}
}

// TestXRWindowCounts: an admission whose request and answer fall in one
// window is certain there; one across a boundary is possible in both.
func TestXRWindowCounts(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	as := []xrAdmit{
		{at(-1), at(0.5)}, // before the start: window 0
		{at(1), at(1.1)},
		{at(9.9), at(10.1)}, // across the boundary
		{at(10.2), at(10.3)},
		{at(25), at(25.1)},
	}
	certain, possible := xrWindowCounts(as, t0)
	if !slices.Equal(certain, []int{2, 1, 1}) || !slices.Equal(possible, []int{3, 2, 1}) {
		t.Errorf("certain %v, possible %v; want [2 1 1], [3 2 1]", certain, possible)
	}
	if got := xrSlidingMax(as); got != 4 {
		t.Errorf("sliding max %d, want 4 (0.5 to 10.3 s)", got)
	}
}

// TestXRAdmissionStart reads the start of the cap from a server's log,
// the first at or after the restart.
func TestXRAdmissionStart(t *testing.T) {
	log := []byte(`time=2026-12-05T16:00:00.100Z level=INFO msg="admitting xDS subscribers gradually after a restart" expected=10 per_10s=50
time=2026-12-05T16:05:00.250Z level=INFO msg="raft: something"
time=2026-12-05T16:05:01.250Z level=INFO msg="admitting xDS subscribers gradually after a restart" expected=667 per_10s=50
`)
	at, expected, per, err := xrAdmissionStart(log, time.Date(2026, 12, 5, 16, 5, 0, 0, time.UTC))
	if err != nil || !at.Equal(time.Date(2026, 12, 5, 16, 5, 1, 250e6, time.UTC)) || expected != 667 || per != 50 {
		t.Errorf("got %v, %d, %d, %v; want 16:05:01.25, 667, 50", at, expected, per, err)
	}
	if _, _, _, err := xrAdmissionStart(log, time.Date(2026, 12, 5, 17, 0, 0, 0, time.UTC)); err == nil {
		t.Error("no start since: want an error")
	}
}
