package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/internal/acl"
	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// endpointOf shows an instance from the store alone: the view of a node
// that runs no evaluator (tests of the API on its own). A ready instance
// counts as eligible and its verdict is unknown.
func endpointOf(in wire.Instance, now, leaseExpiry time.Time) wire.Endpoint {
	e := wire.Endpoint{
		InstanceID: in.ID, Incarnation: in.Incarnation, Addresses: in.Addresses, Ports: in.Ports,
		Region: in.Region, Zone: in.Zone, Lifecycle: in.Lifecycle, Verdict: cstatus.Unknown,
		BaseWeight: in.Weight, LeaseDeadline: in.LeaseDeadline, LeaseExpiry: leaseExpiry, LeaseTTL: in.LeaseTTL,
		LeaseExpired: !now.Before(leaseExpiry), Registrar: in.Registrar, RegistrationID: in.RegistrationID, Source: in.Source, Report: in.Report,
		Reasons: []string{}, Flags: []string{},
	}
	e.Eligible = in.Lifecycle == cstatus.Ready
	if e.Eligible {
		e.Weight = in.Weight
	}
	switch in.Lifecycle {
	case cstatus.Ready:
		e.Reasons = append(e.Reasons, "no health evidence evaluated yet")
	case cstatus.Starting:
		e.Reasons = append(e.Reasons, "starting")
	case cstatus.Draining:
		e.Reasons = append(e.Reasons, "draining")
	case cstatus.Terminated:
		e.Reasons = append(e.Reasons, "deregistered")
	}
	if e.LeaseExpired && in.Lifecycle != cstatus.Terminated {
		e.Reasons = append(e.Reasons, "lease expired")
	}
	return e
}

func (s *Server) listServices(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	l, err := s.serviceList(r.Context())
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, l.body(id), nil
}

// summaries is every service's summary, in the store's order, counted
// in one pass over every instance rather than one scan per service.
func (s *Server) summaries() []wire.ServiceSummary {
	type count struct {
		instances, eligible int
		disregarded         bool
		zones               map[string]*wire.ZoneCount
	}
	counts := map[wire.ServiceKey]*count{}
	p := s.acquire()
	defer p.release()
	for _, in := range s.cfg.Store.AllInstances() {
		if in.Lifecycle == cstatus.Terminated {
			continue
		}
		k := in.Key().ServiceKey()
		c := counts[k]
		if c == nil {
			c = &count{zones: map[string]*wire.ZoneCount{}}
			counts[k] = c
		}
		z := c.zones[in.Zone]
		if z == nil {
			z = &wire.ZoneCount{Zone: in.Zone}
			c.zones[in.Zone] = z
		}
		c.instances++
		z.Instances++
		elig, dis := p.flags(in)
		if elig {
			c.eligible++
			z.Eligible++
		}
		c.disregarded = c.disregarded || dis
	}
	out := []wire.ServiceSummary{}
	for _, svc := range s.cfg.Store.Services() {
		sum := wire.ServiceSummary{Namespace: svc.Namespace, Name: svc.Name, Ports: len(svc.Ports),
			Revision: svc.Revision, Zones: []wire.ZoneCount{}}
		if c := counts[svc.Key()]; c != nil {
			sum.Instances, sum.Eligible, sum.HealthDisregarded = c.instances, c.eligible, c.disregarded
			for _, z := range c.zones {
				sum.Zones = append(sum.Zones, *z)
			}
			slices.SortFunc(sum.Zones, func(a, b wire.ZoneCount) int { return strings.Compare(a.Zone, b.Zone) })
		}
		out = append(out, sum)
	}
	return out
}

// service returns the named service if id may read it.
func (s *Server) service(r *http.Request, id acl.Identity) (wire.Service, error) {
	ns, name, err := pathService(r)
	if err != nil {
		return wire.Service{}, err
	}
	if !id.Allows(acl.Read, ns, name, "") {
		return wire.Service{}, fmt.Errorf("%s token may not read %s/%s: %w", id.Scope, ns, name, acl.ErrDenied)
	}
	svc, ok := s.cfg.Store.Service(ns, name)
	if !ok {
		return wire.Service{}, fmt.Errorf("service %s/%s: %w", ns, name, store.ErrNotFound)
	}
	return svc, nil
}

