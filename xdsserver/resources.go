package xdsserver

import (
	"cmp"
	"math"
	"net/netip"
	"slices"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cairn-sd/cairn/status"
)

// Resource names (SPEC §4). A service's cluster, and the assignment of
// the same name, are per port: "<svc>.<ns>:<port>". Its listeners, for
// gRPC clients dialling xds:///<svc>.<ns> or xds:///<svc>.<ns>:<port>,
// carry the same names; the one without a port routes to the default
// port (defaultPort).

// ClusterName returns the name of a service port's cluster and
// assignment.
func ClusterName(svc status.ServiceInfo, port string) string {
	return ServiceHost(svc) + ":" + port
}

// ServiceHost returns "<svc>.<ns>": the host part of a gRPC client's
// xds:/// target, and the name of the listener for the default port.
func ServiceHost(svc status.ServiceInfo) string { return svc.Name + "." + svc.Namespace }

// defaultPort is the port a listener named without one routes to: the
// port called "grpc" if the service has one (what a client dialling the
// bare name most likely wants), else the first tcp port, else the first.
func defaultPort(svc status.ServiceInfo) (status.Port, bool) {
	if len(svc.Ports) == 0 {
		return status.Port{}, false
	}
	for _, p := range svc.Ports {
		if p.Name == "grpc" {
			return p, true
		}
	}
	for _, p := range svc.Ports {
		if p.Protocol != "udp" {
			return p, true
		}
	}
	return svc.Ports[0], true
}

// Constants of every resource.
const (
	// overprovisioning is Envoy's default factor (1.4), stated so that a
	// change of Envoy's default cannot change how traffic spills over
	// between priorities (field notes X12). grpc-go ignores it.
	overprovisioning = 140
	// connectTimeout is the clusters' connect timeout, Envoy's default.
	connectTimeout = 5 * time.Second
	// metadataNamespace holds cairn's endpoint metadata: under the
	// minimum-healthy-fraction guard each endpoint carries
	// cairn.health_disregarded = true (SPEC §4), and an endpoint of an
	// evacuated zone cairn.evacuated = true (SPEC §6).
	metadataNamespace = "cairn"
)

// adsSource is where clusters find their assignments: on the same ADS
// stream.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// buildCluster returns the cluster of one service port: EDS over ADS,
// round robin (the policy every client supports: grpc-go accepts only
// round robin, ring hash and least request), outlier detection bounded
// by the service's max_ejection_percent, and Envoy's panic mode off.
//
// cairn decides fail-open itself: under the minimum-healthy-fraction
// guard it publishes every non-draining instance HEALTHY. Envoy's own
// panic mode (by default below 50% healthy hosts in a priority, its
// outlier ejections counted) routes to every host of the priority, the
// DRAINING ones included, which SPEC §2 keeps out whatever the guard
// does; so the threshold is 0%, which disables it. grpc-go has no panic
// mode and ignores the field.
func buildCluster(svc status.ServiceInfo, port string, lrs bool) *clusterv3.Cluster {
	name := ClusterName(svc, port)
	c := &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig:     &clusterv3.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: adsSource()},
		ConnectTimeout:       durationpb.New(connectTimeout),
		LbPolicy:             clusterv3.Cluster_ROUND_ROBIN,
		OutlierDetection: &clusterv3.OutlierDetection{
			MaxEjectionPercent: wrapperspb.UInt32(uint32(min(max(svc.MaxEjectionPercent, 0), 100))),
		},
		CommonLbConfig: &clusterv3.Cluster_CommonLbConfig{HealthyPanicThreshold: &typev3.Percent{Value: 0}},
	}
	if lrs {
		// Report loads to the server that sent the cluster (grpc-go
		// opens its LRS stream from this; Envoy from its bootstrap).
		c.LrsServer = &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Self{Self: &corev3.SelfConfigSource{}},
			ResourceApiVersion: corev3.ApiVersion_V3}
	}
	return c
}

