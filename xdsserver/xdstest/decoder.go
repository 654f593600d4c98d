package xdstest

import (
	"fmt"
	"sync"
	"sync/atomic"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
)

// keepVersions is how many versions of one name a Decoder remembers. A
// stream holds one version of a name at a time and streams fall behind
// by a few versions at most, so older ones are not asked for again;
// evicting them keeps the cache bounded over a long run.
const keepVersions = 8

// Decoder decodes delta resources into T, each distinct (name, version)
// once: thousands of streams receiving the same assignment share one
// decoding (the protocol makes a version name one content). It is safe
// for concurrent use; concurrent callers asking for the same resource
// wait for one decoding. The values it returns are shared: callers must
// not modify them.
type Decoder[T any] struct {
	decode func(*discoveryv3.Resource) (T, error)

	mu     sync.Mutex
	byName map[string]*versions[T]

	decodes, hits atomic.Int64
}

// versions are the decoded versions of one name, newest last.
type versions[T any] struct {
	list []*decoded[T]
}

type decoded[T any] struct {
	version string
	once    sync.Once
	v       T
	err     error
}

// NewDecoder returns a Decoder that decodes with decode.
func NewDecoder[T any](decode func(*discoveryv3.Resource) (T, error)) *Decoder[T] {
	return &Decoder[T]{decode: decode, byName: map[string]*versions[T]{}}
}

// Decode returns r decoded, decoding it only if no caller has decoded
// the same name and version before.
func (d *Decoder[T]) Decode(r *discoveryv3.Resource) (T, error) {
	d.mu.Lock()
	vs := d.byName[r.Name]
	if vs == nil {
		vs = &versions[T]{}
		d.byName[r.Name] = vs
	}
	var e *decoded[T]
	for _, c := range vs.list {
		if c.version == r.Version {
			e = c
			break
		}
	}
	if e == nil {
		e = &decoded[T]{version: r.Version}
		if len(vs.list) == keepVersions {
			copy(vs.list, vs.list[1:])
			vs.list = vs.list[:keepVersions-1]
		}
		vs.list = append(vs.list, e)
	}
	d.mu.Unlock()
	first := false
	e.once.Do(func() {
		first = true
		d.decodes.Add(1)
		if r.Resource == nil {
			e.err = fmt.Errorf("%w: %q version %q", ErrNoResource, r.Name, r.Version)
			return
		}
		e.v, e.err = d.decode(r)
	})
	if !first {
		d.hits.Add(1)
	}
	return e.v, e.err
}

// Decodes returns how many resources were decoded, and hits how many
// calls were answered from earlier decodings.
func (d *Decoder[T]) Decodes() (decodes, hits int64) { return d.decodes.Load(), d.hits.Load() }

// AssignmentDecoder returns a Decoder of ClusterLoadAssignments.
func AssignmentDecoder() *Decoder[*endpointv3.ClusterLoadAssignment] {
	return NewDecoder(DecodeAssignment)
}

// DecodeAssignment decodes r as a ClusterLoadAssignment.
func DecodeAssignment(r *discoveryv3.Resource) (*endpointv3.ClusterLoadAssignment, error) {
	if r.Resource == nil {
		return nil, fmt.Errorf("%w: %q version %q", ErrNoResource, r.Name, r.Version)
	}
	var cla endpointv3.ClusterLoadAssignment
	if err := r.Resource.UnmarshalTo(&cla); err != nil {
		return nil, fmt.Errorf("xdstest: decoding assignment %q version %q: %w", r.Name, r.Version, err)
	}
	return &cla, nil
}
