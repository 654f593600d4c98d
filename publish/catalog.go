package publish

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// Catalog is the loop's copy of the store at one revision: services with
// their evaluation policies, and their live (not terminated) instances.
// It is the one mirror of the replica: the table is built from it, and
// the leader's evaluation (package health) reads it. The writer
// (status.Writer) holds its layout: the slots, the names and the
// readers' Directory.
//
// The loop owns it: only the loop's goroutine reads it (the round
// Node.Tick runs among them), and only Refresh writes it.
type Catalog struct {
	Rev      uint64
	Services []Service
}

// Service is one service of a Catalog.
type Service struct {
	Def      wire.Service // the definition, as the store holds it
	Key      wire.ServiceKey
	Policy   eval.Policy
	idOffset int // len(key.String()) + 1: where an instance key's id begins
	// Instances, sorted by id.
	Instances []Instance
}

// Instance is what the loop needs of one live instance: a few of the
// store record's fields, its slices, maps and pointers (the verdict
// among them) shared with the replica (read-only, see store.Entry),
// rather than a copy of the whole record. Times are unix nanoseconds
// (see FromNanos).
type Instance struct {
	// Key is the instance key's string, made once per instance and
	// carried from one refresh to the next.
	Key         string
	Incarnation uint64
	// Loc is the instance's region and zone, shared with the other
	// instances there (see Node.locality).
	Loc           *Locality
	Addresses     []string
	Ports         map[string]int
	Report        *wire.SelfReport
	Health        *store.Verdict
	LeaseDeadline int64
	RegisteredAt  int64
	LeaseTTL      wire.Duration
	Weight        int32 // 1–65535 (wire.Registration validates it)
	Lifecycle     status.Lifecycle
	// Shift is status.Entry.Shift: how much of its traffic the
	// evacuations of its zone move away from it.
	Shift uint8
	// RampSeconds is the incarnation's deploy ramp in seconds (0: none;
	// wire.Registration keeps it to whole seconds up to an hour), in
	// what Weight, Lifecycle and Shift leave of the struct's last word.
	RampSeconds uint16
}

// Ramp returns the instance's deploy ramp.
func (in *Instance) Ramp() time.Duration { return time.Duration(in.RampSeconds) * time.Second }

// InstanceID returns instance i's id: the end of its key.
func (cs *Service) InstanceID(i int) string { return cs.Instances[i].Key[cs.idOffset:] }

// StoreKey returns the instance's store key.
func (cs *Service) StoreKey(i int) wire.InstanceKey {
	return wire.InstanceKey{Namespace: cs.Key.Namespace, Service: cs.Key.Name, ID: cs.InstanceID(i)}
}

// Record returns as much of the store's record as LeaseExpiry reads.
func (cs *Service) Record(i int) wire.Instance {
	in := &cs.Instances[i]
	return wire.Instance{Namespace: cs.Key.Namespace, Service: cs.Key.Name, ID: cs.InstanceID(i), Incarnation: in.Incarnation,
		Lifecycle: in.Lifecycle, LeaseTTL: in.LeaseTTL, LeaseDeadline: FromNanos(in.LeaseDeadline)}
}

