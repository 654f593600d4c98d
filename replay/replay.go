// Package replay answers "what was a caller told, and why": for a
// service, a time or a store revision (or an xDS version) and a place, it
// takes the table the node published then from its history, and runs
// the DNS and xDS servers' own answer code on it (dnsserver's Replay,
// xdsserver's Assignment), beside each endpoint's state, the audit
// trail's transition that put it there, and what changed around it
// (GET /v1/services/{ns}/{svc}/view, `cairn replay`).
//
// It answers for the node it runs on: each node publishes its own table
// from its own replica and evidence, and its history is of that table.
//
// Imports: the history, the two servers' answer code, the wire types;
// never the store or the health loop, whose audit trail comes in through
// Config.Events.
package replay

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/miekg/dns"

	"github.com/cairn-sd/cairn/dnsserver"
	"github.com/cairn-sd/cairn/history"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
	"github.com/cairn-sd/cairn/xdsserver"
)

// Config configures a Replayer.
type Config struct {
	// History is this node's history of published tables. Required.
	History *history.History
	// DNS is this node's DNS server: its zone, limits and serve-stale
	// rule answer the replayed queries. Required.
	DNS *dnsserver.Server
	// Events returns the audit trail's events of a service, oldest first
	// (the store's). nil: none.
	Events func(ns, svc string) []wire.Event
	// Region and Zone are this node's place: a caller's when the query
	// names none.
	Region, Zone string
}

// Replayer replays views. It is safe for concurrent use.
type Replayer struct{ cfg Config }

// New returns a Replayer.
func New(cfg Config) (*Replayer, error) {
	if cfg.History == nil || cfg.DNS == nil {
		return nil, errors.New("replay: History and DNS are required")
	}
	return &Replayer{cfg: cfg}, nil
}

// Before is how far back a replay's changes and events go: "what
// changed in the minute before"; Window is an instance timeline's span
// either side.
const (
	Before = time.Minute
	Window = 5 * time.Minute
)

// Replay replays q.
func (r *Replayer) Replay(q wire.ReplayQuery) (*wire.Replay, error) {
	if q.Region == "" && q.Zone == "" {
		q.Region, q.Zone = r.cfg.Region, r.cfg.Zone
	}
	p, candidates, matched, err := r.point(q)
	if err != nil {
		return nil, err
	}
	at := q.At
	if q.Revision != 0 {
		at = p.At
	}
	pub, err := p.Table(q.Region, q.Zone)
	if err != nil {
		return nil, err
	}
	t := pub.Acquire()
	defer t.Release()
	loc := t.LocalityOf(q.Region, q.Zone)
	out := &wire.Replay{Namespace: q.Namespace, Service: q.Service, At: at, Region: q.Region, Zone: q.Zone,
		TableVersion: p.Version, TableRevision: p.Revision, TableBuilt: p.At, Freshness: p.Freshness.String(),
		SyncedAt: p.Synced, HistorySince: p.Since, Candidates: candidates, Matched: matched,
		Endpoints: []wire.ReplayEndpoint{}, DNS: []wire.ReplayDNS{}, XDS: []wire.ReplayXDS{}, Changes: []wire.ReplayChange{}, Events: []wire.Event{}}
	var events []wire.Event
	if r.cfg.Events != nil {
		events = r.cfg.Events(q.Namespace, q.Service)
	}
	for i, slot := range t.Members(1) {
		e := t.Entry(int(slot))
		ep := endpoint(p.Members[i], e, loc)
		transition(&ep, events, at)
		out.HealthDisregarded = out.HealthDisregarded || e.Flags.Has(status.HealthDisregarded)
		out.Endpoints = append(out.Endpoints, ep)
	}
	if out.DNS, err = r.dns(p, pub, at, q); err != nil {
		return nil, err
	}
	if out.XDS, err = xds(p, t, loc); err != nil {
		return nil, err
	}
	from, to := at.Add(-Before), at
	if q.Instance != "" {
		from, to = at.Add(-Window), at.Add(Window)
	}
	changes, err := r.cfg.History.Changes(q.Namespace, q.Service, from, to)
	if err != nil {
		return nil, err
	}
	for _, c := range changes {
		rc := change(c)
		if q.Instance == "" || rc.InstanceID == q.Instance {
			out.Changes = append(out.Changes, rc)
		}
	}
	for _, ev := range events {
		if ev.At.After(from) && !ev.At.After(to) && (q.Instance == "" || ev.Instance == q.Instance) {
			out.Events = append(out.Events, ev)
		}
	}
	return out, nil
}

