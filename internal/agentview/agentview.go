// Package agentview is the one home of the view a cairn agent subscribes
// to (SPEC §5): everything the agent needs to answer DNS for one service
// as the server would, carried over delta xDS as a ClusterLoadAssignment
// named "<svc>.<ns>" — a name no Envoy or gRPC client asks for, since
// their clusters are named per port ("<svc>.<ns>:<port>").
//
// The xDS server encodes a view from its published status table (Encode);
// the agent decodes it (Decode) and fills its own status table from the
// views it holds, which its DNS server then reads as the server's reads
// its own. Unlike a port's assignment, a view carries every member of the
// service, in rotation or not, with its verdict, lifecycle, flags and
// weights, so that the agent's answer builder makes the same choices.
//
// The shape:
//
//   - Endpoints[0] is the service group: no Locality, no endpoints, and
//     filter metadata "cairn.service" holding the view's revision, the
//     service's ports and answer policy, and its shrink cap.
//   - Each further group is one locality (region, zone), priority 0 (the
//     agent ranks tiers from its own place); each endpoint carries the
//     instance id as Endpoint.hostname, its addresses (the first one's
//     port is the instance's number for the service's first port) and
//     filter metadata "cairn.instance": incarnation, verdict, lifecycle,
//     flags, weights and port numbers.
//
// Numbers that may pass 2^53 (revision, incarnation) travel as decimal
// strings: metadata numbers are doubles.
//
// Imports: the status table (a view is made from it and fills one) and
// the label rule; never the store or the health loop. Encode and Decode
// are pure functions, safe anywhere.
package agentview

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/cairn-sd/cairn/internal/dnsname"
	"github.com/cairn-sd/cairn/status"
)

// Metadata namespaces of the view's service group and of its endpoints.
const (
	ServiceKey  = "cairn.service"
	InstanceKey = "cairn.instance"
)

// Name returns the resource name of a service's view: "<svc>.<ns>".
func Name(namespace, service string) string { return service + "." + namespace }

// ParseName splits a view's resource name into namespace and service, or
// reports false for a name that is not one (a port's cluster, say).
func ParseName(name string) (namespace, service string, ok bool) {
	svc, ns, ok := strings.Cut(name, ".")
	if !ok || dnsname.CheckLabel(svc) != nil || dnsname.CheckLabel(ns) != nil {
		return "", "", false
	}
	return ns, svc, true
}

// View is one service as the agent holds it.
type View struct {
	// Revision orders views of the service: a view of a lower revision
	// is older. The server stamps a view with its store revision when
	// the view's content last changed.
	Revision uint64
	Service  status.ServiceInfo
	// Instances are the service's members, sorted by id.
	Instances []Instance
}

// Instance is one member of a View: its entry's facts and its identity.
type Instance struct {
	status.InstanceInfo
	Region, Zone string
	Verdict      status.Verdict
	Lifecycle    status.Lifecycle
	Flags        status.Flags
	Weight       uint16
	BaseWeight   uint16
	// Shift is status.Entry.Shift: how much of its traffic an
	// evacuation of its zone moves away from it.
	Shift uint8
}

// Eligible reports whether the instance is in rotation.
func (in *Instance) Eligible() bool { return in.Flags.Has(status.Eligible) }

