package health

import (
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// catalog is the loop's copy of the store at one revision: services with
// their evaluation policies, and their live (not terminated) instances.
type catalog struct {
	rev      uint64
	services []catService
	// bySlot[slot] indexes services[.].instances, -1 for a free slot.
	bySlot []slotRef
	// dir is what the readers need beside the entries (names, addresses),
	// handed to every build until the next refresh.
	dir *status.Directory
}

type catService struct {
	svc      wire.Service
	key      wire.ServiceKey
	policy   eval.Policy
	id       uint32 // in the table's service names
	idOffset int    // len(key.String()) + 1: where an instance key's id begins
	// instances, sorted by id.
	instances []catInstance
}

// catInstance is what the loop needs of one live instance: a few of the
// store record's fields, its slices, maps and pointers (the verdict
// among them) shared with the replica (read-only, see store.Entry),
// rather than a copy of the whole record. Times are unix nanoseconds
// (see fromNanos).
type catInstance struct {
	// key is the instance key's string, made once per instance and
	// carried from one refresh to the next.
	key         string
	incarnation uint64
	// loc is the instance's region and zone, shared with the other
	// instances there (see Node.locality).
	loc           *locality
	addresses     []string
	ports         map[string]int
	report        *wire.SelfReport
	health        *store.Verdict
	leaseDeadline int64
	registeredAt  int64
	leaseTTL      wire.Duration
	weight        int32 // 1–65535 (wire.Registration validates it)
	lifecycle     status.Lifecycle
}

// instanceID returns instance i's id: the end of its key.
func (cs *catService) instanceID(i int) string { return cs.instances[i].key[cs.idOffset:] }

// storeKey returns the instance's store key.
func (cs *catService) storeKey(i int) wire.InstanceKey {
	return wire.InstanceKey{Namespace: cs.key.Namespace, Service: cs.key.Name, ID: cs.instanceID(i)}
}

// record returns as much of the store's record as LeaseExpiry reads.
func (cs *catService) record(i int) wire.Instance {
	in := &cs.instances[i]
	return wire.Instance{Namespace: cs.key.Namespace, Service: cs.key.Name, ID: cs.instanceID(i), Incarnation: in.incarnation,
		Lifecycle: storeLifecycle(in.lifecycle), LeaseTTL: in.leaseTTL, LeaseDeadline: fromNanos(in.leaseDeadline)}
}

// fromNanos is the time of unix nanoseconds as store.Entry gives them
// (math.MinInt64 for the zero time), in UTC as the store records times.
func fromNanos(ns int64) time.Time {
	if ns == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// hasZone reports whether any of the service's instances is in the zone.
func (cs *catService) hasZone(region, zone string) bool {
	return slices.ContainsFunc(cs.instances, func(in catInstance) bool { return in.loc.region == region && in.loc.zone == zone })
}

// locality is a region and a zone.
type locality struct{ region, zone string }

// maxLocalities bounds the localities a Node shares between its catalogs'
// instances; past it the table starts afresh (which changes what is
// shared, never a value).
const maxLocalities = 4096

// locality returns the shared copy of (region, zone), making it if the
// loop has none. It allocates nothing for a locality it has.
func (n *Node) locality(region, zone string) *locality {
	l := locality{region, zone}
	if p := n.localities[l]; p != nil {
		return p
	}
	if n.localities == nil || len(n.localities) >= maxLocalities {
		n.localities = make(map[locality]*locality)
	}
	p := &locality{region, zone}
	n.localities[l] = p
	return p
}

type slotRef struct{ svc, inst int32 }

// refresh re-reads the store when its revision moved: services,
// instances, members, slots and the interned names.
//
// It reads the instances' records in place (store.EachInstance), copying
// only catInstance's fields, and reuses the key strings the slots hold: a
// copy of every record (AllInstances) and a new key each made several
// times the catalog in garbage at every store revision.
//
// The new catalog is written over the previous one: each service's
// instances into the slice it had, the slot index into the same array.
// Only the loop reads a catalog, and none reads the previous one once a
// refresh has begun, so the loop never holds two catalogs: a collection
// that marks during a refresh counts one (112 bytes an instance), not
// both.
func (n *Node) refresh() {
	st := n.cfg.Store
	rev := st.Revision()
	if rev == n.cat.rev && n.cat.bySlot != nil {
		return
	}
	n.pacer.Begin()
	svcs := st.Services()
	// bySlot spans the whole table.
	bySlot := n.cat.bySlot
	if capacity := n.slots.Capacity(); len(bySlot) != capacity {
		bySlot = make([]slotRef, capacity)
	}
	c := catalog{rev: rev, services: make([]catService, 0, len(svcs)), bySlot: bySlot}
	for i := range c.bySlot {
		c.bySlot[i] = slotRef{-1, -1}
	}
	old := make(map[wire.ServiceKey]*catService, len(n.cat.services))
	for i := range n.cat.services {
		old[n.cat.services[i].key] = &n.cat.services[i]
	}
	idx := make(map[wire.ServiceKey]int, len(svcs))
	names := make([]string, 0, len(svcs))
	for _, s := range svcs {
		k := s.Key()
		idx[k] = len(c.services)
		cs := catService{svc: s, key: k, policy: policyOf(s), idOffset: len(k.Namespace) + len(k.Name) + 2}
		if o := old[k]; o != nil {
			cs.instances = o.instances[:0] // written over (see above)
		}
		c.services = append(c.services, cs)
		names = append(names, k.String())
	}
	n.svcs = extend(n.svcs, names)
	total := 0
	st.EachInstance(func(in store.Entry) {
		i, ok := idx[in.Key.ServiceKey()]
		if !ok || in.Lifecycle == wire.Terminated {
			return
		}
		// The key is filled in below, outside the store's lock; until
		// then it holds the id.
		c.services[i].instances = append(c.services[i].instances, catInstance{key: in.Key.ID,
			incarnation: in.Incarnation, loc: n.locality(in.Region, in.Zone), addresses: in.Addresses, ports: in.Ports,
			report: in.Report, health: in.Verdict, leaseDeadline: in.LeaseDeadline,
			registeredAt: in.RegisteredAt, leaseTTL: in.LeaseTTL, weight: int32(in.Weight),
			lifecycle: lifecycleOf(in.Lifecycle)})
		total++
	})
	// The localities in use, each once (there are few).
	var locs []string
	seen := make(map[string]bool, 16)
	for si := range c.services {
		cs := &c.services[si]
		slices.SortFunc(cs.instances, func(a, b catInstance) int { return strings.Compare(a.key, b.key) })
		if l := len(cs.instances); cap(cs.instances) > l+l/8+4 {
			// The service grew (append doubles a slice's room) or shrank:
			// the catalog keeps its slices until the next refresh and
			// beyond, so it gives back the room it does not use.
			cs.instances = slices.Clone(cs.instances)
		}
		// The keys: the one its slot holds for an instance that has a
		// slot, else a new one.
		kb := append(append(append(append(n.keyBuf[:0], cs.key.Namespace...), '/'), cs.key.Name...), '/')
		for ii := range cs.instances {
			n.pacer.Step()
			in := &cs.instances[ii]
			kb = append(kb[:cs.idOffset], in.key...)
			if slot, ok := n.slots.LookupBytes(kb); ok {
				in.key, _, _ = n.slots.Key(slot)
			} else {
				in.key = string(kb)
			}
			n.keyBuf = kb
			for _, l := range [...]string{in.loc.region, in.loc.zone} {
				if !seen[l] {
					seen[l] = true
					locs = append(locs, l)
				}
			}
		}
	}
	n.locs = intern(n.locs, locs)

	// Slots: keep every live instance's, free the others'.
	for si := range c.services {
		cs := &c.services[si]
		cs.id, _ = n.svcs.ID(cs.key.String())
		for ii := range cs.instances {
			n.pacer.Step()
			in := &cs.instances[ii]
			k := in.key
			slot, err := n.slots.Assign(k)
			if err != nil {
				n.m.unslotted.Inc()
				n.log.Warn("status table full: instance not published", "instance", k, "err", err)
				continue
			}
			if n.slotInc[slot] != in.incarnation {
				n.slotInc[slot] = in.incarnation
				n.served[slot].Store(0)
			}
			c.bySlot[slot] = slotRef{int32(si), int32(ii)}
		}
	}
	for slot, ref := range c.bySlot {
		n.pacer.Step()
		// A key in the table without a live instance of the catalog.
		if k, _, ok := n.slots.Key(slot); ok && ref.svc < 0 {
			n.slots.Free(k)
			n.slotInc[slot] = 0
			n.served[slot].Store(0)
		}
	}
	c.dir = n.directory(c)
	if ms, err := st.Members(); err == nil {
		ids := make([]string, 0, len(ms))
		zones := make(map[string]string, len(ms))
		for _, m := range ms {
			ids = append(ids, m.NodeID)
			zones[m.NodeID] = m.Region + "/" + m.Zone
		}
		sort.Strings(ids)
		n.members.Store(&ids)
		n.zones.Store(&zones)
	}
	n.cat = c
}

// directory makes the readers' Directory of a catalog. An instance's
// InstanceInfo is reused while its incarnation is the same (its addresses
// and ports cannot change without a new incarnation), so readers may
// cache by pointer.
//
// Most store revisions change no address, port or service policy (a
// verdict, a report, a lease renewal): then the previous Directory is
// returned as it is, and neither it nor its name index is made again.
func (n *Node) directory(c catalog) *status.Directory {
	services := make([]status.ServiceInfo, n.svcs.Len())
	for _, cs := range c.services {
		p := cs.svc.Policy
		info := status.ServiceInfo{Namespace: cs.key.Namespace, Name: cs.key.Name, DNSTTL: p.DNSTTL.D(),
			ARecordLimit: p.ARecordLimit, MinHealthyFraction: cs.policy.MinHealthyFraction,
			MaxEjectionPercent: wire.DefaultMaxEjectionPercent, ShrinkCap: cs.policy.ShrinkCap, ShrinkWindow: cs.policy.ShrinkWindow}
		if p.MaxEjectionPercent != nil {
			info.MaxEjectionPercent = *p.MaxEjectionPercent
		}
		for _, pt := range cs.svc.Ports {
			info.Ports = append(info.Ports, status.Port{Name: pt.Name, Number: uint16(pt.Number), Protocol: pt.Protocol})
		}
		services[cs.id] = info
	}
	if old := n.cat.dir; old != nil && slices.EqualFunc(old.Services, services, sameService) && n.sameInstances(c, old) {
		return old
	}
	d := &status.Directory{Revision: c.rev, Services: services, Instances: make([]*status.InstanceInfo, len(c.bySlot))}
	// The previous directory's InstanceInfo of the slot is the one to
	// reuse: a live instance keeps its slot, and an incarnation is never
	// another instance's.
	var prev []*status.InstanceInfo
	if n.cat.dir != nil {
		prev = n.cat.dir.Instances
	}
	// Instances of a service mostly have the same ports: a new
	// InstanceInfo shares the map of the service's previous one when it
	// holds the same numbers (a small map costs some 200 bytes).
	lastPorts := make([]map[string]uint16, len(c.services))
	for slot, ref := range c.bySlot {
		if ref.svc < 0 {
			continue
		}
		cs := &c.services[ref.svc]
		in := &cs.instances[ref.inst]
		var info *status.InstanceInfo
		if slot < len(prev) {
			info = prev[slot]
		}
		if info == nil || info.Incarnation != in.incarnation || info.ID != cs.instanceID(int(ref.inst)) {
			info = &status.InstanceInfo{ID: cs.instanceID(int(ref.inst)), Incarnation: in.incarnation}
			for _, a := range in.addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					info.Addrs = append(info.Addrs, ip.Unmap())
				}
			}
			if last := lastPorts[ref.svc]; samePorts(last, in.ports) {
				info.Ports = last
			} else {
				info.Ports = make(map[string]uint16, len(in.ports))
				for name, num := range in.ports {
					info.Ports[name] = uint16(num)
				}
			}
		}
		lastPorts[ref.svc] = info.Ports
		d.Instances[slot] = info
	}
	d.Index(func(slot int) uint32 {
		if ref := c.bySlot[slot]; ref.svc >= 0 {
			return c.services[ref.svc].id
		}
		return 0
	}, n.pacer.Step)
	return d
}

