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
// The writer (status.Writer) holds its layout: the slots, the names and
// the readers' Directory.
type catalog struct {
	rev      uint64
	services []catService
}

type catService struct {
	svc      wire.Service
	key      wire.ServiceKey
	policy   eval.Policy
	idOffset int // len(key.String()) + 1: where an instance key's id begins
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

// refresh re-reads the store when its revision moved: services,
// instances and members, and lays them out in the writer (slots, names,
// the readers' Directory).
//
// It reads the instances' records in place (store.EachInstance), copying
// only catInstance's fields, and reuses the key strings the writer's
// slots hold: a copy of every record (AllInstances) and a new key each
// made several times the catalog in garbage at every store revision.
//
// The new catalog is written over the previous one: each service's
// instances into the slice it had. Only the loop reads a catalog, and
// none reads the previous one once a refresh has begun, so the loop
// never holds two catalogs: a collection that marks during a refresh
// counts one (112 bytes an instance), not both.
func (n *Node) refresh() {
	st := n.cfg.Store
	rev := st.Revision()
	if rev == n.cat.rev && n.laidOut {
		return
	}
	n.laidOut = true
	n.pacer.Begin()
	svcs := st.Services()
	c := catalog{rev: rev, services: make([]catService, 0, len(svcs))}
	old := make(map[wire.ServiceKey]*catService, len(n.cat.services))
	for i := range n.cat.services {
		old[n.cat.services[i].key] = &n.cat.services[i]
	}
	idx := make(map[wire.ServiceKey]int, len(svcs))
	infos := make([]status.ServiceInfo, 0, len(svcs))
	for _, s := range svcs {
		k := s.Key()
		idx[k] = len(c.services)
		cs := catService{svc: s, key: k, policy: policyOf(s), idOffset: len(k.Namespace) + len(k.Name) + 2}
		if o := old[k]; o != nil {
			cs.instances = o.instances[:0] // written over (see above)
		}
		c.services = append(c.services, cs)
		infos = append(infos, serviceInfo(&cs))
	}
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
	})
	n.w.Begin(rev, infos)
	for si := range c.services {
		cs := &c.services[si]
		slices.SortFunc(cs.instances, func(a, b catInstance) int { return strings.Compare(a.key, b.key) })
		if l := len(cs.instances); cap(cs.instances) > l+l/8+4 {
			// The service grew (append doubles a slice's room) or shrank:
			// the catalog keeps its slices until the next refresh and
			// beyond, so it gives back the room it does not use.
			cs.instances = slices.Clone(cs.instances)
		}
		for ii := range cs.instances {
			in := &cs.instances[ii]
			var slot int
			in.key, slot = n.w.Add(si, status.Instance{ID: in.key, Incarnation: in.incarnation,
				Region: in.loc.region, Zone: in.loc.zone, Addresses: in.addresses, Ports: in.ports,
				Lifecycle: in.lifecycle, BaseWeight: uint16(min(max(in.weight, 1), 65535))})
			if slot >= 0 && n.slotInc[slot] != in.incarnation {
				n.slotInc[slot] = in.incarnation
				n.served[slot].Store(0)
			}
		}
	}
	n.w.End()
	for slot := range n.slotInc {
		// A slot without a live instance of the catalog.
		if _, ok := n.w.Ref(slot); !ok {
			n.slotInc[slot] = 0
			n.served[slot].Store(0)
		}
	}
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

// serviceInfo is what the readers need of a service.
func serviceInfo(cs *catService) status.ServiceInfo {
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
	return info
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