// point finds the state to replay: at q.At, or of q.Revision's states
// the one whose content has q.Digest (the last when none has, or none
// is given), with their number and whether the digest matched.
func (r *Replayer) point(q wire.ReplayQuery) (*history.Point, int, *bool, error) {
	h := r.cfg.History
	if q.Revision == 0 {
		p, err := h.At(q.Namespace, q.Service, q.At)
		return p, 0, nil, err
	}
	ps, err := h.AtRevision(q.Namespace, q.Service, q.Revision)
	if err != nil {
		return nil, 0, nil, err
	}
	if q.Digest == "" {
		return ps[len(ps)-1], len(ps), nil, nil
	}
	for i := len(ps) - 1; i >= 0; i-- {
		ok, err := holdsDigest(ps[i], q)
		if err != nil {
			return nil, 0, nil, err
		}
		if ok {
			return ps[i], len(ps), &ok, nil
		}
	}
	no := false
	return ps[len(ps)-1], len(ps), &no, nil
}

// holdsDigest reports whether one of p's assignments, for a caller at
// q's place, has q.Digest.
func holdsDigest(p *history.Point, q wire.ReplayQuery) (bool, error) {
	pub, err := p.Table(q.Region, q.Zone)
	if err != nil {
		return false, err
	}
	t := pub.Acquire()
	defer t.Release()
	loc := t.LocalityOf(q.Region, q.Zone)
	for _, port := range p.Info.Ports {
		_, digest, err := xdsserver.Assignment(t, 1, port.Name, loc)
		if err != nil {
			return false, err
		}
		if digest == q.Digest {
			return true, nil
		}
	}
	return false, nil
}

// endpoint is a member as the replayed table held it (e, its entry
// there), at its tier for a caller at loc.
func endpoint(m history.Member, e status.Entry, loc status.Locality) wire.ReplayEndpoint {
	ep := wire.ReplayEndpoint{Incarnation: e.Incarnation, Addresses: []string{}, Ports: map[string]int{},
		Region: m.Region, Zone: m.Zone, Lifecycle: e.Lifecycle, Verdict: e.Verdict, Eligible: e.Flags.Has(status.Eligible),
		Weight: int(e.Weight), BaseWeight: int(e.BaseWeight), Flags: e.Flags.Names(), Tier: status.TierOf(loc, e)}
	if in := m.Instance; in != nil {
		ep.InstanceID = in.ID
		for _, a := range in.Addrs {
			ep.Addresses = append(ep.Addresses, a.String())
		}
		for name, n := range in.Ports {
			ep.Ports[name] = int(n)
		}
	}
	return ep
}

// transition sets the trail's last event about the endpoint's
// incarnation at or before at, and the age of its evidence then.
func transition(ep *wire.ReplayEndpoint, events []wire.Event, at time.Time) {
	for i := len(events) - 1; i >= 0; i-- {
		ev := events[i]
		if ev.At.After(at) || ev.Instance != ep.InstanceID || ev.Incarnation != ep.Incarnation {
			continue
		}
		ep.Transition = &ev
		if ev.Evidence != nil && !ev.Evidence.At.IsZero() {
			age := at.Sub(ev.Evidence.At).Seconds()
			ep.EvidenceAgeSeconds = &age
		}
		return
	}
	ep.Reason = "the audit trail holds no transition of this incarnation by then (none yet, or let go)"
}

