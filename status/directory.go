package status

import (
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

	// name is the instance's lower-case "id.name.namespace", made by
	// Directory.Index the first time it indexes this InstanceInfo (and
	// again should its service's names not be the ones it was made of).
	// Only the writer touches it.
	name string
}

// namedIn reports whether in.name is what Index makes of in's id in
// service s, without making it: a check the 32 bytes of the names it
// was made of, kept in every InstanceInfo, used to do. It compares
// ASCII alone, which is what names are (SPEC §1); anything else it
// reports as not named, to be made again.
func (in *InstanceInfo) namedIn(s ServiceInfo) bool {
	n := in.name
	if len(n) != len(in.ID)+1+len(s.Name)+1+len(s.Namespace) {
		return false
	}
	for _, part := range [...]string{in.ID, ".", s.Name, ".", s.Namespace} {
		for i := 0; i < len(part); i++ {
			c := part[i]
			if c >= 0x80 {
				return false
			}
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			if n[i] != c {
				return false
			}
		}
		n = n[len(part):]
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
type names struct {
	services   map[string]uint32
	namespaces map[string]struct{}
	slots      map[string]uint32
}

// Index builds the Directory's name index, which ServiceID, HasNamespace
// and SlotOf read. The writer calls it once, before the Directory is
// handed to a Build, so that no reader ever builds one: an index is
// O(instances) and would otherwise be a query's to pay whenever the
// directory changes. serviceOf reports the service id of the instance in
// a slot (the slot's Entry.Service). step, if not nil, is called between
// instances, for a writer that paces its work.
//
// An instance's name is kept in its InstanceInfo, so a Directory that
// reuses the InstanceInfo (the same incarnation) does not make it again.
func (d *Directory) Index(serviceOf func(slot int) uint32, step func()) {
	ix := &names{services: make(map[string]uint32, len(d.Services)), namespaces: map[string]struct{}{},
		slots: make(map[string]uint32, len(d.Services)*4)}
	for id := 1; id < len(d.Services); id++ {
		s := d.Services[id]
		if s.Name == "" {
			continue
		}
		ix.services[strings.ToLower(s.Name+"."+s.Namespace)] = uint32(id)
		ix.namespaces[strings.ToLower(s.Namespace)] = struct{}{}
	}
	for slot, in := range d.Instances {
		if step != nil {
			step()
		}
		if in == nil {
			continue
		}
		s, ok := d.Service(serviceOf(slot))
		if !ok {
			continue
		}
		if !in.namedIn(s) {
			in.name = strings.ToLower(in.ID + "." + s.Name + "." + s.Namespace)
		}
		ix.slots[in.name] = uint32(slot)
	}
	d.names = ix
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
	slot, ok := d.names.slots[name]
	return slot, ok
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