func (s *Server) getService(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	svc, err := s.service(r, id)
	if err != nil {
		return 0, nil, err
	}
	d := wire.ServiceDetail{Definition: svc, View: s.view(svc.Namespace, svc.Name, false, consistent(r))}
	if b, ok := s.cfg.Store.Budget(svc.Namespace, svc.Name); ok {
		d.Budget = &b
	}
	return http.StatusOK, d, nil
}

func (s *Server) endpoints(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	svc, err := s.service(r, id)
	if err != nil {
		return 0, nil, err
	}
	all := r.URL.Query().Get("all") == "true"
	return http.StatusOK, s.view(svc.Namespace, svc.Name, all, consistent(r)).Endpoints, nil
}

// consistent reports whether r asks for a linearizable read, which lists
// the store's instances only (see view).
func consistent(r *http.Request) bool { return r.URL.Query().Get("consistent") == "true" }

// subscribers is which revision of the service's assignments this
// server's xDS subscribers hold: who is behind.
func (s *Server) subscribers(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	svc, err := s.service(r, id)
	if err != nil {
		return 0, nil, err
	}
	if s.cfg.XDSSubscribers == nil {
		return http.StatusOK, wire.XDSSubscribers{Revisions: []wire.XDSRevision{}}, nil
	}
	return http.StatusOK, s.cfg.XDSSubscribers(svc.Namespace, svc.Name), nil
}

func (s *Server) events(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	svc, err := s.service(r, id)
	if err != nil {
		return 0, nil, err
	}
	limit := 100
	if l := r.URL.Query().Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > store.AuditCapacity {
			return 0, nil, badRequest("limit", "%q must be a number from 1 to %d", l, store.AuditCapacity)
		}
		limit = n
	}
	ev := s.cfg.Store.Events(svc.Namespace, svc.Name, limit)
	if ev == nil {
		ev = []wire.Event{}
	}
	return http.StatusOK, ev, nil
}

// apply takes service definitions as YAML (application/yaml, one service
// per document) or JSON (an array of definitions, or one definition).
func (s *Server) apply(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return 0, nil, err
	}
	text := strings.TrimSpace(string(body))
	if strings.HasPrefix(text, "[") {
		// A JSON array is not a YAML stream of documents: unwrap it.
		var docs []json.RawMessage
		if err := json.Unmarshal([]byte(text), &docs); err != nil {
			return 0, nil, badRequest("body", "malformed JSON array: %v", err)
		}
		parts := make([]string, len(docs))
		for i, d := range docs {
			parts[i] = string(d)
		}
		text = "---\n" + strings.Join(parts, "\n---\n")
	}
	svcs, err := wire.ParseServices(strings.NewReader(text))
	if err != nil {
		return 0, nil, err
	}
	for _, svc := range svcs {
		if !id.Allows(acl.Apply, svc.Namespace, svc.Name, "") {
			return 0, nil, s.deny(r, id, "apply the definition of", wire.InstanceKey{Namespace: svc.Namespace, Service: svc.Name})
		}
	}
	rev, err := s.cfg.Store.ApplyServices(r.Context(), id.Name, svcs)
	if err != nil {
		return 0, nil, err
	}
	keys := make([]string, len(svcs))
	for i, svc := range svcs {
		keys[i] = svc.Key().String()
	}
	return http.StatusOK, map[string]any{"revision": rev, "services": keys}, nil
}

// pathService returns the {ns} and {svc} of the path, checked as labels.
func pathService(r *http.Request) (string, string, error) {
	ns, svc := r.PathValue("ns"), r.PathValue("svc")
	if err := wire.CheckLabel("namespace", ns); err != nil {
		return "", "", err
	}
	if err := wire.CheckLabel("service", svc); err != nil {
		return "", "", err
	}
	return ns, svc, nil
}

// registration returns the store's registration q asks for: explicit
// values out of range, 0 included, are refused here.
func registration(q wire.RegisterRequest) (wire.Registration, error) {
	reg := q.Registration
	if q.Weight != nil {
		if w := *q.Weight; w < 1 || w > 65535 {
			return reg, badRequest("weight", "%d is out of range 1-65535", w)
		}
		reg.Weight = *q.Weight
	}
	if q.LeaseTTL != nil {
		if d := *q.LeaseTTL; d.D() < wire.MinLeaseTTL || d.D() > wire.MaxLeaseTTL {
			return reg, badRequest("lease_ttl", "%s is out of range %s-%s", d, wire.MinLeaseTTL, wire.MaxLeaseTTL)
		}
		reg.LeaseTTL = *q.LeaseTTL
	}
	return reg, nil
}