// Of returns the view of service (its id in t), of revision 0: every
// member of the service in t.
func Of(t *status.Table, service uint32) (*View, error) {
	dir := t.Directory()
	svc, ok := dir.Service(service)
	if !ok {
		return nil, fmt.Errorf("agentview: no service %d in the table", service)
	}
	v := &View{Service: svc}
	for _, slot := range t.Members(service) {
		e := t.Entry(int(slot))
		in := dir.Instance(int(slot))
		if !e.Used() || in == nil || in.Incarnation != e.Incarnation {
			continue
		}
		v.Instances = append(v.Instances, Instance{InstanceInfo: *in, Region: t.Locality(e.Region), Zone: t.Locality(e.Zone),
			Verdict: e.Verdict, Lifecycle: e.Lifecycle, Flags: e.Flags, Weight: e.Weight, BaseWeight: e.BaseWeight,
			Shift: e.Shift})
	}
	slices.SortFunc(v.Instances, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
	return v, nil
}

// InRotation returns the ids of the instances in rotation, sorted.
func (v *View) InRotation() []string {
	var ids []string
	for i := range v.Instances {
		if v.Instances[i].Eligible() {
			ids = append(ids, v.Instances[i].ID)
		}
	}
	slices.Sort(ids)
	return ids
}

// Encode returns v as a ClusterLoadAssignment. Instances are sorted by
// locality, then id, so that the same view encodes to the same bytes.
func (v *View) Encode() *endpointv3.ClusterLoadAssignment {
	svc := v.Service
	ports := make([]any, 0, len(svc.Ports))
	for _, p := range svc.Ports {
		ports = append(ports, map[string]any{"name": p.Name, "number": float64(p.Number), "protocol": p.Protocol})
	}
	head, _ := structpb.NewStruct(map[string]any{
		"revision":             strconv.FormatUint(v.Revision, 10),
		"ports":                ports,
		"dns_ttl_ms":           float64(svc.DNSTTL.Milliseconds()),
		"a_record_limit":       float64(svc.ARecordLimit),
		"min_healthy_fraction": svc.MinHealthyFraction,
		"max_ejection_percent": float64(svc.MaxEjectionPercent),
		"shrink_cap":           svc.ShrinkCap,
		"shrink_window_ms":     float64(svc.ShrinkWindow.Milliseconds()),
	})
	cla := &endpointv3.ClusterLoadAssignment{
		ClusterName: Name(svc.Namespace, svc.Name),
		Endpoints: []*endpointv3.LocalityLbEndpoints{{
			Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{ServiceKey: head}},
		}},
	}
	ins := slices.Clone(v.Instances)
	slices.SortFunc(ins, func(a, b Instance) int {
		return cmp.Or(strings.Compare(a.Region, b.Region), strings.Compare(a.Zone, b.Zone), strings.Compare(a.ID, b.ID))
	})
	var cur *endpointv3.LocalityLbEndpoints
	for i := range ins {
		in := &ins[i]
		if cur == nil || cur.Locality.Region != in.Region || cur.Locality.Zone != in.Zone {
			cur = &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: in.Region, Zone: in.Zone}}
			cla.Endpoints = append(cla.Endpoints, cur)
		}
		cur.LbEndpoints = append(cur.LbEndpoints, in.encode(svc))
	}
	return cla
}

// Stamp sets the revision of cla, a view Encode made, to rev: what
// Encode of the view at that revision makes, without encoding it again.
// A cla Encode did not make is left as it is.
func Stamp(cla *endpointv3.ClusterLoadAssignment, rev uint64) {
	if len(cla.GetEndpoints()) == 0 {
		return
	}
	if head := cla.Endpoints[0].GetMetadata().GetFilterMetadata()[ServiceKey]; head != nil && head.Fields != nil {
		head.Fields["revision"] = structpb.NewStringValue(strconv.FormatUint(rev, 10))
	}
}

func (in *Instance) encode(svc status.ServiceInfo) *endpointv3.LbEndpoint {
	var first uint16
	if len(svc.Ports) > 0 {
		first = in.Ports[svc.Ports[0].Name]
	}
	sock := func(a netip.Addr) *corev3.Address {
		return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: a.String(), PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(first)},
		}}}
	}
	ep := &endpointv3.Endpoint{Hostname: in.ID}
	for i, a := range in.Addrs {
		if i == 0 {
			ep.Address = sock(a)
			continue
		}
		ep.AdditionalAddresses = append(ep.AdditionalAddresses, &endpointv3.Endpoint_AdditionalAddress{Address: sock(a)})
	}
	ports := make(map[string]any, len(in.Ports))
	for name, num := range in.Ports {
		ports[name] = float64(num)
	}
	m := map[string]any{
		"incarnation": strconv.FormatUint(in.Incarnation, 10),
		"verdict":     in.Verdict.String(),
		"lifecycle":   in.Lifecycle.String(),
		"flags":       float64(in.Flags),
		"weight":      float64(in.Weight),
		"base_weight": float64(in.BaseWeight),
		"ports":       ports,
	}
	if in.Shift != 0 {
		// Only when shifted: a view without evacuations encodes as it
		// did before they existed, and an older agent reads it.
		m["shift"] = float64(in.Shift)
	}
	md, _ := structpb.NewStruct(m)
	h := corev3.HealthStatus_UNHEALTHY
	switch {
	case in.Lifecycle == status.Draining:
		h = corev3.HealthStatus_DRAINING
	case in.Eligible() && in.Verdict == status.Unknown:
		h = corev3.HealthStatus_UNKNOWN
	case in.Eligible():
		h = corev3.HealthStatus_HEALTHY
	}
	return &endpointv3.LbEndpoint{
		HostIdentifier:      &endpointv3.LbEndpoint_Endpoint{Endpoint: ep},
		HealthStatus:        h,
		LoadBalancingWeight: wrapperspb.UInt32(uint32(max(in.Weight, 1))),
		Metadata:            &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{InstanceKey: md}},
	}
}

// ErrInvalid is wrapped by every error of Decode: a view the agent must
// not apply (it keeps the one it holds and NACKs).
var ErrInvalid = errors.New("agentview: invalid view")

// Limits on what one view may hold, so that a hostile or broken server
// cannot make an agent hold more than a service can have.
const (
	MaxInstances = 1 << 16
	maxAddrs     = 16
)