// buildListener returns an API listener (what a gRPC client resolves
// xds:///name to) whose connection manager routes every request to
// cluster. The route configuration is inline, so the client needs no
// separate RDS resource; the router is the one, terminal, HTTP filter
// (grpc-go refuses a listener without it).
func buildListener(name, cluster string) (*listenerv3.Listener, error) {
	router, err := anypb.New(&routerv3.Router{})
	if err != nil {
		return nil, err
	}
	hcm, err := anypb.New(&hcmv3.HttpConnectionManager{
		StatPrefix: name, // Envoy requires one; gRPC ignores it
		RouteSpecifier: &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    name,
				Domains: []string{"*"},
				Routes: []*routev3.Route{{
					Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: ""}},
					Action: &routev3.Route_Route{Route: &routev3.RouteAction{
						ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
					}},
				}},
			}},
		}},
		HttpFilters: []*hcmv3.HttpFilter{{
			Name:       "envoy.filters.http.router",
			ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: router},
		}},
	})
	if err != nil {
		return nil, err
	}
	return &listenerv3.Listener{Name: name, ApiListener: &listenerv3.ApiListener{ApiListener: hcm}}, nil
}

// lbEndpoint is one endpoint of an assignment in the making.
type lbEndpoint struct {
	tier         int
	region, zone string
	id           string
	addrs        []netip.Addr
	port         uint16
	health       corev3.HealthStatus
	weight       uint32
	disregarded  bool
	// share is the entry's status.Share: below 1 while its zone returns
	// from an evacuation (weight already scaled by it).
	share float64
	// servable: ready, so counted in its tier's total (SPEC §2: draining,
	// starting and terminated instances never are); good: in rotation on
	// the evidence (eligible, and not only through the evaluator's
	// guard). A servable endpoint that is not good is published only
	// when the caller's tiers disregard health.
	servable, good bool
}

// healthOf maps an entry to what an assignment says of it (SPEC §4):
// eligible → HEALTHY, or UNKNOWN when its verdict is unknown; draining →
// DRAINING; anything else is withdrawn, by leaving it out, never by
// marking it UNHEALTHY (an Envoy whose endpoints are mostly unhealthy
// enters panic mode and routes to them all). An entry in rotation only
// through the evaluator's guard is HEALTHY, flagged disregarded; whether
// it is published is the caller's tiers' guard's to say
// (buildAssignment). The weight is the published one, at least 1
// (grpc-go refuses a whole assignment with a 0 weight).
func healthOf(e status.Entry) (h corev3.HealthStatus, weight uint32, disregarded, ok bool) {
	switch {
	case e.Lifecycle == status.Draining:
		return corev3.HealthStatus_DRAINING, uint32(max(e.BaseWeight, 1)), false, true
	case !e.Flags.Has(status.Eligible):
		return 0, 0, false, false
	case e.Flags.Has(status.HealthDisregarded):
		return corev3.HealthStatus_HEALTHY, uint32(max(e.Weight, 1)), true, true
	case e.Verdict == status.Unknown:
		return corev3.HealthStatus_UNKNOWN, uint32(max(e.Weight, 1)), false, true
	}
	return corev3.HealthStatus_HEALTHY, uint32(max(e.Weight, 1)), false, true
}