// samePorts reports whether have (nil: none yet) holds the numbers of
// ports.
func samePorts(have map[string]uint16, ports map[string]int) bool {
	if have == nil || len(have) != len(ports) {
		return false
	}
	for name, num := range ports {
		if n, ok := have[name]; !ok || int(n) != num {
			return false
		}
	}
	return true
}

// sameInstances reports whether old holds, slot for slot, the
// InstanceInfo the catalog's instances would get.
func (n *Node) sameInstances(c catalog, old *status.Directory) bool {
	if len(old.Instances) != len(c.bySlot) {
		return false
	}
	for slot, ref := range c.bySlot {
		n.pacer.Step()
		have := old.Instances[slot]
		if ref.svc < 0 {
			if have != nil {
				return false
			}
			continue
		}
		cs := &c.services[ref.svc]
		in := &cs.instances[ref.inst]
		if have == nil || have.ID != cs.instanceID(int(ref.inst)) || have.Incarnation != in.incarnation {
			return false
		}
	}
	return true
}

func sameService(a, b status.ServiceInfo) bool {
	return a.Namespace == b.Namespace && a.Name == b.Name && a.DNSTTL == b.DNSTTL && a.ARecordLimit == b.ARecordLimit &&
		a.MinHealthyFraction == b.MinHealthyFraction && a.MaxEjectionPercent == b.MaxEjectionPercent && a.ShrinkCap == b.ShrinkCap && a.ShrinkWindow == b.ShrinkWindow &&
		slices.Equal(a.Ports, b.Ports)
}