// Decode returns the view a ClusterLoadAssignment carries. It checks
// every field against the rules the server's own data obeys (names are
// DNS labels, ports and weights in range, verdicts and lifecycles known),
// and names the field it refuses.
func Decode(cla *endpointv3.ClusterLoadAssignment) (*View, error) {
	ns, name, ok := ParseName(cla.GetClusterName())
	if !ok {
		return nil, invalid("cluster_name", "%q is not <svc>.<ns>", cla.GetClusterName())
	}
	groups := cla.GetEndpoints()
	if len(groups) == 0 || groups[0].GetLocality() != nil || len(groups[0].GetLbEndpoints()) != 0 {
		return nil, invalid("endpoints[0]", "is not the service group (no locality, no endpoints)")
	}
	head := groups[0].GetMetadata().GetFilterMetadata()[ServiceKey].GetFields()
	if head == nil {
		return nil, invalid("endpoints[0].metadata", "has no %s", ServiceKey)
	}
	v := &View{Service: status.ServiceInfo{Namespace: ns, Name: name}}
	f := fields{m: head, prefix: ServiceKey + "."}
	v.Revision = f.uint("revision")
	s := &v.Service
	s.DNSTTL = time.Duration(f.num("dns_ttl_ms", 0, 1<<31)) * time.Millisecond
	s.ARecordLimit = int(f.num("a_record_limit", 0, 1<<16))
	s.MinHealthyFraction = f.frac("min_healthy_fraction", -1)
	s.MaxEjectionPercent = int(f.num("max_ejection_percent", 0, 100))
	s.ShrinkCap = f.frac("shrink_cap", 0)
	s.ShrinkWindow = time.Duration(f.num("shrink_window_ms", 0, 1<<31)) * time.Millisecond
	for i, pv := range f.list("ports") {
		pf := fields{m: pv.GetStructValue().GetFields(), prefix: fmt.Sprintf("%sports[%d].", f.prefix, i)}
		p := status.Port{Name: pf.label("name"), Number: uint16(pf.num("number", 0, 65535)), Protocol: pf.str("protocol")}
		if pf.err == nil && p.Protocol != "tcp" && p.Protocol != "udp" {
			pf.err = invalid(pf.prefix+"protocol", "%q is neither tcp nor udp", p.Protocol)
		}
		if pf.err == nil && slices.ContainsFunc(s.Ports, func(q status.Port) bool { return q.Name == p.Name }) {
			pf.err = invalid(pf.prefix+"name", "%q is given twice", p.Name)
		}
		if f.err == nil {
			f.err = pf.err
		}
		s.Ports = append(s.Ports, p)
	}
	if f.err != nil {
		return nil, f.err
	}
	seen := map[string]bool{}
	for g, group := range groups[1:] {
		loc := group.GetLocality()
		gname := fmt.Sprintf("endpoints[%d]", g+1)
		if loc == nil {
			return nil, invalid(gname+".locality", "is missing")
		}
		for _, l := range [...]string{loc.GetRegion(), loc.GetZone()} {
			if l != "" && dnsname.CheckLabel(l) != nil {
				return nil, invalid(gname+".locality", "%q is not a DNS label", l)
			}
		}
		for j, lb := range group.GetLbEndpoints() {
			if len(v.Instances) >= MaxInstances {
				return nil, invalid("endpoints", "more than %d instances", MaxInstances)
			}
			in, err := decodeInstance(lb, fmt.Sprintf("%s.lb_endpoints[%d]", gname, j))
			if err != nil {
				return nil, err
			}
			if seen[in.ID] {
				return nil, invalid(fmt.Sprintf("%s.lb_endpoints[%d].endpoint.hostname", gname, j), "instance %q is given twice", in.ID)
			}
			seen[in.ID] = true
			in.Region, in.Zone = loc.GetRegion(), loc.GetZone()
			// Instances of a service mostly hold the same port numbers:
			// they share one map (read-only, status.InstanceInfo), which
			// is most of what an instance costs the agent otherwise.
			if n := len(v.Instances); n > 0 && maps.Equal(v.Instances[n-1].Ports, in.Ports) {
				in.Ports = v.Instances[n-1].Ports
			}
			v.Instances = append(v.Instances, in)
		}
	}
	slices.SortFunc(v.Instances, func(a, b Instance) int { return strings.Compare(a.ID, b.ID) })
	return v, nil
}