// buildAssignment returns the assignment of one service port for callers
// at loc: the service's endpoints in rotation (or draining), grouped by
// locality, the tiers the caller uses at priority 0 and each other tier
// at a priority of its own after them, in their order (SPEC §3's tiers:
// same zone, same region, elsewhere), numbered without gaps. A service port without endpoints gets an
// assignment without endpoints, never none: Envoy warms a cluster until
// its assignment arrives (field notes X4).
//
// Spill and the guard are the caller's, as the DNS server computes them
// (SPEC §2, §3): the caller uses its best tier, and the next ones while
// the last one used has a healthy fraction × 1.4 below 1. A client
// cannot compute that itself: withdrawn endpoints are left out, so every
// priority it holds looks fully healthy and it would never spill until a
// tier is empty. So when the caller uses more than one tier, cairn
// merges them into priority 0 and scales each endpoint's weight by its
// tier's share of the load (tier 0 takes 1.4 × its healthy fraction, the
// next what remains up to its own, the last the rest); the tiers after
// them keep their own priorities, for the client's failover. When the
// tiers used together have fewer healthy endpoints than the service's
// min_healthy_fraction of their servable ones, health is disregarded for
// this caller: every servable endpoint of those tiers is published
// HEALTHY, those not healthy flagged cairn.health_disregarded, the load
// shared by the tiers' numbers of endpoints. An endpoint in rotation
// only through the evaluator's guard is one of those not healthy: the
// caller's guard is SPEC §2's rule, which the evaluator's, per zone,
// only approximates, and the DNS server follows the caller's too. So an
// assignment and a DNS answer for one caller agree.
//
// Everything a client refuses a whole assignment for is avoided here: a
// weight of 0 (endpoint or locality), two endpoints at one address, a
// locality without a Locality. Two instances registered at the same
// address and port keep the one whose id sorts first; dropped counts the
// others.
func buildAssignment(t *status.Table, service uint32, svc status.ServiceInfo, port string, loc status.Locality) (cla *endpointv3.ClusterLoadAssignment, dropped int) {
	dir := t.Directory()
	var eps []lbEndpoint
	for _, slot := range t.Members(service) {
		e := t.Entry(int(slot))
		h, w, disregarded, ok := healthOf(e)
		servable := e.Lifecycle == status.Ready
		if !ok && !servable {
			continue
		}
		in := dir.Instance(int(slot))
		if in == nil || in.Incarnation != e.Incarnation || len(in.Addrs) == 0 {
			continue
		}
		num, ok := in.Port(port)
		if !ok || num == 0 {
			continue
		}
		good := servable && e.Flags.Has(status.Eligible) && !e.Flags.Has(status.HealthDisregarded)
		if servable && !good {
			// Published only if this caller's tiers disregard health:
			// HEALTHY, flagged, at its base weight.
			h, w, disregarded = corev3.HealthStatus_HEALTHY, uint32(max(e.BaseWeight, 1)), true
		}
		if good && e.Returning() {
			// Its zone comes back from an evacuation: a share of its
			// weight, as slow start publishes one.
			w = uint32(max(math.Round(float64(w)*e.Share()), 1))
		}
		eps = append(eps, lbEndpoint{tier: status.TierOf(loc, e), region: t.Locality(e.Region), zone: t.Locality(e.Zone),
			id: in.ID, addrs: in.Addrs, port: num, health: h, weight: w, disregarded: disregarded,
			share: e.Share(), servable: servable, good: good})
	}
	sp := spillOf(eps, svc.MinHealthyFraction)
	// The tiers the caller uses come first, as one priority; the others
	// follow in their order, each a priority of its own. A tier with
	// only draining endpoints is not used, so it can sit neither
	// between the used ones nor ahead of them.
	rank := func(ep lbEndpoint) int {
		if sp.use[ep.tier] {
			return 0
		}
		return ep.tier + 1
	}
	slices.SortFunc(eps, func(a, b lbEndpoint) int {
		return cmp.Or(cmp.Compare(rank(a), rank(b)), cmp.Compare(a.tier, b.tier), cmp.Compare(a.region, b.region),
			cmp.Compare(a.zone, b.zone), cmp.Compare(a.id, b.id))
	})
	cla = &endpointv3.ClusterLoadAssignment{
		ClusterName: ClusterName(svc, port),
		Policy:      &endpointv3.ClusterLoadAssignment_Policy{OverprovisioningFactor: wrapperspb.UInt32(overprovisioning)},
	}
	seen := make(map[netip.AddrPort]bool, len(eps))
	var cur *endpointv3.LocalityLbEndpoints
	priority, lastRank := -1, -1
	for _, ep := range eps {
		used := sp.use[ep.tier]
		if ep.servable && !ep.good && !(used && sp.disregard) {
			continue
		}
		if slices.ContainsFunc(ep.addrs, func(a netip.Addr) bool { return seen[netip.AddrPortFrom(a, ep.port)] }) {
			dropped++
			continue
		}
		for _, a := range ep.addrs {
			seen[netip.AddrPortFrom(a, ep.port)] = true
		}
		if r := rank(ep); r != lastRank {
			priority, lastRank = priority+1, r
			cur = nil
		}
		if used && sp.merged && ep.health != corev3.HealthStatus_DRAINING {
			ep.weight = uint32(max(math.Round(float64(ep.weight)*sp.scale[ep.tier]), 1))
		}
		if cur == nil || cur.Locality.Region != ep.region || cur.Locality.Zone != ep.zone {
			cur = &endpointv3.LocalityLbEndpoints{
				Locality:            &corev3.Locality{Region: ep.region, Zone: ep.zone},
				Priority:            uint32(priority),
				LoadBalancingWeight: wrapperspb.UInt32(0),
			}
			cla.Endpoints = append(cla.Endpoints, cur)
		}
		cur.LbEndpoints = append(cur.LbEndpoints, lbEndpointOf(ep))
		// A locality weighs what its endpoints in rotation weigh: grpc-go
		// splits a priority's load between localities by their weights,
		// which carry the tiers' shares when tiers are merged, and a
		// draining endpoint takes none of it.
		if ep.health != corev3.HealthStatus_DRAINING {
			cur.LoadBalancingWeight.Value = min(cur.LoadBalancingWeight.Value+ep.weight, 1<<31)
		}
	}
	for _, l := range cla.Endpoints {
		// Never 0, which a client refuses (a locality of draining
		// endpoints only).
		l.LoadBalancingWeight.Value = max(l.LoadBalancingWeight.Value, 1)
	}
	return cla, dropped
}

