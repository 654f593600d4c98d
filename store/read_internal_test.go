package store

import (
	"strings"
	"testing"
)

// TestCompareServiceKeys: the order of Services is that of the keys'
// strings ("namespace/name"), made or not.
func TestCompareServiceKeys(t *testing.T) {
	names := []string{"", "a", "a-b", "a.b", "ab", "b", "a0", "z-", "web", "web-1"}
	for _, ns1 := range names {
		for _, n1 := range names {
			for _, ns2 := range names {
				for _, n2 := range names {
					want := strings.Compare(ns1+"/"+n1, ns2+"/"+n2)
					if got := compareServiceKeys(ns1, n1, ns2, n2); got != want {
						t.Fatalf("compareServiceKeys(%q, %q, %q, %q) = %d, want %d", ns1, n1, ns2, n2, got, want)
					}
				}
			}
		}
	}
}
