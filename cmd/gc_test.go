package cmd

import (
	"runtime/debug"
	"testing"
)

// TestGCPercent: --gc-percent takes 10 to 1000 and sets the collector's
// pace, unless GOGC is in the environment, whose value stays in force.
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
	if got := setGCPercent(37, noEnv); got != 37 {
		t.Errorf("setGCPercent(37) without GOGC = %d", got)
	}
	if cur := debug.SetGCPercent(100); cur != 37 {
		t.Errorf("the collector's GOGC after setGCPercent(37) is %d", cur)
	}
	env := func(k string) string {
		if k == "GOGC" {
			return "80"
		}
		return ""
	}
	debug.SetGCPercent(80) // what the runtime read from GOGC=80 at start
	if got := setGCPercent(37, env); got != 80 {
		t.Errorf("setGCPercent(37) with GOGC=80 = %d, want the environment's 80", got)
	}
	if cur := debug.SetGCPercent(100); cur != 80 {
		t.Errorf("the collector's GOGC after setGCPercent(37) with GOGC=80 is %d", cur)
	}
}
