// Package statustest builds published status tables for tests, in a few
// lines, through the one table writer (status.Writer): a table made here
// is laid out as the server's and the agent's are (slots, names, the
// readers' Directory and its index, locality ids), so a test reads what a
// reader reads in production.
//
//	tb := statustest.New(t, 8)
//	tb.Publish(t, statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay"},
//		Instances: []statustest.Instance{statustest.Ready("pay-0", "10.0.0.1"), statustest.Withdrawn("pay-1", "10.0.0.2")}})
//	srv, err := dnsserver.New(dnsserver.Config{Table: tb.Publisher, …})
//
// It is for tests only (cmd's import rules keep it out of production
// code), yet imports no testing package: it takes what it needs of a
// *testing.T as TB.
package statustest

import (
	"net/netip"

	"github.com/cairn-sd/cairn/status"
)

// TB is what the helpers need of a *testing.T or *testing.B.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Service is one service of a table: its ServiceInfo (Namespace and Name
// at least) and its instances.
type Service struct {
	status.ServiceInfo
	Instances []Instance
}

// Instance is one instance of a Service, its fields published as given
// but two zero ones, which are defaults: incarnation 1, base weight 100.
type Instance struct {
	ID          string
	Incarnation uint64
	// Addrs are its addresses ("10.0.0.1", "2001:db8::1").
	Addrs []string
	// Ports maps the service's port names to this instance's numbers.
	Ports        map[string]uint16
	Region, Zone string
	Verdict      status.Verdict
	Lifecycle    status.Lifecycle
	Flags        status.Flags
	Weight       uint16
	BaseWeight   uint16
	// Shift is status.Entry.Shift (evacuations).
	Shift uint8
}

// Ready returns an instance in rotation: healthy, ready, eligible,
// weight 100, at the given addresses.
func Ready(id string, addrs ...string) Instance {
	return Instance{ID: id, Addrs: addrs, Verdict: status.Healthy, Lifecycle: status.Ready, Flags: status.Eligible, Weight: 100}
}

// Withdrawn returns an instance out of rotation: unhealthy, ready, not
// eligible, at the given addresses.
func Withdrawn(id string, addrs ...string) Instance {
	return Instance{ID: id, Addrs: addrs, Verdict: status.Unhealthy, Lifecycle: status.Ready}
}

// FromEntry returns an instance with the state of e (its verdict,
// lifecycle, flags and weights), at the given addresses.
func FromEntry(id string, e status.Entry, addrs ...string) Instance {
	return Instance{ID: id, Addrs: addrs, Verdict: e.Verdict, Lifecycle: e.Lifecycle, Flags: e.Flags, Weight: e.Weight,
		BaseWeight: e.BaseWeight, Shift: e.Shift}
}

// In returns in in region and zone.
func (in Instance) In(region, zone string) Instance {
	in.Region, in.Zone = region, zone
	return in
}

// Table is a status.Publisher and its writer. Its methods take the
// test they fail, so that one Table may serve several (subtests, fuzz
// iterations).
type Table struct {
	// Publisher is what readers (servers under test) are given.
	Publisher *status.Publisher
	// Writer writes Publisher's tables: for a test that lays out itself.
	Writer *status.Writer
	rev    uint64
}

// New returns a Table of capacity slots (status.DefaultCapacity if 0)
// with no table published yet.
func New(t TB, capacity int) *Table {
	t.Helper()
	pub, err := status.New(status.Config{Capacity: capacity})
	if err != nil {
		t.Fatalf("statustest: %v", err)
	}
	return &Table{Publisher: pub, Writer: status.NewWriter(pub, status.WriterConfig{})}
}

// Publish builds and publishes the next table, of services, at the next
// store revision (1, 2, …) and returns its version.
func (tb *Table) Publish(t TB, services ...Service) uint64 {
	t.Helper()
	return tb.PublishAt(t, tb.rev+1, services...)
}

// PublishAt is Publish at store revision rev; later Publishes follow rev.
func (tb *Table) PublishAt(t TB, rev uint64, services ...Service) uint64 {
	t.Helper()
	tb.rev = rev
	infos := make([]status.ServiceInfo, len(services))
	for i, s := range services {
		infos[i] = s.ServiceInfo
	}
	w := tb.Writer
	w.Begin(rev, infos)
	for si, s := range services {
		ids := make(map[string]bool, len(s.Instances))
		for _, in := range s.Instances {
			if ids[in.ID] {
				t.Fatalf("statustest: %s/%s/%s given twice", s.Namespace, s.Name, in.ID)
			}
			ids[in.ID] = true
			if _, slot := w.Add(si, instance(t, in)); slot < 0 {
				t.Fatalf("statustest: no slot for %s/%s/%s: the table holds %d", s.Namespace, s.Name, in.ID, tb.Publisher.Capacity())
			}
		}
	}
	w.End()
	v, err := w.Build(nil)
	if err != nil {
		t.Fatalf("statustest: %v", err)
	}
	return v
}

// instance is in as the writer takes it, its defaults applied. It hands
// the writer an InstanceInfo, which the writer compares with the one it
// holds: a test may change an instance's addresses or ports without a
// new incarnation, which a store never does.
func instance(t TB, in Instance) status.Instance {
	t.Helper()
	info := &status.InstanceInfo{ID: in.ID, Ports: in.Ports}
	for _, a := range in.Addrs {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			t.Fatalf("statustest: %s: address %q: %v", in.ID, a, err)
		}
		info.Addrs = append(info.Addrs, ip.Unmap())
	}
	wi := status.Instance{ID: in.ID, Incarnation: in.Incarnation, Region: in.Region, Zone: in.Zone, Info: info,
		Verdict: in.Verdict, Lifecycle: in.Lifecycle, Flags: in.Flags, Weight: in.Weight, BaseWeight: in.BaseWeight,
		Shift: in.Shift}
	if wi.Incarnation == 0 {
		wi.Incarnation = 1
	}
	if wi.BaseWeight == 0 {
		wi.BaseWeight = 100
	}
	return wi
}
