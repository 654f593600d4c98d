package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strings"

	"github.com/cairn-sd/cairn/internal/acl"
	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// failover fails this region's callers over to another region (POST
// /v1/regions/failover), or ends a failover with "undo": true. It is an
// evacuation of the whole region (store.Evacuate with To): the region's
// own instances go last for every caller, and come back over their
// services' shift_back once it ends. Starting one is checked against the
// other region's capacity, as this node's table holds it (its view of
// that region), and refused, audited, when short unless forced.
func (s *Server) failover(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	var req wire.FailoverRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	key := wire.InstanceKey{Namespace: req.Namespace, Service: req.Service}
	if !id.Allows(acl.Evacuate, req.Namespace, req.Service, "") {
		what := "fail over the callers of"
		if req.Service == "" {
			what = "fail over a region's callers of every service; only an admin may, in"
		}
		return 0, nil, s.deny(r, id, what, key)
	}
	if err := req.Validate(); err != nil {
		return 0, nil, err
	}
	if req.From != s.cfg.Region {
		return 0, nil, &wire.FieldError{Field: "from", Rule: fmt.Sprintf("is region %q, and this server is in region %q: a region fails over its own callers (ask a server of %q, or use its --failover-signal)",
			req.From, s.cfg.Region, req.From)}
	}
	if !s.peerRegions()[req.To] {
		return 0, nil, &wire.FieldError{Field: "to", Rule: fmt.Sprintf("region %q is not one this server follows (--peer-region): its callers would have nothing to fail over to", req.To)}
	}
	ev := req.Evacuation()
	if !req.Undo {
		note, short, checked := s.failoverCapacity(req)
		switch {
		case short != "" && !req.Force:
			err := fmt.Errorf("failing region %s over to %s refused: %s; --force overrides: %w", req.From, req.To, short, store.ErrCapacity)
			s.auditRefusal(r, id, key, userMessage(err))
			return 0, nil, err
		case short != "":
			note = "forced past the capacity check: " + short
		case checked > 0:
			ev.Force = false // nothing to force past: not recorded as forced
		}
		if len(note) > 256 {
			note = note[:253] + "..."
		}
		ev.Capacity = note
	}
	e, err := s.cfg.Store.Evacuate(r.Context(), id.Name, ev)
	if err != nil {
		if errors.Is(err, store.ErrCapacity) {
			s.auditRefusal(r, id, key, userMessage(err))
		}
		return 0, nil, err
	}
	s.log.Info("failover", "scope", e.Scope(), "state", e.State(), "actor", id.Name, "forced", e.Forced, "capacity", e.Capacity)
	code := http.StatusCreated
	if req.Undo {
		code = http.StatusOK
	}
	return code, evacuationView(e, s.cfg.Now()), nil
}

// failoverCapacity checks, from this node's table, that region req.To
// can carry the callers of req.From for each service in scope that has
// ready instances in req.From: To's ready instances in rotation on their
// own health (not draining, not served only under the guard) must be at
// least
// max(1, ⌈min_healthy_fraction × From's ready instances⌉), the rule an
// evacuation is checked by, and the view of To they come from must be
// fresh. It returns what it found (note) and, when short, why (short),
// and how many services it checked.
func (s *Server) failoverCapacity(req wire.FailoverRequest) (note, short string, checked int) {
	p := s.acquire()
	defer p.release()
	if p.t == nil {
		return "", "this server has no status table yet", 0
	}
	t, d := p.t, p.t.Directory()
	from, to := t.LocalityOf(req.From, "").Region, t.LocalityOf(req.To, "").Region
	var shorts []string
	stale, least, leastAt := false, math.MaxInt, ""
	for id := range uint32(t.Services().Len()) {
		svc, ok := d.Service(id)
		if !ok || svc.Name == "" || req.Service != "" && (svc.Namespace != req.Namespace || svc.Name != req.Service) {
			continue
		}
		ready, have := 0, 0
		for _, slot := range t.Members(id) {
			e := t.Entry(int(slot))
			switch {
			case from != 0 && e.Region == from && e.Lifecycle == cstatus.Ready:
				ready++
			case to != 0 && e.Region == to:
				stale = stale || e.Flags.Has(cstatus.PeerStale)
				if e.Lifecycle == cstatus.Ready && e.Flags.Has(cstatus.Eligible) && !e.Flags.Has(cstatus.HealthDisregarded) {
					have++
				}
			}
		}
		if ready == 0 {
			continue // nothing of this region's to move
		}
		checked++
		need := wire.CapacityNeeded(svc.MinHealthyFraction, ready)
		name := svc.Namespace + "/" + svc.Name
		if have < need {
			shorts = append(shorts, fmt.Sprintf("%s: region %s has %d eligible instance(s) and needs %d (min_healthy_fraction %g of region %s's %d ready)",
				name, req.To, have, need, svc.MinHealthyFraction, req.From, ready))
		}
		if have-need < least {
			least, leastAt = have-need, fmt.Sprintf("%s: %d eligible for %d needed", name, have, need)
		}
	}
	if stale {
		shorts = append([]string{fmt.Sprintf("this server's view of region %s is older than stale-after: its capacity now is not known", req.To)}, shorts...)
	}
	if len(shorts) > 0 {
		if len(shorts) > 3 {
			shorts = append(shorts[:3], fmt.Sprintf("and %d more", len(shorts)-3))
		}
		return "", strings.Join(shorts, "; "), checked
	}
	if checked == 0 {
		return fmt.Sprintf("capacity: no service in scope has ready instances in region %s", req.From), "", 0
	}
	return fmt.Sprintf("capacity: region %s can carry %d service(s); the least margin is %s", req.To, checked, leastAt), "", checked
}
