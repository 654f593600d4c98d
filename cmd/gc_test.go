package cmd

import (
	"runtime/debug"
	"testing"
)

// TestGCPercent: --gc-percent takes 10 to 1000; below 100 it is the low
// end of a paced GOGC, from 100 up a fixed one; GOGC in the environment
// wins and nothing is set or run.
func TestGCPercent(t *testing.T) {
	for _, bad := range []int{-1, 0, 9, 1001} {
		if err := checkGCPercent(bad); err == nil {
			t.Errorf("checkGCPercent(%d) = nil, want an error", bad)
		}
	}
	for _, good := range []int{10, defaultGCPercent, 1000} {
		if err := checkGCPercent(good); err != nil {
			t.Errorf("checkGCPercent(%d) = %v", good, err)
		}
	}
	was := debug.SetGCPercent(100)
	defer debug.SetGCPercent(was)
	noEnv := func(string) string { return "" }
	pace, desc := gcPacing(30, noEnv)
	if pace == nil || pace.Low != 30 || pace.High != 100 || desc != "30 to 100 by allocation rate" {
		t.Errorf("gcPacing(30) = %+v, %q; want pacing from 30 to 100", pace, desc)
	}
	if pace, desc := gcPacing(150, noEnv); pace != nil || desc != "150" {
		t.Errorf("gcPacing(150) = %+v, %q; want a fixed 150", pace, desc)
	}
	if cur := debug.SetGCPercent(100); cur != 150 {
		t.Errorf("the collector's GOGC after gcPacing(150) is %d", cur)
	}
	env := func(k string) string {
		if k == "GOGC" {
			return "80"
		}
		return ""
	}
	if pace, desc := gcPacing(30, env); pace != nil || desc != "GOGC=80" {
		t.Errorf("gcPacing(30) with GOGC=80 = %+v, %q; want the environment's, nothing run", pace, desc)
	}
	if cur := debug.SetGCPercent(100); cur != 100 {
		t.Errorf("gcPacing with GOGC set changed the collector's GOGC to %d", cur)
	}
}
