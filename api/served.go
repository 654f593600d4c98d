package api

import (
	"fmt"
	"slices"
	"strings"
	"time"

	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// The endpoints view shows what this node's DNS and xDS servers serve:
// each row's verdict, eligibility, weight, flags and tier are read from
// the status table they answer from (Config.Table), one table for the
// whole view, so that `cairn endpoints` and dig agree at a table
// version. The evaluator's committed verdict stands beside it
// (wire.Endpoint.Evaluator); the store gives what the table does not
// hold (lease, registrar, report).

// served is one look at the status table DNS and xDS answer from:
// nil t when this node has none (before its first table), or when the
// API runs with no table at all (none is Config.Table's nil). Release it.
type served struct {
	t    *cstatus.Table
	none bool
	loc  cstatus.Locality // this node's place in t, for tiers
}

// acquire takes the current table.
func (s *Server) acquire() served {
	if s.cfg.Table == nil {
		return served{none: true}
	}
	t := s.cfg.Table.Acquire()
	if t == nil {
		return served{}
	}
	return served{t: t, loc: t.LocalityOf(s.cfg.Region, s.cfg.Zone)}
}

func (p served) release() {
	if p.t != nil {
		p.t.Release()
	}
}

// version and revision are the table's Version and StoreRevision, 0
// without a table.
func (p served) version() uint64 {
	if p.t == nil {
		return 0
	}
	return p.t.Version()
}

func (p served) revision() uint64 {
	if p.t == nil {
		return 0
	}
	return p.t.StoreRevision()
}

// lookup returns the table's entry for key (namespace/service/id) and its
// slot, whatever its incarnation; false when the table does not hold key.
func (p served) lookup(key string) (int, cstatus.Entry, bool) {
	if p.t == nil {
		return 0, cstatus.Entry{}, false
	}
	slot, ok := p.t.Directory().SlotOfKey(key)
	if !ok {
		return 0, cstatus.Entry{}, false
	}
	e, ok := p.t.Lookup(int(slot), cstatus.KeyHash(key))
	return int(slot), e, ok
}

// flags reports whether the table serves in (eligible) and whether only
// because health is disregarded; without a table, whether in is ready.
func (p served) flags(in wire.Instance) (eligible, disregarded bool) {
	if p.none {
		return in.Lifecycle == cstatus.Ready, false
	}
	_, e, ok := p.lookup(in.Key().String())
	if !ok || e.Incarnation != in.Incarnation {
		return false, false
	}
	return e.Flags.Has(cstatus.Eligible), e.Flags.Has(cstatus.HealthDisregarded)
}

// overlay sets what the table serves of in on e (made by endpointOf),
// with the evaluator's committed verdict beside it, and reports the slot
// it was read from (-1: the table does not hold this incarnation).
func (s *Server) overlay(p served, e *wire.Endpoint, in wire.Instance) int {
	if p.none {
		return -1
	}
	e.TableVersion, e.TableRevision = p.version(), p.revision()
	if c := in.Health; c != nil && c.Incarnation == in.Incarnation {
		e.Evaluator = &wire.EvaluatorVerdict{Verdict: c.Verdict, Eligible: c.Eligible, HealthEligible: c.HealthEligible,
			Reasons: slices.Clone(c.Reasons), Evidence: c.Evidence, At: c.At}
		if e.Evaluator.Reasons == nil {
			e.Evaluator.Reasons = []string{}
		}
	}
	slot, ent, ok := p.lookup(in.Key().String())
	if !ok || ent.Incarnation != in.Incarnation {
		// Not served: DNS and xDS have nothing of this incarnation.
		e.Verdict, e.Eligible, e.Weight, e.Flags = cstatus.Unknown, false, 0, []string{}
		e.Reasons = []string{notInTable(p, in, ok)}
		s.evidence(e, in)
		return -1
	}
	e.InTable = true
	e.Verdict = ent.Verdict
	e.Eligible = ent.Flags.Has(cstatus.Eligible)
	e.Weight = int(ent.Weight)
	e.Flags = ent.Flags.Names()
	tier := cstatus.TierOf(p.loc, ent)
	e.Tier = &tier
	evacuation(e, ent)
	switch c := in.Health; {
	case c != nil && c.Incarnation == in.Incarnation && c.Verdict == e.Verdict && c.Eligible == e.Eligible:
		e.Reasons = slices.Clone(c.Reasons)
		e.VerdictEvidence = c.Evidence
		e.VerdictAt = c.At
	case c != nil && c.Incarnation == in.Incarnation:
		// Committed, not yet in this node's table (it is rebuilt every
		// second): show what the table serves, and say so.
		e.Reasons = []string{fmt.Sprintf("verdict %s committed, not yet published by this node", c)}
	case in.Lifecycle == cstatus.Ready:
		e.Reasons = []string{"no health evidence evaluated yet"}
	}
	if e.Reasons == nil {
		e.Reasons = []string{}
	}
	if ent.Flags.Has(cstatus.SlowStart) {
		e.Reasons = append(e.Reasons, "slow start")
	}
	s.evidence(e, in)
	return slot
}

// evacuation sets what an evacuation of its zone does to the endpoint,
// as the table serves it.
func evacuation(e *wire.Endpoint, ent cstatus.Entry) {
	switch {
	case ent.Evacuated():
		e.Evacuation = "evacuated"
		share := 0.0
		e.Share = &share
	case ent.Returning():
		e.Evacuation = "returning"
		share := ent.Share()
		e.Share = &share
	}
}

// evidence sets the evidence the leader holds about in.
func (s *Server) evidence(e *wire.Endpoint, in wire.Instance) {
	if s.cfg.Health == nil {
		return
	}
	if ev, leading := s.cfg.Health.Evidence(in.Key().String(), in.Incarnation); leading {
		e.Evidence = ev
		if e.Evidence == nil {
			e.Evidence = []wire.ClassEvidence{}
		}
	}
}

// notInTable says why the table does not serve in.
func notInTable(p served, in wire.Instance, otherIncarnation bool) string {
	switch {
	case p.t == nil:
		return "this node has no status table yet: DNS and xDS serve nothing"
	case in.Lifecycle == cstatus.Terminated:
		return "deregistered"
	case otherIncarnation:
		return fmt.Sprintf("not in this node's status table (version %d) yet: it serves another incarnation; a registration is published at the next build", p.version())
	}
	return fmt.Sprintf("not in this node's status table (version %d) yet: a registration is published at the next build", p.version())
}

// tableOnly is a row for an entry the table serves and the store replica
// does not hold (a table kept on disk served before the replica caught
// up, an incarnation replaced moments ago): what DNS and xDS answer with.
//
// An instance of a region this node follows (peers) is that region's,
// served as its view says.
func tableOnly(p served, slot int, ent cstatus.Entry, restored bool, peers map[string]bool) wire.Endpoint {
	info := p.t.Directory().Instance(slot)
	e := wire.Endpoint{Incarnation: ent.Incarnation, Ports: map[string]int{}, Addresses: []string{},
		Region: p.t.Locality(ent.Region), Zone: p.t.Locality(ent.Zone), Lifecycle: ent.Lifecycle,
		Verdict: ent.Verdict, Eligible: ent.Flags.Has(cstatus.Eligible), Weight: int(ent.Weight),
		BaseWeight: int(ent.BaseWeight), Flags: ent.Flags.Names(), InTable: true,
		TableVersion: p.version(), TableRevision: p.revision()}
	if info != nil {
		e.InstanceID = info.ID
		for _, a := range info.Addrs {
			e.Addresses = append(e.Addresses, a.String())
		}
		for name, n := range info.Ports {
			e.Ports[name] = int(n)
		}
	}
	tier := cstatus.TierOf(p.loc, ent)
	e.Tier = &tier
	evacuation(&e, ent)
	why := "served from this node's status table; its store replica no longer holds this incarnation"
	switch {
	case peers[e.Region] && ent.Flags.Has(cstatus.PeerStale):
		why = "region " + e.Region + "'s, as this node's view of that region last said; the view is older than stale-after"
	case peers[e.Region]:
		why = "region " + e.Region + "'s, as its view says: that region probes and judges it, not this one"
	case restored:
		why = "served from the status table kept on disk: this node's store replica has not caught up yet"
	}
	e.Reasons = []string{why}
	if ent.Flags.Has(cstatus.SlowStart) {
		e.Reasons = append(e.Reasons, "slow start")
	}
	return e
}

// view is a service's view as this node serves it: the store's instances
// (terminated ones too with all), each with what one status table
// serves of it, and the table's entries of the service the store does
// not hold, unless storeOnly: a consistent read answers for the store,
// and a table's row of an older incarnation (or of a replica that has
// not caught up) would put beside the linearizable one an instance the
// store no longer holds.
func (s *Server) view(ns, svc string, all, storeOnly bool) wire.View {
	now := s.cfg.Now()
	p := s.acquire()
	defer p.release()
	v := wire.View{Revision: s.cfg.Store.Revision(), Freshness: s.freshness(now), Endpoints: []wire.Endpoint{},
		TableVersion: p.version(), TableRevision: p.revision()}
	seen := map[int]bool{}
	for _, in := range s.cfg.Store.Instances(ns, svc) {
		if in.Lifecycle == cstatus.Terminated && !all {
			continue
		}
		e := endpointOf(in, now, s.cfg.Store.LeaseExpiry(in))
		if slot := s.overlay(p, &e, in); slot >= 0 {
			seen[slot] = true
		}
		v.HealthDisregarded = v.HealthDisregarded || slices.Contains(e.Flags, "health_disregarded")
		v.Endpoints = append(v.Endpoints, e)
	}
	for _, ev := range s.cfg.Store.Evacuations() {
		if slices.ContainsFunc(v.Endpoints, func(e wire.Endpoint) bool {
			return e.Lifecycle != cstatus.Terminated && ev.Covers(ns, svc, e.Region, e.Zone)
		}) {
			v.Evacuations = append(v.Evacuations, evacuationView(ev, now))
		}
	}
	if p.t == nil || storeOnly {
		return v
	}
	if id, ok := p.t.Directory().ServiceID(strings.ToLower(svc + "." + ns)); ok {
		restored := s.cfg.Publish != nil && s.cfg.Publish.Restored()
		peers := s.peerRegions()
		for _, slot := range p.t.Members(id) {
			if seen[int(slot)] {
				continue
			}
			e := tableOnly(p, int(slot), p.t.Entry(int(slot)), restored, peers)
			if e.Lifecycle == cstatus.Terminated && !all {
				continue
			}
			v.HealthDisregarded = v.HealthDisregarded || slices.Contains(e.Flags, "health_disregarded")
			v.Endpoints = append(v.Endpoints, e)
		}
	}
	return v
}

// freshness is this node's wire.Freshness at now: the rule of its DNS
// answers (dnsserver's serve-stale), so that a page and a dig agree.
// Without a publisher, the store's last contact stands for the table.
func (s *Server) freshness(now time.Time) wire.Freshness {
	var last time.Time
	restored := false
	if s.cfg.Publish != nil {
		last, restored = s.cfg.Publish.Synced(), s.cfg.Publish.Restored()
	} else {
		last = s.cfg.Store.LastContact()
	}
	if last.IsZero() {
		last = s.started // never synced since it started: stale since then
	}
	age := max(now.Sub(last), 0)
	return wire.Freshness{Stale: restored || age > s.cfg.StaleAfter, AgeSeconds: age.Seconds()}
}
