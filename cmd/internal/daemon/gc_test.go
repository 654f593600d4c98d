package daemon

import (
	"runtime/debug"
	"testing"
)

// TestGCPercent: --gc-percent takes 10 to 1000 and is fixed unless
// --gc-percent-burst (above it, at most 1000) makes it the low end of a
// paced GOGC; GOGC in the environment wins and nothing is set or run.
func TestGCPercent(t *testing.T) {
	for _, bad := range [][2]int{{-1, 0}, {0, 0}, {9, 0}, {1001, 0}, {25, 25}, {25, 20}, {25, 1001}, {25, -1}} {
		if err := CheckGCPercent(bad[0], bad[1]); err == nil {
			t.Errorf("CheckGCPercent(%d, %d) = nil, want an error", bad[0], bad[1])
		}
	}
	for _, good := range [][2]int{{10, 0}, {DefaultGCPercent, 0}, {1000, 0}, {25, 100}, {25, 1000}} {
		if err := CheckGCPercent(good[0], good[1]); err != nil {
			t.Errorf("CheckGCPercent(%d, %d) = %v", good[0], good[1], err)
		}
	}
	was := debug.SetGCPercent(100)
	defer debug.SetGCPercent(was)
	noEnv := func(string) string { return "" }
	if pace, desc := GCPacing(30, 0, noEnv); pace != nil || desc != "30" {
		t.Errorf("GCPacing(30, 0) = %+v, %q; want a fixed 30", pace, desc)
	}
	if cur := debug.SetGCPercent(100); cur != 30 {
		t.Errorf("the collector's GOGC after GCPacing(30, 0) is %d", cur)
	}
	pace, desc := GCPacing(30, 80, noEnv)
	if pace == nil || pace.Low != 30 || pace.High != 80 || desc != "30 to 80 by allocation rate" {
		t.Errorf("GCPacing(30, 80) = %+v, %q; want pacing from 30 to 80", pace, desc)
	}
	env := func(k string) string {
		if k == "GOGC" {
			return "80"
		}
		return ""
	}
	for _, burst := range []int{0, 100} {
		if pace, desc := GCPacing(30, burst, env); pace != nil || desc != "GOGC=80" {
			t.Errorf("GCPacing(30, %d) with GOGC=80 = %+v, %q; want the environment's, nothing run", burst, pace, desc)
		}
	}
	if cur := debug.SetGCPercent(100); cur != 100 {
		t.Errorf("GCPacing with GOGC set changed the collector's GOGC to %d", cur)
	}
}