// dns replays the service's A and AAAA queries and each port's SRV.
func (r *Replayer) dns(p *history.Point, pub *status.Publisher, at time.Time, q wire.ReplayQuery) ([]wire.ReplayDNS, error) {
	past := dnsserver.Past{Table: pub, At: at, Place: dnsserver.Place{Region: q.Region, Zone: q.Zone}}
	switch p.Freshness {
	case history.Fresh:
		past.LastSync = at
	case history.Restored:
		past.LastSync, past.Restored = p.Synced, true
	default:
		past.LastSync = p.Synced
	}
	host := p.Service + "." + p.Namespace + ".svc." + r.cfg.DNS.Domain()
	type ask struct {
		name  string
		qtype uint16
	}
	asks := []ask{{host, dns.TypeA}, {host, dns.TypeAAAA}}
	for _, port := range p.Info.Ports {
		asks = append(asks, ask{"_" + port.Name + "._" + port.Protocol + "." + host, dns.TypeSRV})
	}
	out := make([]wire.ReplayDNS, 0, len(asks))
	for _, a := range asks {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(a.name), a.qtype)
		m.SetEdns0(1232, false)
		resp, err := r.cfg.DNS.Replay(m, past)
		if err != nil {
			return nil, err
		}
		d := wire.ReplayDNS{Name: dns.Fqdn(a.name), Type: dns.TypeToString[a.qtype], Rcode: dns.RcodeToString[resp.Rcode],
			Answer: records(resp.Answer)}
		if extra := records(resp.Extra); len(extra) > 0 {
			d.Additional = extra
		}
		if o := resp.IsEdns0(); o != nil {
			for _, op := range o.Option {
				if e, ok := op.(*dns.EDNS0_EDE); ok {
					d.EDE = append(d.EDE, strconv.Itoa(int(e.InfoCode))+": "+e.ExtraText)
				}
			}
		}
		if a.qtype != dns.TypeSRV && p.Info.ARecordLimit > 0 && len(resp.Answer) >= p.Info.ARecordLimit {
			d.Sampled = true
		}
		out = append(out, d)
	}
	return out, nil
}

// records are rrs in presentation form, without the OPT record.
func records(rrs []dns.RR) []string {
	out := []string{}
	for _, rr := range rrs {
		if rr.Header().Rrtype == dns.TypeOPT {
			continue
		}
		out = append(out, strings.ReplaceAll(rr.String(), "\t", " "))
	}
	return out
}

// xds replays each port's assignment for a subscriber at loc.
func xds(p *history.Point, t *status.Table, loc status.Locality) ([]wire.ReplayXDS, error) {
	out := make([]wire.ReplayXDS, 0, len(p.Info.Ports))
	for _, port := range p.Info.Ports {
		cla, digest, err := xdsserver.Assignment(t, 1, port.Name, loc)
		if err != nil {
			return nil, err
		}
		x := wire.ReplayXDS{Cluster: cla.ClusterName, Version: xdsserver.FormatVersion(p.Revision, digest),
			Endpoints: []wire.ReplayXDSEndpoint{}}
		for _, l := range cla.Endpoints {
			for _, lb := range l.LbEndpoints {
				sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
				x.Endpoints = append(x.Endpoints, wire.ReplayXDSEndpoint{
					Address: net.JoinHostPort(sa.GetAddress(), strconv.FormatUint(uint64(sa.GetPortValue()), 10)),
					Region:  l.GetLocality().GetRegion(), Zone: l.GetLocality().GetZone(), Priority: int(l.Priority),
					Weight: int(lb.GetLoadBalancingWeight().GetValue()), Health: healthName(lb.HealthStatus)})
			}
		}
		out = append(out, x)
	}
	return out, nil
}

func healthName(h corev3.HealthStatus) string { return strings.ToLower(h.String()) }

// change is a history change as the API shows it.
func change(c history.Change) wire.ReplayChange {
	rc := wire.ReplayChange{At: c.At, TableVersion: c.Version, TableRevision: c.Revision}
	for _, side := range []struct {
		m   history.Member
		dst **wire.ReplayEndpoint
	}{{c.Before, &rc.Before}, {c.After, &rc.After}} {
		if !side.m.Entry.Used() {
			continue
		}
		ep := endpoint(side.m, side.m.Entry, status.Locality{})
		*side.dst = &ep
		if rc.InstanceID == "" {
			rc.InstanceID = ep.InstanceID
		}
	}
	return rc
}