func (s *Server) register(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	ns, svc, err := pathService(r)
	if err != nil {
		return 0, nil, err
	}
	var req wire.RegisterRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if err := wire.CheckLabel("instance_id", req.ID); err != nil {
		return 0, nil, err
	}
	if !id.Allows(acl.Register, ns, svc, req.ID) {
		return 0, nil, s.deny(r, id, "register", wire.InstanceKey{Namespace: ns, Service: svc, ID: req.ID})
	}
	reg, err := registration(req)
	if err != nil {
		return 0, nil, err
	}
	reg.Namespace, reg.Service = ns, svc
	for i, a := range reg.Addresses {
		ip, err := s.cfg.Addrs.Check(ns, a)
		if err != nil {
			return 0, nil, fmt.Errorf("addresses[%d]: %w", i, asInvalid(err))
		}
		reg.Addresses[i] = ip.String()
	}
	in, created, err := s.cfg.Store.Register(r.Context(), id.Name, reg)
	if err != nil {
		return 0, nil, err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	return code, wire.Registered{Instance: in, Created: created}, nil
}

// asInvalid leaves a policy refusal as it is and makes a parse error
// invalid input.
func asInvalid(err error) error {
	if _, c := status(err); c == wire.CodeForbiddenAddress {
		return err
	}
	return fmt.Errorf("%v: %w", err, errBadRequest)
}

func (s *Server) mutate(act acl.Action) handler {
	verb := map[acl.Action]string{acl.Renew: "renew", acl.Drain: "drain", acl.Deregister: "deregister", acl.Report: "report about"}[act]
	return func(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
		ns, svc, err := pathService(r)
		if err != nil {
			return 0, nil, err
		}
		key := wire.InstanceKey{Namespace: ns, Service: svc, ID: r.PathValue("id")}
		if err := wire.CheckLabel("instance_id", key.ID); err != nil {
			return 0, nil, err
		}
		// Scope first: a caller out of scope learns nothing from
		// validation errors.
		if !id.Allows(act, key.Namespace, key.Service, key.ID) {
			return 0, nil, s.deny(r, id, verb, key)
		}
		var req wire.MutateRequest
		if err := decode(r, &req); err != nil {
			return 0, nil, err
		}
		if req.Incarnation == 0 {
			return 0, nil, badRequest("incarnation", "is required: every mutation of an instance carries its incarnation")
		}
		if act != acl.Report && (req.Ready != nil || req.Dependencies != nil) {
			return 0, nil, badRequest("ready", "only a report carries readiness and dependencies")
		}
		if req.Force && act != acl.Drain && act != acl.Deregister {
			return 0, nil, badRequest("force", "only a drain or a deregistration may be forced past the disruption budget")
		}
		var in wire.Instance
		ctx := r.Context()
		switch act {
		case acl.Renew:
			in, err = s.cfg.Store.Renew(ctx, key, req.Incarnation)
		case acl.Drain, acl.Deregister:
			in, err = s.disrupt(ctx, act, id, key, req)
			if errors.Is(err, store.ErrBudget) {
				s.log.Warn("refused", "identity", id.Name, "action", verb, "target", key.String(), "err", err)
				s.auditRefusal(r, id, key, userMessage(err))
			}
			if err != nil {
				return 0, nil, err
			}
			// Answer only once this node no longer serves it (SPEC §2).
			rev := s.cfg.Store.Revision()
			if err := s.waitPublished(ctx, rev); err != nil {
				return 0, nil, err
			}
			w.Header().Set(publishedHeader, strconv.FormatUint(rev, 10))
		case acl.Report:
			if req.Ready == nil {
				return 0, nil, badRequest("ready", "is required in a report")
			}
			in, err = s.cfg.Store.Report(ctx, id.Name, key, req.Incarnation, wire.Report{Ready: *req.Ready, Dependencies: req.Dependencies})
		}
		if err != nil {
			return 0, nil, err
		}
		return http.StatusOK, in, nil
	}
}

// disrupt drains or deregisters key, past the disruption budget when
// req says force. An instance draining itself is not judged against the
// budget (it counts, as an involuntary loss does): a process on its way
// out leaves whatever the answer, and refusing its drain would only make
// it leave undrained (docs/decisions.md).
func (s *Server) disrupt(ctx context.Context, act acl.Action, id acl.Identity, key wire.InstanceKey, req wire.MutateRequest) (wire.Instance, error) {
	actor := id.Name
	switch {
	case act == acl.Drain && id.Scope == acl.Instance:
		return s.cfg.Store.DrainSelf(ctx, actor, key, req.Incarnation)
	case act == acl.Drain && req.Force:
		return s.cfg.Store.ForceDrain(ctx, actor, key, req.Incarnation)
	case act == acl.Drain:
		return s.cfg.Store.Drain(ctx, actor, key, req.Incarnation)
	case req.Force:
		return s.cfg.Store.ForceDeregister(ctx, actor, key, req.Incarnation)
	}
	return s.cfg.Store.Deregister(ctx, actor, key, req.Incarnation)
}

func (s *Server) status(w http.ResponseWriter, r *http.Request, _ acl.Identity) (int, any, error) {
	lid, _ := s.cfg.Store.Leader()
	st := wire.Status{NodeID: s.cfg.Store.NodeID(), State: s.cfg.Store.State(), LeaderID: lid,
		Revision: s.cfg.Store.Revision(), CaughtUp: s.cfg.Store.CaughtUp(), LastContact: s.cfg.Store.LastContact().UTC(),
		Freshness: s.freshness(s.cfg.Now()), GRPCAddr: s.cfg.GRPCAddr}
	p := s.acquire()
	st.TableVersion, st.TableRevision = p.version(), p.revision()
	p.release()
	if s.cfg.XDSSummary != nil {
		x := s.xdsSummary()
		st.XDS = &x
	}
	if s.cfg.TLS != nil {
		c := s.cfg.TLS.State()
		st.TLS = &wire.TLSState{CertNotAfter: c.CertNotAfter.UTC(), CANotAfter: c.CANotAfter.UTC(),
			RotateSoon: c.RotateSoon, ReloadFailing: c.ReloadFailing}
	}
	return http.StatusOK, st, nil
}

// xdsSummaryEvery is how old the xds summary of GET /v1/status may be.
const xdsSummaryEvery = time.Second

// xdsSummary is Config.XDSSummary, taken at most once per xdsSummaryEvery:
// it walks every open xDS stream, and every open dashboard polls
// GET /v1/status once a second.
func (s *Server) xdsSummary() wire.XDSSummary {
	s.xdsMu.Lock()
	defer s.xdsMu.Unlock()
	now := s.cfg.Now()
	if s.xdsAt.IsZero() || now.Sub(s.xdsAt) >= xdsSummaryEvery || now.Before(s.xdsAt) {
		s.xdsSum, s.xdsAt = s.cfg.XDSSummary(), now
	}
	return s.xdsSum
}

func (s *Server) members(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	if !id.Allows(acl.ReadCluster, "", "", "") {
		return 0, nil, fmt.Errorf("%s token may not list members: %w", id.Scope, acl.ErrDenied)
	}
	ms, err := s.cfg.Store.Members()
	if err != nil {
		return 0, nil, err
	}
	if ms == nil {
		ms = []wire.Member{}
	}
	return http.StatusOK, ms, nil
}

func (s *Server) join(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	if !id.Allows(acl.ManageCluster, "", "", "") {
		return 0, nil, fmt.Errorf("%s token may not change membership: %w", id.Scope, acl.ErrDenied)
	}
	var m wire.Member
	if err := decode(r, &m); err != nil {
		return 0, nil, err
	}
	if err := s.cfg.Store.Join(r.Context(), id.Name, m); err != nil {
		return 0, nil, err
	}
	s.log.Info("member joined", "node_id", m.NodeID, "raft_addr", m.RaftAddr, "http_addr", m.HTTPAddr)
	return http.StatusOK, m, nil
}

func (s *Server) leave(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	if !id.Allows(acl.ManageCluster, "", "", "") {
		return 0, nil, fmt.Errorf("%s token may not change membership: %w", id.Scope, acl.ErrDenied)
	}
	nodeID := r.PathValue("id")
	if err := s.cfg.Store.Leave(r.Context(), id.Name, nodeID); err != nil {
		return 0, nil, err
	}
	s.log.Info("member left", "node_id", nodeID)
	return http.StatusOK, map[string]string{"node_id": nodeID}, nil
}
