package xdsserver

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"sync"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/cairn-sd/cairn/status"
)

// The resource types a stream may ask for, in the order they are sent
// when several changed at once: clusters before the assignments that
// fill them, both before the listeners that route to them
// (make-before-break, as the xDS protocol asks).
const (
	ClusterType    = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
	EndpointType   = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
	ListenerType   = "type.googleapis.com/envoy.config.listener.v3.Listener"
	RouteType      = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
	numTypes       = 4
	clusterIdx     = 0
	endpointIdx    = 1
	listenerIdx    = 2
	routeIdx       = 3
	wildcardName   = "*"
	versionDigestN = 16 // bytes of SHA-256 in a response's version
)

var typeURLs = [numTypes]string{ClusterType, EndpointType, ListenerType, RouteType}

// typeIndex returns the index of a type URL, or false for one cairn
// does not serve.
func typeIndex(url string) (int, bool) {
	i := slices.Index(typeURLs[:], url)
	return i, i >= 0
}

// resource is one resource as sent: encoded once per view.
type resource struct {
	version string
	body    *anypb.Any
}

// place is a subscriber's node locality, by name: the key of a view.
type place struct{ region, zone string }

// view is every resource of one table version as seen from one place:
// the assignments' priorities depend on the place, the rest does not.
// It is immutable once built, and shared by every stream of that place.
type view struct {
	table uint64
	res   [numTypes]map[string]resource
	// dropped counts endpoints left out of assignments because another
	// instance had their address.
	dropped int
}

// views builds and keeps the views of the latest table, one per place
// that asked, so that a table version is turned into resources and
// encoded once per place, whatever the number of streams.
type views struct {
	pub *status.Publisher
	m   *metrics

	mu     sync.Mutex
	table  uint64
	byKey  map[place]*view
	common *view // clusters and listeners of table, shared by every place
}

// get returns the view of the current table from p, building it if no
// stream of that place asked since the table changed.
func (vs *views) get(p place) (*view, error) {
	t := vs.pub.Acquire()
	defer t.Release()
	vs.mu.Lock()
	defer vs.mu.Unlock()
	if vs.table != t.Version() {
		vs.table, vs.byKey, vs.common = t.Version(), map[place]*view{}, nil
	}
	if v := vs.byKey[p]; v != nil {
		return v, nil
	}
	if vs.common == nil {
		c, err := buildCommon(t)
		if err != nil {
			return nil, err
		}
		vs.common = c
	}
	v := &view{table: t.Version(), res: vs.common.res}
	eds, dropped, err := buildAssignments(t, t.LocalityOf(p.region, p.zone))
	if err != nil {
		return nil, err
	}
	v.res[endpointIdx], v.dropped = eds, dropped
	vs.m.dropped.Set(float64(dropped))
	vs.byKey[p] = v
	return v, nil
}

// services calls f for each service of t with its id.
func services(t *status.Table, f func(id uint32, svc status.ServiceInfo) error) error {
	dir := t.Directory()
	if dir == nil {
		return nil
	}
	for id, svc := range dir.Services {
		if id == 0 || svc.Name == "" {
			continue
		}
		if err := f(uint32(id), svc); err != nil {
			return err
		}
	}
	return nil
}

// buildCommon builds the clusters and listeners of t.
func buildCommon(t *status.Table) (*view, error) {
	v := &view{table: t.Version()}
	v.res[clusterIdx], v.res[listenerIdx], v.res[routeIdx] = map[string]resource{}, map[string]resource{}, map[string]resource{}
	err := services(t, func(_ uint32, svc status.ServiceInfo) error {
		for _, p := range svc.Ports {
			if err := put(v.res[clusterIdx], ClusterName(svc, p.Name), buildCluster(svc, p.Name)); err != nil {
				return err
			}
			l, err := buildListener(ClusterName(svc, p.Name), ClusterName(svc, p.Name))
			if err != nil {
				return err
			}
			if err := put(v.res[listenerIdx], l.Name, l); err != nil {
				return err
			}
		}
		if p, ok := defaultPort(svc); ok {
			l, err := buildListener(ServiceHost(svc), ClusterName(svc, p.Name))
			if err != nil {
				return err
			}
			return put(v.res[listenerIdx], l.Name, l)
		}
		return nil
	})
	return v, err
}

// buildAssignments builds every assignment of t for callers at loc.
func buildAssignments(t *status.Table, loc status.Locality) (map[string]resource, int, error) {
	out := map[string]resource{}
	dropped := 0
	err := services(t, func(id uint32, svc status.ServiceInfo) error {
		for _, p := range svc.Ports {
			cla, d := buildAssignment(t, id, svc, p.Name, loc)
			dropped += d
			if err := put(out, cla.ClusterName, cla); err != nil {
				return err
			}
		}
		return nil
	})
	return out, dropped, err
}

// put encodes m and files it under name.
func put(m map[string]resource, name string, msg proto.Message) error {
	v, err := Version(msg)
	if err != nil {
		return err
	}
	body, err := anypb.New(msg)
	if err != nil {
		return err
	}
	m[name] = resource{version: v, body: body}
	return nil
}

// pick returns the resources of type i a subscription asks for, in name
// order, and the version of that set: a digest of the names and their
// versions, so that the same content gives the same version on every
// server. A wildcard subscription gets every resource of the type; a
// name the view does not hold is left out (in state of the world, the
// client learns a resource does not exist from its absence).
func (v *view) pick(i int, wildcard bool, names map[string]bool) ([]*anypb.Any, string) {
	all := v.res[i]
	var keys []string
	if wildcard {
		keys = make([]string, 0, len(all))
		for name := range all {
			keys = append(keys, name)
		}
	} else {
		for name := range names {
			if _, ok := all[name]; ok {
				keys = append(keys, name)
			}
		}
	}
	slices.Sort(keys)
	h := sha256.New()
	out := make([]*anypb.Any, 0, len(keys))
	for _, name := range keys {
		r := all[name]
		h.Write([]byte(name))
		h.Write([]byte{0})
		h.Write([]byte(r.version))
		h.Write([]byte{0})
		out = append(out, r.body)
	}
	return out, hex.EncodeToString(h.Sum(nil)[:versionDigestN])
}
