package kubesync

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/cairn-sd/cairn/wire"
)

// Skipped counts the endpoints of a service's slices that became no
// instance, by reason (a metric's label).
type Skipped map[string]int

// The reasons an endpoint is skipped.
const (
	SkipNoPod     = "no_pod"       // its targetRef is not a Pod
	SkipBadID     = "bad_id"       // the pod's name is not an instance id
	SkipNoAddress = "no_address"   // no address cairn accepts
	SkipNoPort    = "no_port"      // no port of the slice is one of the service's
	SkipDuplicate = "duplicate"    // another namespace mapped here has a pod of that name
	SkipAddrType  = "fqdn_address" // an FQDN slice
	SkipBadZone   = "bad_zone"     // its zone is not a DNS label
)

// Source is one Kubernetes namespace's slices of a service.
type Source struct {
	// Namespace is the Kubernetes namespace.
	Namespace string
	Slices    []*discoveryv1.EndpointSlice
}

// Desired merges the slices of a service into one Endpoint per pod, the
// ports named as def (cairn's definition of the service) names them. A
// pod in several slices (dual-stack, or moving between slices) is one
// endpoint with the addresses of all; its conditions are those of its
// newest UID's most ready entry. Sources come in the order a name clash
// between namespaces is settled: the first keeps the id.
func Desired(def wire.Service, sources []Source) ([]Endpoint, Skipped) {
	skipped := Skipped{}
	byID := map[string]*Endpoint{}
	owner := map[string]string{} // id → the Kubernetes namespace that holds it
	for _, src := range sources {
		for _, s := range sortedSlices(src.Slices) {
			if s.AddressType == discoveryv1.AddressTypeFQDN {
				skipped[SkipAddrType] += len(s.Endpoints)
				continue
			}
			ports := portsOf(def, s.Ports)
			for _, e := range s.Endpoints {
				ref := e.TargetRef
				switch {
				case ref == nil || ref.Kind != "Pod" || ref.Name == "" || ref.UID == "":
					skipped[SkipNoPod]++
					continue
				case wire.CheckLabel("instance_id", ref.Name) != nil:
					skipped[SkipBadID]++
					continue
				case len(ports) == 0:
					skipped[SkipNoPort]++
					continue
				}
				if ns, ok := owner[ref.Name]; ok && ns != src.Namespace {
					skipped[SkipDuplicate]++
					continue
				}
				owner[ref.Name] = src.Namespace
				d := Endpoint{
					ID: ref.Name, UID: string(ref.UID), Ports: maps.Clone(ports),
					Ready:       e.Conditions.Ready == nil || *e.Conditions.Ready,
					Serving:     e.Conditions.Serving == nil || *e.Conditions.Serving,
					Terminating: e.Conditions.Terminating != nil && *e.Conditions.Terminating,
					Source:      "EndpointSlice " + src.Namespace + "/" + s.Name + "@" + s.ResourceVersion,
				}
				if e.Zone != nil {
					d.Zone = *e.Zone
				}
				if e.NodeName != nil {
					d.Node = *e.NodeName
				}
				if d.Zone != "" && wire.CheckLabel("zone", d.Zone) != nil {
					skipped[SkipBadZone]++
					continue
				}
				if len(d.Source) > wire.MaxSource {
					d.Source = d.Source[:wire.MaxSource]
				}
				for _, a := range e.Addresses {
					if ip, err := netip.ParseAddr(a); err == nil && ip.Zone() == "" {
						d.Addresses = append(d.Addresses, ip.Unmap().String())
					}
				}
				byID[d.ID] = merge(byID[d.ID], d)
			}
		}
	}
	out := make([]Endpoint, 0, len(byID))
	for _, id := range slices.Sorted(maps.Keys(byID)) {
		d := byID[id]
		slices.Sort(d.Addresses)
		d.Addresses = slices.Compact(d.Addresses)
		if len(d.Addresses) == 0 {
			skipped[SkipNoAddress]++
			continue
		}
		if len(d.Addresses) > 16 {
			d.Addresses = d.Addresses[:16]
		}
		out = append(out, *d)
	}
	return out, skipped
}

// merge folds d into what the earlier slices said of the same pod name.
// Two UIDs under one name are the old pod and its replacement while
// the slices catch up: the entry that is not terminating wins, then the
// ready one; a tie keeps the first (slices come in name order).
func merge(prev *Endpoint, d Endpoint) *Endpoint {
	if prev == nil {
		return &d
	}
	if prev.UID != d.UID {
		if rank(d) > rank(*prev) {
			return &d
		}
		return prev
	}
	prev.Addresses = append(prev.Addresses, d.Addresses...)
	for name, port := range d.Ports {
		if _, ok := prev.Ports[name]; !ok {
			prev.Ports[name] = port
		}
	}
	if rank(d) > rank(*prev) {
		prev.Ready, prev.Serving, prev.Terminating = d.Ready, d.Serving, d.Terminating
	}
	if prev.Zone == "" {
		prev.Zone = d.Zone
	}
	return prev
}

// rank orders an endpoint's conditions: live and ready first.
func rank(d Endpoint) int {
	r := 0
	if !d.Terminating {
		r += 4
	}
	if d.Ready {
		r += 2
	}
	if d.Serving {
		r++
	}
	return r
}

// portsOf maps a slice's ports to the service's: by name, or, for the
// one unnamed port of a slice, the service's only port.
func portsOf(def wire.Service, ps []discoveryv1.EndpointPort) map[string]int {
	out := map[string]int{}
	for _, p := range ps {
		if p.Port == nil {
			continue
		}
		name := ""
		if p.Name != nil {
			name = *p.Name
		}
		if name == "" && len(ps) == 1 && len(def.Ports) == 1 {
			name = def.Ports[0].Name
		}
		if _, ok := def.Port(name); ok {
			out[name] = int(*p.Port)
		}
	}
	return out
}

// sortedSlices orders slices by name, so that a merge settles the same
// way every round.
func sortedSlices(ss []*discoveryv1.EndpointSlice) []*discoveryv1.EndpointSlice {
	out := slices.Clone(ss)
	slices.SortFunc(out, func(a, b *discoveryv1.EndpointSlice) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// sourceName is how a log names a service's Kubernetes side.
func sourceName(sources []Source, name string) string {
	ns := make([]string, 0, len(sources))
	for _, s := range sources {
		ns = append(ns, s.Namespace+"/"+name)
	}
	return strings.Join(ns, ",")
}