// extend returns names with the new ones appended (ids stay stable), or
// names itself when nothing is new.
func extend(names *status.Names, add []string) *status.Names {
	var fresh []string
	for _, s := range add {
		if _, ok := names.ID(s); !ok && !slices.Contains(fresh, s) {
			fresh = append(fresh, s)
		}
	}
	if len(fresh) == 0 && names != nil {
		return names
	}
	old := make([]string, 0, names.Len()+len(fresh))
	for i := 1; i < names.Len(); i++ {
		old = append(old, names.Name(uint32(i)))
	}
	return status.NewNames(append(old, fresh...)...)
}

// intern returns the names of the localities in use, sorted: names itself
// when it holds exactly those, else new Names. Unlike services' names,
// localities come and go with instances, so an id is only meaningful
// within one table (readers look them up per table): reclaiming them
// keeps the 16-bit ids from running out however many zones were ever
// named.
func intern(names *status.Names, use []string) *status.Names {
	set := make(map[string]bool, 8)
	for _, s := range use {
		if s != "" {
			set[s] = true
		}
	}
	if names != nil && names.Len()-1 == len(set) {
		same := true
		for s := range set {
			if _, ok := names.ID(s); !ok {
				same = false
				break
			}
		}
		if same {
			return names
		}
	}
	sorted := make([]string, 0, len(set))
	for s := range set {
		sorted = append(sorted, s)
	}
	slices.Sort(sorted)
	return status.NewNames(sorted...)
}

