package store

import (
	"strings"
	"testing"
)

// TestCompareKeys: keys order as their strings do, "-" before "/"
// included, without making the strings.
func TestCompareKeys(t *testing.T) {
	keys := []InstanceKey{{"a", "b", "c"}, {"a-b", "c", "d"}, {"a", "b-c", "a"}, {"a", "b", "c-1"}, {"a", "b", ""},
		{"", "", ""}, {"ab", "", "x"}, {"a", "bc", "d"}, {"a", "b", "c"}}
	for _, a := range keys {
		for _, b := range keys {
			if got, want := compareKeys(a, b), strings.Compare(a.String(), b.String()); got != want {
				t.Errorf("compareKeys(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	if n := testing.AllocsPerRun(10, func() { compareKeys(keys[1], keys[2]) }); n != 0 {
		t.Errorf("compareKeys allocates %v times", n)
	}
}
