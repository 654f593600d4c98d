package health

import (
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/wire"
)

func TestTargetID(t *testing.T) {
	key := wire.InstanceKey{Namespace: "shop", Service: "cart", ID: "a-1"}
	id := TargetID(key, 42)
	if id != "shop/cart/a-1#42" {
		t.Fatalf("TargetID = %q, want shop/cart/a-1#42", id)
	}
	if k, inc, ok := parseTarget(id); !ok || k != key.String() || inc != 42 {
		t.Fatalf("parseTarget(%q) = %q, %d, %t; want %q, 42, true", id, k, inc, ok, key)
	}
	for _, bad := range []string{
		"", "#", "#1", "shop/cart/a", "shop/cart/a#", "shop/cart/a#0", "shop/cart/a#-1", "shop/cart/a#x",
		"shop/cart/a#1.5", "shop/cart/a#18446744073709551616", "shop/cart/a#+1", "shop/cart/a#01", "shop/cart/a#1_0", "cart/a#1", "a#1", "shop/cart/a/b#1",
	} {
		if k, inc, ok := parseTarget(bad); ok {
			t.Errorf("parseTarget(%q) = %q, %d, true; want it refused", bad, k, inc)
		}
	}
}

// FuzzParseTarget: whatever a follower sends as a target id, parsing it
// never panics, and what it accepts is exactly a TargetID: the observer
// check hashes the id as sent, so two spellings of one target would let
// an observer pick the one assigned to it.
func FuzzParseTarget(f *testing.F) {
	for _, s := range []string{"shop/cart/a#1", "shop/cart/a#0", "a/b/c#18446744073709551615", "##", "a/b/c#1#2", "/ /#1", "a/b/c#007"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		k, inc, ok := parseTarget(id)
		if !ok {
			return
		}
		parts := strings.Split(k, "/")
		if len(parts) != 3 || inc == 0 {
			t.Fatalf("parseTarget(%q) accepted key %q incarnation %d", id, k, inc)
		}
		key := wire.InstanceKey{Namespace: parts[0], Service: parts[1], ID: parts[2]}
		if back := TargetID(key, inc); back != id {
			t.Fatalf("parseTarget(%q) = %q, %d, which prints as %q", id, k, inc, back)
		}
	})
}
