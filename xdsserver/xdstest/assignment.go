package xdstest

import (
	"net/netip"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
)

// InRotation lists the endpoints of cla a client would send traffic to:
// those published HEALTHY or UNKNOWN (grpc-go uses only these; Envoy
// treats DRAINING and UNHEALTHY as unhealthy), in the assignment's
// order. An endpoint whose address is not an IP socket address is left
// out.
func InRotation(cla *endpointv3.ClusterLoadAssignment) []netip.AddrPort {
	var out []netip.AddrPort
	for _, l := range cla.GetEndpoints() {
		for _, lb := range l.GetLbEndpoints() {
			switch lb.GetHealthStatus() {
			case corev3.HealthStatus_HEALTHY, corev3.HealthStatus_UNKNOWN:
			default:
				continue
			}
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			a, err := netip.ParseAddr(sa.GetAddress())
			if err != nil {
				continue
			}
			out = append(out, netip.AddrPortFrom(a, uint16(sa.GetPortValue())))
		}
	}
	return out
}

// Placement is where an assignment puts one zone's endpoints.
type Placement uint8

// The placements: no endpoint of the zone in the assignment; its
// endpoints where their tier puts them; every one at the assignment's
// last priority, flagged cairn.evacuated (an evacuation, SPEC §6).
const (
	ZoneAbsent Placement = iota
	ZoneInTier
	ZoneEvacuated
)

// Evacuated reports whether lb carries the metadata cairn.evacuated:
// its zone is evacuated, and it sits in the evacuated tier.
func Evacuated(lb *endpointv3.LbEndpoint) bool {
	return lb.GetMetadata().GetFilterMetadata()["cairn"].GetFields()["evacuated"].GetBoolValue()
}

// ZonePlacement tells where cla puts the endpoints of zone.
func ZonePlacement(cla *endpointv3.ClusterLoadAssignment, zone string) Placement {
	var last uint32
	for _, l := range cla.GetEndpoints() {
		last = max(last, l.GetPriority())
	}
	has, all := false, true
	for _, l := range cla.GetEndpoints() {
		if l.GetLocality().GetZone() != zone {
			continue
		}
		for _, lb := range l.GetLbEndpoints() {
			has = true
			all = all && Evacuated(lb) && l.GetPriority() == last
		}
	}
	switch {
	case !has:
		return ZoneAbsent
	case all:
		return ZoneEvacuated
	}
	return ZoneInTier
}
