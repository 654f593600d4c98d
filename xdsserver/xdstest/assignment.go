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
