package health

import (
	"errors"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/wire"
)

func TestOutcomeReportValidate(t *testing.T) {
	ok := EndpointOutcome{Namespace: "shop", Service: "cart", Instance: "a", Incarnation: 3, Success: 10, Failure: 1, Timeout: 2}
	with := func(f func(*EndpointOutcome)) EndpointOutcome { e := ok; f(&e); return e }
	many := make([]EndpointOutcome, MaxOutcomeEndpoints+1)
	for i := range many {
		many[i] = ok
	}
	tests := []struct {
		name      string
		endpoints []EndpointOutcome
		field     string // the field the error must name first; "" for valid
	}{
		{"one endpoint", []EndpointOutcome{ok}, ""},
		{"zero counts are valid (discarded later, not refused)", []EndpointOutcome{with(func(e *EndpointOutcome) { e.Success, e.Failure, e.Timeout = 0, 0, 0 })}, ""},
		{"largest counts", []EndpointOutcome{with(func(e *EndpointOutcome) { e.Success, e.Failure, e.Timeout = maxCount, maxCount, maxCount })}, ""},
		{"two instances", []EndpointOutcome{ok, with(func(e *EndpointOutcome) { e.Instance = "b" })}, ""},
		{"same instance id in another service", []EndpointOutcome{ok, with(func(e *EndpointOutcome) { e.Service = "pay" })}, ""},
		{"no endpoints", nil, "endpoints"},
		{"too many endpoints", many, "endpoints"},
		{"bad namespace", []EndpointOutcome{with(func(e *EndpointOutcome) { e.Namespace = "Shop" })}, "endpoints[0].namespace"},
		{"missing service", []EndpointOutcome{ok, with(func(e *EndpointOutcome) { e.Service = "" })}, "endpoints[1].service"},
		{"bad instance id", []EndpointOutcome{with(func(e *EndpointOutcome) { e.Instance = "-a" })}, "endpoints[0].instance_id"},
		{"zero incarnation", []EndpointOutcome{with(func(e *EndpointOutcome) { e.Incarnation = 0 })}, "endpoints[0].incarnation"},
		{"negative success", []EndpointOutcome{with(func(e *EndpointOutcome) { e.Success = -1 })}, "endpoints[0].success"},
		{"negative failure", []EndpointOutcome{with(func(e *EndpointOutcome) { e.Failure = -1 })}, "endpoints[0].failure"},
		{"timeout too large", []EndpointOutcome{ok, with(func(e *EndpointOutcome) { e.Instance = "b"; e.Timeout = maxCount + 1 })}, "endpoints[1].timeout"},
		{"endpoint twice", []EndpointOutcome{ok, with(func(e *EndpointOutcome) { e.Success = 1 })}, "endpoints[1]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := OutcomeReport{Endpoints: tc.endpoints}.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate: nil, want an error naming %s", tc.field)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %q does not wrap ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Errorf("error %q does not start with the field %q", err, tc.field)
			}
		})
	}
}

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
