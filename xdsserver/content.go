package xdsserver

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/maphash"
	"net"
	"slices"
	"strconv"
	"time"
	"unsafe"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/cairn-sd/cairn/status"
)

// What the hub builds resources from, and how it compares them: the
// fingerprints that tell a service's resources unchanged, the encoding
// and digest of each resource, the digest of a set, and the diffs that
// say which streams to wake.

// stamp sets when the resources of m changed.
func stamp(m map[string]resource, at time.Time) {
	for name, r := range m {
		r.changed = at
		m[name] = r
	}
}

// rotationOf lists an assignment's endpoints in rotation (HEALTHY or
// UNKNOWN), as "address:port", sorted.
func rotationOf(cla *endpointv3.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			if h := e.HealthStatus; h != corev3.HealthStatus_HEALTHY && h != corev3.HealthStatus_UNKNOWN {
				continue
			}
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10)))
		}
	}
	slices.Sort(out)
	return out
}

// subset reports whether every element of a (sorted) is in b (sorted).
func subset(a, b []string) bool {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			return false
		}
	}
	return true
}

// diff returns the names whose resource differs between a and b, or is
// in only one of them.
func diff(a, b map[string]resource) map[string]bool {
	out := map[string]bool{}
	for name, r := range b {
		if old, ok := a[name]; !ok || old.version != r.version {
			out[name] = true
		}
	}
	for name := range a {
		if _, ok := b[name]; !ok {
			out[name] = true
		}
	}
	return out
}

// serviceFP fingerprints what a service's clusters and listeners are
// made of: its definition as the directory carries it.
func (h *hub) serviceFP(svc status.ServiceInfo) uint64 {
	var mh maphash.Hash
	mh.SetSeed(h.seed)
	mh.WriteString(svc.Namespace)
	mh.WriteByte(0)
	mh.WriteString(svc.Name)
	mh.WriteByte(0)
	maphash.WriteComparable(&mh, svc.MaxEjectionPercent)
	// The answer policy is not in the clusters, but it is in the agents'
	// views, which membersFP covers with this.
	maphash.WriteComparable(&mh, svc.DNSTTL)
	maphash.WriteComparable(&mh, svc.ARecordLimit)
	maphash.WriteComparable(&mh, svc.MinHealthyFraction)
	maphash.WriteComparable(&mh, svc.ShrinkCap)
	maphash.WriteComparable(&mh, svc.ShrinkWindow)
	for _, p := range svc.Ports {
		mh.WriteString(p.Name)
		mh.WriteByte(0)
		mh.WriteString(p.Protocol)
		mh.WriteByte(0)
		maphash.WriteComparable(&mh, p.Number)
	}
	return mh.Sum64()
}

// membersFP fingerprints what a service's assignments are made of: its
// definition, and each member's entry and instance. An instance is
// identified by its *InstanceInfo, which the directory keeps across
// tables while the instance is unchanged (status.Directory).
func (h *hub) membersFP(t *status.Table, id uint32, svc status.ServiceInfo) uint64 {
	var mh maphash.Hash
	mh.SetSeed(h.seed)
	// The definition's fingerprint, as refreshCommon computed it for this
	// table (computed here only if its clusters could not be built).
	c, ok := h.common[id]
	if !ok {
		c.fp = h.serviceFP(svc)
	}
	maphash.WriteComparable(&mh, c.fp)
	dir := t.Directory()
	for _, slot := range t.Members(id) {
		maphash.WriteComparable(&mh, t.Entry(int(slot)))
		// The entry's region and zone are ids, which keep their names
		// from table to table (status.Names only grows).
		maphash.WriteComparable(&mh, uintptr(unsafe.Pointer(dir.Instance(int(slot)))))
	}
	return mh.Sum64()
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

// buildCommon builds a service's clusters and listeners into the maps.
func buildCommon(svc status.ServiceInfo, lrs bool, clusters, listeners map[string]resource) error {
	for _, p := range svc.Ports {
		if err := put(clusters, svc, ClusterName(svc, p.Name), buildCluster(svc, p.Name, lrs)); err != nil {
			return err
		}
		l, err := buildListener(ClusterName(svc, p.Name), ClusterName(svc, p.Name))
		if err != nil {
			return err
		}
		if err := put(listeners, svc, l.Name, l); err != nil {
			return err
		}
	}
	if p, ok := defaultPort(svc); ok {
		l, err := buildListener(ServiceHost(svc), ClusterName(svc, p.Name))
		if err != nil {
			return err
		}
		return put(listeners, svc, l.Name, l)
	}
	return nil
}

// put encodes msg, a resource of svc, and files it under name. The
// body is its deterministic encoding, the one its digest is of: one
// encoding for both (a table of the burst encodes thousands).
func put(m map[string]resource, svc status.ServiceInfo, name string, msg proto.Message) error {
	body := &anypb.Any{}
	if err := anypb.MarshalFrom(body, msg, proto.MarshalOptions{Deterministic: true}); err != nil {
		return fmt.Errorf("xdsserver: encoding %T: %w", msg, err)
	}
	m[name] = resource{version: digestOf(body.Value), body: body, ns: svc.Namespace, svc: svc.Name}
	return nil
}

// pick returns the resources of type i a subscription asks for, in name
// order, their names, and the digest of that set: of the names and their
// digests, so that the same content gives the same digest on every
// server (the response's version is FormatVersion of it). A wildcard
// subscription gets every resource of the type that allow permits; a name the view does not hold, or allow does not
// permit, is left out (in state of the world, the client learns a
// resource does not exist from its absence).
func (v *view) pick(i int, wildcard bool, names map[string]bool, allow allowFunc) ([]*anypb.Any, []string, string) {
	all := v.res[i]
	var keys []string
	if wildcard {
		keys = make([]string, 0, len(all))
		for name, r := range all {
			if allow.allows(r) {
				keys = append(keys, name)
			}
		}
	} else {
		for name := range names {
			if r, ok := all[name]; ok && allow.allows(r) {
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
	return out, keys, hex.EncodeToString(h.Sum(nil)[:versionDigestN])
}