// policyOf maps a stored service definition to the evaluator's policy.
func policyOf(s wire.Service) eval.Policy {
	p := eval.Policy{
		WithdrawAfter:             s.Policy.WithdrawAfter,
		AdmitAfter:                s.Policy.AdmitAfter,
		LeaseTTL:                  s.Policy.LeaseTTL.D(),
		ShrinkCap:                 s.Policy.ShrinkCap,
		OutcomeQuorum:             s.Policy.OutcomeQuorum,
		CorrelatedFailureFraction: s.Policy.CorrelatedFailureFraction,
	}
	if e := s.Policy.MaxEjectionPercent; e != nil {
		p.MaxEjectionPercent = *e
		if *e == 0 {
			p.MaxEjectionPercent = -1 // outcomes never withdraw
		}
	}
	// In a definition 0 switches a rule off; in eval.Policy 0 is "the
	// default" and a negative value is off.
	off := func(d *wire.Duration) time.Duration {
		switch {
		case d == nil:
			return 0
		case *d == 0:
			return -1
		}
		return d.D()
	}
	p.AdmitMin, p.SlowStart = off(s.Policy.AdmitMin), off(s.Policy.SlowStart)
	if f := s.Policy.FlapLimit; f != nil {
		p.FlapLimit = *f
		if *f == 0 {
			p.FlapLimit = math.MaxInt32 // never quarantine
		}
	}
	switch s.Capability.Readiness {
	case "self":
		p.Readiness = eval.ReadinessSelf
	case "none":
		p.Readiness = eval.ReadinessNone
	}
	if len(s.Capability.Dependencies) > 0 {
		p.Dependencies = make(map[string]bool, len(s.Capability.Dependencies))
		for _, d := range s.Capability.Dependencies {
			p.Dependencies[d.Name] = d.Shared
		}
	}
	if s.Check != nil {
		p.CheckInterval = s.Check.Interval.D()
	}
	if f := s.Policy.MinHealthyFraction; f != nil {
		p.MinHealthyFraction = *f
		if *f == 0 {
			p.MinHealthyFraction = -1 // never disregard health
		}
	}
	return p.WithDefaults()
}

