package wire

import (
	"errors"
	"strings"
	"testing"
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

func TestOutcomeBatchValidate(t *testing.T) {
	ok := EndpointOutcome{Namespace: "shop", Service: "cart", Instance: "a", Incarnation: 3, Success: 10}
	rep := func(observer string, eps ...EndpointOutcome) ObservedOutcomes {
		return ObservedOutcomes{Observer: observer, OutcomeReport: OutcomeReport{Endpoints: eps}}
	}
	many := make([]ObservedOutcomes, MaxOutcomeBatch+1)
	for i := range many {
		many[i] = rep("xds:n", ok)
	}
	tests := []struct {
		name    string
		reports []ObservedOutcomes
		field   string // the field the error must name first; "" for valid
	}{
		{"one report", []ObservedOutcomes{rep("xds:node-1", ok)}, ""},
		{"a token's identity", []ObservedOutcomes{rep("xds:reader:t0123abcd", ok), rep("xds:node-2", ok)}, ""},
		{"no reports", nil, "reports"},
		{"too many reports", many, "reports"},
		{"not an xds observer", []ObservedOutcomes{rep("node-1", ok)}, "reports[0].observer"},
		{"observer with a space", []ObservedOutcomes{rep("xds:node-1", ok), rep("xds:a b", ok)}, "reports[1].observer"},
		{"observer too long", []ObservedOutcomes{rep("xds:"+strings.Repeat("a", 253), ok)}, "reports[0].observer"},
		{"no endpoints", []ObservedOutcomes{rep("xds:n")}, "reports[0].endpoints"},
		{"bad endpoint", []ObservedOutcomes{rep("xds:n", ok, EndpointOutcome{Namespace: "shop", Service: "cart", Instance: "b"})}, "reports[0].endpoints[1].incarnation"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := OutcomeBatch{Reports: tc.reports}.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("Validate: %v, want nil", err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), tc.field+": ") {
				t.Fatalf("Validate: %v, want an ErrInvalid naming %s", err, tc.field)
			}
		})
	}
}