// FromNanos is the time of unix nanoseconds as store.Entry gives them
// (math.MinInt64 for the zero time), in UTC as the store records times.
func FromNanos(ns int64) time.Time {
	if ns == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// HasZone reports whether any of the service's instances is in the zone.
func (cs *Service) HasZone(region, zone string) bool {
	return slices.ContainsFunc(cs.Instances, func(in Instance) bool { return in.Loc.Region == region && in.Loc.Zone == zone })
}

// Locality is a region and a zone.
type Locality struct{ Region, Zone string }

// maxLocalities bounds the localities a Node shares between its catalogs'
// instances; past it the table starts afresh (which changes what is
// shared, never a value).
const maxLocalities = 4096

// locality returns the shared copy of (region, zone), making it if the
// loop has none. It allocates nothing for a locality it has.
func (n *Node) locality(region, zone string) *Locality {
	l := Locality{region, zone}
	if p := n.localities[l]; p != nil {
		return p
	}
	if n.localities == nil || len(n.localities) >= maxLocalities {
		n.localities = make(map[Locality]*Locality)
	}
	p := &Locality{region, zone}
	n.localities[l] = p
	return p
}

// Refresh re-reads the store when its revision moved: services and
// instances, and lays them out in the writer (slots, names, the readers'
// Directory). The loop calls it at the start of each round; a Round
// calls it again after its commits (health's leader does), on the
// loop's goroutine, which alone may call it.
//
// It reads the instances' records in place (store.EachInstance), copying
// only Instance's fields, and reuses the key strings the writer's
// slots hold: a copy of every record (AllInstances) and a new key each
// made several times the catalog in garbage at every store revision.
//
// The new catalog is written over the previous one: each service's
// instances into the slice it had. Only the loop reads a catalog, and
// none reads the previous one once a refresh has begun, so the loop
// never holds two catalogs: a collection that marks during a refresh
// counts one (112 bytes an instance), not both.
func (n *Node) Refresh() {
	st := n.cfg.Store
	rev := st.Revision()
	var (
		peerGen uint64
		peersOf func(ns, svc string) []status.Instance
	)
	if n.cfg.Peers != nil {
		peerGen, peersOf = n.cfg.Peers.Instances()
	}
	if rev == n.cat.Rev && n.laidOut {
		if peerGen != n.peerGen {
			// Another region's view moved, not the store: the same
			// catalog, laid out again with the new instances.
			n.pacer.Begin()
			n.peerGen = peerGen
			infos := make([]status.ServiceInfo, len(n.cat.Services))
			for i := range n.cat.Services {
				infos[i] = serviceInfo(&n.cat.Services[i])
			}
			n.layout(&n.cat, infos, true, peersOf)
		}
		return
	}
	n.laidOut = true
	n.peerGen = peerGen
	n.pacer.Begin()
	svcs := st.Services()
	c := Catalog{Rev: rev, Services: make([]Service, 0, len(svcs))}
	old := make(map[wire.ServiceKey]*Service, len(n.cat.Services))
	for i := range n.cat.Services {
		old[n.cat.Services[i].Key] = &n.cat.Services[i]
	}
	infos := make([]status.ServiceInfo, 0, len(svcs))
	for _, s := range svcs {
		n.pacer.Step()
		k := s.Key()
		cs := Service{Def: s, Key: k, Policy: policyOf(s), idOffset: len(k.Namespace) + len(k.Name) + 2}
		if o := old[k]; o != nil {
			cs.Instances = o.Instances[:0] // written over (see above)
		}
		c.Services = append(c.Services, cs)
		infos = append(infos, serviceInfo(&cs))
	}
	// One service at a time, each under the store's read lock alone, with
	// the pacer between two: read in one piece, the instances of a
	// rollout (8,000) held the one core for a millisecond or more.
	for i := range c.Services {
		n.pacer.Step()
		cs := &c.Services[i]
		st.EachInstanceOf(cs.Key, func(in store.Entry) {
			if in.Lifecycle == status.Terminated {
				return
			}
			// The key is filled in below, outside the store's lock; until
			// then it holds the id.
			cs.Instances = append(cs.Instances, Instance{Key: in.Key.ID,
				Incarnation: in.Incarnation, Loc: n.locality(in.Region, in.Zone), Addresses: in.Addresses, Ports: in.Ports,
				Report: in.Report, Health: in.Verdict, LeaseDeadline: in.LeaseDeadline,
				RegisteredAt: in.RegisteredAt, LeaseTTL: in.LeaseTTL, Weight: int32(in.Weight),
				Lifecycle: in.Lifecycle, RampSeconds: uint16(min(in.Ramp.D()/time.Second, math.MaxUint16))})
		})
	}
	if evs := st.Evacuations(); len(evs) > 0 {
		for si := range c.Services {
			shiftOf(&c.Services[si], evs)
		}
	}
	for si := range c.Services {
		cs := &c.Services[si]
		slices.SortFunc(cs.Instances, func(a, b Instance) int { return strings.Compare(a.Key, b.Key) })
		if l := len(cs.Instances); cap(cs.Instances) > l+l/8+4 {
			// The service grew (append doubles a slice's room) or shrank:
			// the catalog keeps its slices until the next refresh and
			// beyond, so it gives back the room it does not use.
			cs.Instances = slices.Clone(cs.Instances)
		}
	}
	if n.cfg.Peers != nil {
		n.follow(c.Services)
	}
	n.layout(&c, infos, false, peersOf)
	n.cat = c
}

// layout lays out c's instances in the writer (slots, names, the
// readers' Directory), each service's own instances and then, with
// peersOf, the other regions' (layoutPeers). keyed says the instances'
// Key fields hold their whole keys already (a catalog laid out before);
// else they hold their ids, and are given the writer's key strings.
func (n *Node) layout(c *Catalog, infos []status.ServiceInfo, keyed bool, peersOf func(ns, svc string) []status.Instance) {
	n.w.Begin(c.Rev, infos)
	shadowed := 0
	for si := range c.Services {
		cs := &c.Services[si]
		for ii := range cs.Instances {
			in := &cs.Instances[ii]
			id := in.Key
			if keyed {
				id = cs.InstanceID(ii)
			}
			var slot int
			in.Key, slot = n.w.Add(si, status.Instance{ID: id, Incarnation: in.Incarnation,
				Region: in.Loc.Region, Zone: in.Loc.Zone, Addresses: in.Addresses, Ports: in.Ports,
				Lifecycle: in.Lifecycle, BaseWeight: uint16(min(max(in.Weight, 1), 65535))})
			if slot >= 0 && n.slotInc[slot] != in.Incarnation {
				n.slotInc[slot] = in.Incarnation
				n.served[slot].Store(0)
			}
		}
		if peersOf != nil {
			shadowed += n.layoutPeers(si, cs, peersOf)
		}
	}
	n.w.End()
	n.m.peerShadowed.Set(float64(shadowed))
	for slot := range n.slotInc {
		if slot%1024 == 0 {
			n.pacer.Step() // the table's capacity: 100,000 slots by default
		}
		// A slot without a live instance of the catalog.
		if _, ok := n.w.Ref(slot); !ok {
			n.slotInc[slot] = 0
			n.served[slot].Store(0)
		}
	}
}

// shiftOf sets the Shift of each of cs's instances from the evacuations
// in force: the largest any of those covering it asks for, a zone
// evacuated moving all of it (status.ShiftAll), a zone returning what
// its share has not yet taken back.
func shiftOf(cs *Service, evs []wire.Evacuation) {
	for i := range cs.Instances {
		in := &cs.Instances[i]
		in.Shift = max(in.Shift, shiftFor(cs, in, evs))
	}
}

// shiftFor is the largest shift of the evacuations in evs that cover in,
// an instance of cs.
func shiftFor(cs *Service, in *Instance, evs []wire.Evacuation) uint8 {
	var shift uint8
	window := cs.Def.Policy.ShiftBackWindow()
	for _, e := range evs {
		if !e.Covers(cs.Key.Namespace, cs.Key.Name, in.Loc.Region, in.Loc.Zone) {
			continue
		}
		shift = max(shift, evacShift(e, window))
	}
	return shift
}

// evacShift is how much of its traffic e moves away from the instances
// it covers, for a service whose shift_back is window: all of it while
// in force, what its share has not taken back while it returns.
func evacShift(e wire.Evacuation, window time.Duration) uint8 {
	return uint8(math.Round(status.ShiftAll * (1 - e.Share(window))))
}

// serviceInfo is what the readers need of a service.
func serviceInfo(cs *Service) status.ServiceInfo {
	p := cs.Def.Policy
	info := status.ServiceInfo{Namespace: cs.Key.Namespace, Name: cs.Key.Name, DNSTTL: p.DNSTTL.D(),
		ARecordLimit: p.ARecordLimit, MinHealthyFraction: cs.Policy.MinHealthyFraction,
		MaxEjectionPercent: wire.DefaultMaxEjectionPercent, ShrinkCap: cs.Policy.ShrinkCap, ShrinkWindow: cs.Policy.ShrinkWindow}
	if p.MaxEjectionPercent != nil {
		info.MaxEjectionPercent = *p.MaxEjectionPercent
	}
	for _, pt := range cs.Def.Ports {
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
