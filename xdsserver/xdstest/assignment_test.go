package xdstest_test

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// TestZonePlacement: a zone is evacuated only when every one of its
// endpoints is flagged and at the last priority.
func TestZonePlacement(t *testing.T) {
	lb := func(evacuated bool) *endpointv3.LbEndpoint {
		e := &endpointv3.LbEndpoint{}
		if evacuated {
			e.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
				"cairn": {Fields: map[string]*structpb.Value{"evacuated": structpb.NewBoolValue(true)}}}}
		}
		return e
	}
	loc := func(zone string, prio uint32, eps ...*endpointv3.LbEndpoint) *endpointv3.LocalityLbEndpoints {
		return &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: "r", Zone: zone}, Priority: prio, LbEndpoints: eps}
	}
	cla := func(ls ...*endpointv3.LocalityLbEndpoints) *endpointv3.ClusterLoadAssignment {
		return &endpointv3.ClusterLoadAssignment{Endpoints: ls}
	}
	for _, c := range []struct {
		name string
		cla  *endpointv3.ClusterLoadAssignment
		want xdstest.Placement
	}{
		{"no endpoint of the zone", cla(loc("a", 0, lb(false))), xdstest.ZoneAbsent},
		{"in its tier", cla(loc("a", 0, lb(false)), loc("c", 1, lb(false))), xdstest.ZoneInTier},
		{"evacuated", cla(loc("a", 0, lb(false)), loc("c", 1, lb(true), lb(true))), xdstest.ZoneEvacuated},
		{"one not flagged", cla(loc("a", 0, lb(false)), loc("c", 1, lb(true), lb(false))), xdstest.ZoneInTier},
		{"flagged, not last", cla(loc("c", 0, lb(true)), loc("a", 1, lb(false))), xdstest.ZoneInTier},
	} {
		if got := xdstest.ZonePlacement(c.cla, "c"); got != c.want {
			t.Errorf("%s: ZonePlacement = %d, want %d", c.name, got, c.want)
		}
	}
}