// spill is how one caller uses the tiers (status.Spill, the DNS
// server's rule): which tiers, whether they are more than one (merged),
// whether health is disregarded in them, and the factor each tier's
// endpoint weights are scaled by when merged.
type spill struct {
	use       [status.NumTiers]bool
	merged    bool
	disregard bool
	scale     [status.NumTiers]float64
}

// mergedWeight is what the weights of a merged priority add up to: fine
// enough that an endpoint of weight 1 in a tier of thousands keeps its
// share, small enough that no locality's or priority's sum nears the
// uint32 clients refuse past (grpc-go, Envoy).
const mergedWeight = 1 << 20

// spillOf computes the caller's spill from its endpoints (their tiers
// already the caller's): scale turns an endpoint's weight into its
// tier's share of the load, times mergedWeight.
func spillOf(eps []lbEndpoint, minFrac float64) spill {
	var counts status.TierCounts
	for _, ep := range eps {
		if ep.servable {
			counts.Add(ep.tier, ep.good, ep.share, float64(ep.weight), float64(ep.weight))
		}
	}
	s := counts.Spill(minFrac)
	sp := spill{use: s.Use, merged: s.Used > 1, disregard: s.Disregard}
	if !sp.merged {
		return sp
	}
	for tr := range status.NumTiers {
		if s.Use[tr] && s.Weight[tr] > 0 {
			sp.scale[tr] = s.Load[tr] / s.Weight[tr] * mergedWeight
		}
	}
	return sp
}

// lbEndpointOf returns the assignment's entry for one endpoint: its first
// address, the others as additional addresses (dual stack), its health,
// weight and, under the guard, the disregarded flag.
func lbEndpointOf(ep lbEndpoint) *endpointv3.LbEndpoint {
	sock := func(a netip.Addr) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address:       a.String(),
			PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(ep.port)},
		}}}
	}
	e := &endpointv3.Endpoint{Address: sock(ep.addrs[0])}
	for _, a := range ep.addrs[1:] {
		e.AdditionalAddresses = append(e.AdditionalAddresses, &endpointv3.Endpoint_AdditionalAddress{Address: sock(a)})
	}
	lb := &endpointv3.LbEndpoint{
		HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: e},
		HealthStatus:        ep.health,
		LoadBalancingWeight: wrapperspb.UInt32(ep.weight),
	}
	var md map[string]*structpb.Value
	if ep.disregarded {
		md = map[string]*structpb.Value{"health_disregarded": structpb.NewBoolValue(true)}
	}
	if ep.tier == status.TierEvacuated {
		if md == nil {
			md = map[string]*structpb.Value{}
		}
		md["evacuated"] = structpb.NewBoolValue(true)
	}
	if md != nil {
		lb.Metadata = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{metadataNamespace: {Fields: md}}}
	}
	return lb
}
