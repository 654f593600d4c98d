package status

import (
	"hash/maphash"
	"net/netip"
	"strings"
	"time"
	"unsafe"
)

// Directory is what readers need beside the entries to answer a query:
// each service's names, ports and answer policy, and each slot's instance
// id and addresses. Entries say who may get traffic; the Directory says
// where they are.
//
// A Directory is immutable and shared: the writer makes a new one only
// when the store changed, and hands the same pointer to every Build until
// then, so a rebuild on an unchanged store allocates nothing. It keeps an
// unchanged instance's *InstanceInfo across Directories, so a reader may
// cache what it derives from one (packed DNS records, say) by pointer.
type Directory struct {
	// Revision is the store revision the directory was made from.
	Revision uint64
	// Services is indexed by service id (Entry.Service); index 0, the
	// empty name, is the zero ServiceInfo.
	Services []ServiceInfo
	// Instances is indexed by slot: the instance whose entry the slot
	// holds, nil for a free slot. Instances[slot].Incarnation equals the
	// slot's Entry.Incarnation in every table built with the directory.
	Instances []*InstanceInfo

	names *names // see Index
}

// ServiceInfo is one service as the readers need it.
type ServiceInfo struct {
	Namespace, Name string
	Ports           []Port
	// DNSTTL is the answers' TTL; ARecordLimit the most A or AAAA
	// records in one answer (SPEC §3).
	DNSTTL       time.Duration
	ARecordLimit int
	// MinHealthyFraction is the guard's fraction, for readers that apply
	// it per caller's tiers (SPEC §3); negative: never disregard health.
	MinHealthyFraction float64
	// MaxEjectionPercent bounds the share of the service's endpoints a
	// caller's outlier detection may eject (the policy's
	// max_ejection_percent; 0: never eject), for xDS clusters.
	MaxEjectionPercent int
	// ShrinkCap is the fraction (0–1] of its eligible endpoints a view
	// may lose per ShrinkWindow (SPEC §2), for readers that bound a
	// view's shrinking themselves: the agent.
	ShrinkCap    float64
	ShrinkWindow time.Duration
}

// Port is a named service port.
type Port struct {
	Name     string
	Number   uint16
	Protocol string // "tcp" or "udp"
}

// InstanceInfo is one instance's identity and addresses.
type InstanceInfo struct {
	ID          string
	Incarnation uint64
	// Addrs are the instance's addresses, canonical (IPv4 as 4-byte
	// addresses).
	Addrs []netip.Addr
	// Ports maps a port name of the service to this instance's number.
	// Instances with the same numbers may share one map: read-only.
	Ports map[string]uint16
}

