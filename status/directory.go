package status

import (
	"net/netip"
	"time"
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
	Ports map[string]uint16
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