// updateTargets gives the prober the targets assigned to this node.
func (n *Node) updateTargets() {
	p := n.cfg.Prober
	if p == nil {
		return
	}
	live := n.liveSet()
	self := p.Observer()
	var ts []probe.Target
	var skipped []error
	for _, cs := range n.cat.services {
		ck := cs.svc.Check
		if ck == nil {
			continue
		}
		kind, err := probe.ParseKind(ck.Type)
		if err != nil {
			continue
		}
		port, _ := cs.svc.Port(ck.Port)
		for i := range cs.instances {
			in := &cs.instances[i]
			if in.lifecycle != status.Starting && in.lifecycle != status.Ready || len(in.addresses) == 0 {
				continue
			}
			id := TargetID(cs.storeKey(i), in.incarnation)
			if !probe.AssignedZoned(id, self, live, n.zoneOf, n.cfg.Replicas) {
				continue
			}
			addr, err := netip.ParseAddr(in.addresses[0])
			if err != nil {
				continue
			}
			num := port.Number
			if v, ok := in.ports[ck.Port]; ok && v > 0 {
				num = v
			}
			t := probe.Target{ID: id, Kind: kind, Addr: netip.AddrPortFrom(addr, uint16(num)),
				Interval: ck.Interval.D(), Timeout: ck.Timeout.D()}
			if kind == probe.HTTP {
				t.Path = ck.Path
			}
			// One target the prober refuses (a check path the store
			// let through, an unspecified address) must not stop the
			// whole set: SetTargets takes all or nothing.
			if err := t.Validate(); err != nil {
				skipped = append(skipped, err)
				continue
			}
			ts = append(ts, t)
		}
	}
	if slices.Equal(ts, n.targets) && n.targets != nil {
		return
	}
	if len(skipped) > 0 {
		n.log.Warn("instances not probed: invalid probe targets", "count", len(skipped), "first", skipped[0])
	}
	if err := p.SetTargets(ts); err != nil {
		n.log.Error("setting probe targets", "targets", len(ts), "err", err)
		return
	}
	n.targets = ts
	if n.targets == nil {
		n.targets = []probe.Target{}
	}
	n.m.targets.Set(float64(len(ts)))
}

func lifecycleOf(l wire.Lifecycle) status.Lifecycle {
	switch l {
	case wire.Ready:
		return status.Ready
	case wire.Draining:
		return status.Draining
	case wire.Terminated:
		return status.Terminated
	}
	return status.Starting
}

// storeLifecycle is lifecycleOf's inverse, read from it.
func storeLifecycle(l status.Lifecycle) wire.Lifecycle {
	for _, s := range [...]wire.Lifecycle{wire.Ready, wire.Draining, wire.Terminated} {
		if lifecycleOf(s) == l {
			return s
		}
	}
	return wire.Starting
}

func parseVerdict(s string) status.Verdict {
	for v := status.Unknown; v <= status.Quarantined; v++ {
		if v.String() == s {
			return v
		}
	}
	return status.Unknown
}