// isNamed reports whether name, in lower case, is in's
// "id.name.namespace" in service s, without making that name: the check
// the name index makes of each candidate its hash finds. It folds ASCII
// alone, which is what names are (SPEC §1).
func (in *InstanceInfo) isNamed(name string, s ServiceInfo) bool {
	if len(name) != len(in.ID)+1+len(s.Name)+1+len(s.Namespace) {
		return false
	}
	for _, part := range [...]string{in.ID, ".", s.Name, ".", s.Namespace} {
		for i := 0; i < len(part); i++ {
			c := part[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if name[i] != c {
				return false
			}
		}
		name = name[len(part):]
	}
	return true
}

// Port returns the instance's number for the service port called name.
func (in *InstanceInfo) Port(name string) (uint16, bool) {
	p, ok := in.Ports[name]
	return p, ok
}

// Service returns the service with the given id, or false.
func (d *Directory) Service(id uint32) (ServiceInfo, bool) {
	if d == nil || uint64(id) >= uint64(len(d.Services)) || id == 0 {
		return ServiceInfo{}, false
	}
	return d.Services[id], true
}

// Instance returns the instance in slot, or nil.
func (d *Directory) Instance(slot int) *InstanceInfo {
	if d == nil || slot < 0 || slot >= len(d.Instances) {
		return nil
	}
	return d.Instances[slot]
}

// names indexes a Directory by the lower-case names readers look things
// up by: "name.namespace" for a service, "id.name.namespace" for an
// instance.
//
// Instances are found through an open-addressed table of slots keyed by
// a hash of the name, not a map of names: a name is made only to be
// hashed, on a stack buffer, and each candidate the hash finds is checked
// against its InstanceInfo and service. The table costs 8 bytes a cell
// at a load of at most a half, where a map of strings kept each
// instance's name as well.
type names struct {
	services   map[string]uint32
	namespaces map[string]struct{}
	seed       maphash.Seed
	cells      []cell // len a power of two; mask = len-1
}

// cell is one place in the instance table: slot+1 (0: empty) and the
// slot's service id.
type cell struct{ slot1, svc uint32 }

// Index builds the Directory's name index, which ServiceID, HasNamespace
// and SlotOf read. The writer calls it once, before the Directory is
// handed to a Build, so that no reader ever builds one: an index is
// O(instances) and would otherwise be a query's to pay whenever the
// directory changes. serviceOf reports the service id of the instance in
// a slot (the slot's Entry.Service). step, if not nil, is called between
// instances, for a writer that paces its work.
func (d *Directory) Index(serviceOf func(slot int) uint32, step func()) {
	ix := &names{services: make(map[string]uint32, len(d.Services)), namespaces: map[string]struct{}{},
		seed: maphash.MakeSeed()}
	for id := 1; id < len(d.Services); id++ {
		s := d.Services[id]
		if s.Name == "" {
			continue
		}
		ix.services[strings.ToLower(s.Name+"."+s.Namespace)] = uint32(id)
		ix.namespaces[strings.ToLower(s.Namespace)] = struct{}{}
	}
	n := 0
	for _, in := range d.Instances {
		if in != nil {
			n++
		}
	}
	size := 8
	for size < 2*n {
		size *= 2
	}
	ix.cells = make([]cell, size)
	var buf [3*maxLabel + 2]byte
	for slot, in := range d.Instances {
		if step != nil {
			step()
		}
		if in == nil {
			continue
		}
		svc := serviceOf(slot)
		s, ok := d.Service(svc)
		if !ok {
			continue
		}
		i := ix.first(NameKey(buf[:], in.ID, s.Name, s.Namespace))
		for ix.cells[i].slot1 != 0 {
			i = (i + 1) & (len(ix.cells) - 1)
		}
		ix.cells[i] = cell{slot1: uint32(slot) + 1, svc: svc}
	}
	d.names = ix
}

// first returns the cell a probe for name starts at.
func (ix *names) first(name string) int {
	return int(maphash.String(ix.seed, name) & uint64(len(ix.cells)-1))
}

// ServiceID returns the id of the service whose lower-case
// "name.namespace" is name.
func (d *Directory) ServiceID(name string) (uint32, bool) {
	if d == nil || d.names == nil {
		return 0, false
	}
	id, ok := d.names.services[name]
	return id, ok
}

// HasNamespace reports whether a service is in the lower-case namespace
// ns.
func (d *Directory) HasNamespace(ns string) bool {
	if d == nil || d.names == nil {
		return false
	}
	_, ok := d.names.namespaces[ns]
	return ok
}

// SlotOf returns the slot of the instance whose lower-case
// "id.name.namespace" is name.
func (d *Directory) SlotOf(name string) (uint32, bool) {
	if d == nil || d.names == nil {
		return 0, false
	}
	ix := d.names
	for i := ix.first(name); ; i = (i + 1) & (len(ix.cells) - 1) {
		c := ix.cells[i]
		if c.slot1 == 0 {
			return 0, false
		}
		if in := d.Instances[c.slot1-1]; in.isNamed(name, d.Services[c.svc]) {
			return c.slot1 - 1, true
		}
	}
}

// SlotOfKey returns the slot of the instance whose store key
// ("namespace/service/id", as KeyHash takes it) is key: SlotOf of its
// name, "id.service.namespace" in lower case. It does not allocate. The
// slot may since hold another instance in a table built with a later
// Directory: check the entry's Key against KeyHash(key).
func (d *Directory) SlotOfKey(key string) (uint32, bool) {
	if d == nil || d.names == nil {
		return 0, false
	}
	ns, rest, ok1 := strings.Cut(key, "/")
	svc, id, ok2 := strings.Cut(rest, "/")
	// Three labels and two dots: a longer key names no instance.
	var buf [3*maxLabel + 2]byte
	if !ok1 || !ok2 || len(ns)+len(svc)+len(id)+2 > len(buf) {
		return 0, false
	}
	return d.SlotOf(NameKey(buf[:], id, svc, ns))
}

// NameKey writes labels, lower-cased and joined by dots, into buf and
// returns them as a string that shares buf's memory: the form the name
// index is looked up by (SlotOf, ServiceID, HasNamespace), without
// allocating. The string is valid until buf is written again, and the
// index keeps none it is asked for.
func NameKey(buf []byte, labels ...string) string {
	b := buf[:0]
	for i, l := range labels {
		if i > 0 {
			b = append(b, '.')
		}
		for j := 0; j < len(l); j++ {
			c := l[j]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b = append(b, c)
		}
	}
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(&b[0], len(b))
}

// maxLabel is the longest DNS label (RFC 1035 §2.3.4), which each part of
// an instance key is.
const maxLabel = 63
