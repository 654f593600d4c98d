package store

import (
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/wire"
)

// TestCompareKeys: keys order as their strings do, "-" before "/"
// included, without making the strings.
func TestCompareKeys(t *testing.T) {
	k := func(ns, svc, id string) wire.InstanceKey {
		return wire.InstanceKey{Namespace: ns, Service: svc, ID: id}
	}
	keys := []wire.InstanceKey{k("a", "b", "c"), k("a-b", "c", "d"), k("a", "b-c", "a"), k("a", "b", "c-1"), k("a", "b", ""), k("", "", ""), k("ab", "", "x"), k("a", "bc", "d"), k("a", "b", "c")}
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