func decodeInstance(lb *endpointv3.LbEndpoint, field string) (Instance, error) {
	var in Instance
	ep := lb.GetEndpoint()
	if err := dnsname.CheckLabel(ep.GetHostname()); err != nil {
		return in, invalid(field+".endpoint.hostname", "%q: %v", ep.GetHostname(), err)
	}
	in.ID = ep.GetHostname()
	addrs := []*corev3.Address{ep.GetAddress()}
	for _, a := range ep.GetAdditionalAddresses() {
		addrs = append(addrs, a.GetAddress())
	}
	if len(addrs) > maxAddrs {
		return in, invalid(field+".endpoint", "more than %d addresses", maxAddrs)
	}
	for k, a := range addrs {
		if a == nil && k == 0 {
			continue // an instance registered without an address
		}
		ip, err := netip.ParseAddr(a.GetSocketAddress().GetAddress())
		if err != nil || ip.Zone() != "" {
			return in, invalid(fmt.Sprintf("%s.endpoint.address[%d]", field, k), "%q is not an IP address", a.GetSocketAddress().GetAddress())
		}
		in.Addrs = append(in.Addrs, ip.Unmap())
	}
	md := lb.GetMetadata().GetFilterMetadata()[InstanceKey].GetFields()
	if md == nil {
		return in, invalid(field+".metadata", "has no %s", InstanceKey)
	}
	f := fields{m: md, prefix: field + ".metadata." + InstanceKey + "."}
	in.Incarnation = f.uint("incarnation")
	// Strict, as a view always was: an agent serves what it can check.
	in.Verdict = parsed(&f, "verdict", status.ParseVerdict)
	in.Lifecycle = parsed(&f, "lifecycle", status.ParseLifecycle)
	in.Flags = status.Flags(f.num("flags", 0, 255))
	in.Weight = uint16(f.num("weight", 0, 65535))
	in.BaseWeight = uint16(f.num("base_weight", 0, 65535))
	if _, ok := f.m["shift"]; ok {
		in.Shift = uint8(f.num("shift", 0, status.ShiftAll))
	}
	if ports := f.m["ports"].GetStructValue().GetFields(); len(ports) > 0 {
		in.Ports = make(map[string]uint16, len(ports))
		pf := fields{m: ports, prefix: f.prefix + "ports."}
		for name := range ports {
			if err := dnsname.CheckLabel(name); err != nil && pf.err == nil {
				pf.err = invalid(pf.prefix+name, "is not a DNS label")
			}
			in.Ports[name] = uint16(pf.num(name, 1, 65535))
		}
		if f.err == nil {
			f.err = pf.err
		}
	}
	if f.err == nil && in.Eligible() != (in.Weight != 0) {
		f.err = invalid(f.prefix+"weight", "%d does not agree with the flags %s (weight is non-zero exactly when eligible)", in.Weight, in.Flags)
	}
	return in, f.err
}

// fields reads typed values out of a metadata struct, keeping the first
// error, which names the field.
type fields struct {
	m      map[string]*structpb.Value
	prefix string
	err    error
}

func (f *fields) fail(key, format string, args ...any) {
	if f.err == nil {
		f.err = invalid(f.prefix+key, format, args...)
	}
}

func (f *fields) str(key string) string {
	v, ok := f.m[key].GetKind().(*structpb.Value_StringValue)
	if !ok {
		f.fail(key, "is missing or not a string")
		return ""
	}
	return v.StringValue
}

func (f *fields) label(key string) string {
	s := f.str(key)
	if f.err == nil && dnsname.CheckLabel(s) != nil {
		f.fail(key, "%q is not a DNS label", s)
	}
	return s
}

func (f *fields) uint(key string) uint64 {
	s := f.str(key)
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil && f.err == nil {
		f.fail(key, "%q is not a decimal number", s)
	}
	return n
}

func (f *fields) num(key string, lo, hi float64) float64 {
	v, ok := f.m[key].GetKind().(*structpb.Value_NumberValue)
	if !ok {
		f.fail(key, "is missing or not a number")
		return lo
	}
	n := v.NumberValue
	if n != math.Trunc(n) || n < lo || n > hi {
		f.fail(key, "%v is not a whole number from %v to %v", n, lo, hi)
		return lo
	}
	return n
}

func (f *fields) frac(key string, lo float64) float64 {
	v, ok := f.m[key].GetKind().(*structpb.Value_NumberValue)
	if !ok || !(v.NumberValue >= lo && v.NumberValue <= 1) {
		f.fail(key, "is missing or not a number from %v to 1", lo)
		return 0
	}
	return v.NumberValue
}

// parsed reads a name in status's text form (a verdict, a lifecycle)
// with parse, which refuses a name it does not know.
func parsed[T any](f *fields, key string, parse func(string) (T, error)) T {
	s := f.str(key)
	var v T
	if f.err != nil {
		return v
	}
	v, err := parse(s)
	if err != nil {
		f.fail(key, "%v", err)
	}
	return v
}

func (f *fields) list(key string) []*structpb.Value {
	v, ok := f.m[key].GetKind().(*structpb.Value_ListValue)
	if !ok {
		f.fail(key, "is missing or not a list")
		return nil
	}
	return v.ListValue.GetValues()
}

func invalid(field, format string, args ...any) error {
	return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
}
