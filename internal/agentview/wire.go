package agentview

import (
	"cmp"
	"fmt"
	"hash/maphash"
	"io"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/cairn-sd/cairn/status"
)

// Field numbers of the two messages a Wire assembles by hand; the test
// checks them against the messages' descriptors.
const (
	fieldEndpoints   protowire.Number = 2 // ClusterLoadAssignment.endpoints
	fieldLbEndpoints protowire.Number = 2 // LocalityLbEndpoints.lb_endpoints
)

// Wire is a view's encoding: what proto.MarshalOptions{Deterministic:
// true} makes of Encode's message, byte for byte, assembled from the
// encodings of its parts so that an instance encoded for the view
// before is not encoded again.
//
// A server rebuilds a service's view each time one member changes: in a
// burst, every service every few hundred milliseconds, each view with
// every member's metadata, whose maps a deterministic encoding sorts.
// Encoding each member again was most of the xDS hub's work in
// experiment 4's burst, a fifth of each server's CPU (docs/decisions.md).
// A Wire keeps, beside its bytes, where each member's encoding lies in
// them, under a 64-bit hash (seeded per process) of what that encoding
// is made of; the next view of the service copies the members whose
// hash it finds and encodes the rest. Two members' contents that hash
// alike, odds of about n²/2⁶⁵ for a service of n, would give the second
// the first's encoding: the same bet the hub's membersFP makes.
type Wire struct {
	// Body is the encoding at the view's revision.
	Body  []byte
	seed  maphash.Seed
	parts []part // sorted by key
}

// part is one member's encoding: LocalityLbEndpoints.lb_endpoints with
// its tag and length, at Body[off:off+n].
type part struct {
	key    uint64
	off, n uint32
}

// Wire encodes v, reusing what prev (the last Wire of the same service,
// or nil) already encoded. When content is not nil, Wire also writes to
// it the encoding at revision 0: the view's content, without what only
// its revision changes (a server digests it to tell whether a view is
// new).
func (v *View) Wire(prev *Wire, content io.Writer) (*Wire, error) {
	w := &Wire{parts: make([]part, 0, len(v.Instances))}
	if prev != nil {
		w.seed = prev.seed
	} else {
		w.seed = maphash.MakeSeed()
	}
	det := proto.MarshalOptions{Deterministic: true}
	var err error
	w.Body, err = det.MarshalAppend(nil, &endpointv3.ClusterLoadAssignment{ClusterName: Name(v.Service.Namespace, v.Service.Name)})
	if err != nil {
		return nil, fmt.Errorf("agentview: encoding the view of %s: %w", Name(v.Service.Namespace, v.Service.Name), err)
	}
	group := func(rev uint64) ([]byte, error) {
		return det.Marshal(&endpointv3.ClusterLoadAssignment{Endpoints: []*endpointv3.LocalityLbEndpoints{v.serviceGroup(rev)}})
	}
	content0, err := group(0)
	if err != nil {
		return nil, err
	}
	head := content0
	if v.Revision != 0 {
		if head, err = group(v.Revision); err != nil {
			return nil, err
		}
	}
	at := [2]int{len(w.Body), len(w.Body) + len(head)} // the one part that depends on the revision
	w.Body = append(w.Body, head...)

	// Each locality is one group: its Locality, then its members.
	ins := v.byLocality()
	var inner []byte
	for i := 0; i < len(ins); {
		j := i + 1
		for j < len(ins) && ins[j].Region == ins[i].Region && ins[j].Zone == ins[i].Zone {
			j++
		}
		inner, err = det.MarshalAppend(inner[:0], &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: ins[i].Region, Zone: ins[i].Zone}})
		if err != nil {
			return nil, err
		}
		from := make([]int, j-i) // where each member's part lies in inner
		keys := make([]uint64, j-i)
		for k, in := range ins[i:j] {
			keys[k] = w.keyOf(in, v.Service)
			from[k] = len(inner)
			if b, ok := prev.part(keys[k]); ok {
				inner = append(inner, b...)
				continue
			}
			inner, err = det.MarshalAppend(inner, &endpointv3.LocalityLbEndpoints{LbEndpoints: []*endpointv3.LbEndpoint{in.encode(v.Service)}})
			if err != nil {
				return nil, err
			}
		}
		w.Body = protowire.AppendTag(w.Body, fieldEndpoints, protowire.BytesType)
		w.Body = protowire.AppendVarint(w.Body, uint64(len(inner)))
		base := len(w.Body)
		w.Body = append(w.Body, inner...)
		for k := range keys {
			end := len(inner)
			if k+1 < len(from) {
				end = from[k+1]
			}
			w.parts = append(w.parts, part{key: keys[k], off: uint32(base + from[k]), n: uint32(end - from[k])})
		}
		i = j
	}
	slices.SortFunc(w.parts, func(a, b part) int { return cmp.Compare(a.key, b.key) })
	if content != nil {
		for _, b := range [][]byte{w.Body[:at[0]], content0, w.Body[at[1]:]} {
			if _, err := content.Write(b); err != nil {
				return nil, err
			}
		}
	}
	return w, nil
}

// part returns the encoding of the member whose key is key, if w has it.
func (w *Wire) part(key uint64) ([]byte, bool) {
	if w == nil {
		return nil, false
	}
	i, ok := slices.BinarySearchFunc(w.parts, key, func(p part, k uint64) int { return cmp.Compare(p.key, k) })
	if !ok {
		return nil, false
	}
	p := w.parts[i]
	return w.Body[p.off : p.off+p.n], true
}

// keyOf hashes what in's encoding is made of (Instance.encode): its
// identity, addresses, ports, entry and the service's first port.
func (w *Wire) keyOf(in *Instance, svc status.ServiceInfo) uint64 {
	var h maphash.Hash
	h.SetSeed(w.seed)
	h.WriteString(in.ID)
	h.WriteByte(0)
	maphash.WriteComparable(&h, in.Incarnation)
	maphash.WriteComparable(&h, len(in.Addrs))
	for _, a := range in.Addrs {
		maphash.WriteComparable(&h, a)
	}
	// The ports map in any order: the sum of each pair's own hash.
	var ports uint64
	for name, num := range in.Ports {
		var p maphash.Hash
		p.SetSeed(w.seed)
		p.WriteString(name)
		maphash.WriteComparable(&p, num)
		ports += p.Sum64()
	}
	maphash.WriteComparable(&h, ports)
	maphash.WriteComparable(&h, len(in.Ports))
	maphash.WriteComparable(&h, in.Verdict)
	maphash.WriteComparable(&h, in.Lifecycle)
	maphash.WriteComparable(&h, in.Flags)
	maphash.WriteComparable(&h, in.Weight)
	maphash.WriteComparable(&h, in.BaseWeight)
	maphash.WriteComparable(&h, in.Shift)
	if len(svc.Ports) > 0 {
		h.WriteString(svc.Ports[0].Name)
	}
	return h.Sum64()
}
