package api

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// evacuate starts an evacuation (POST /v1/evacuations), or ends one
// with "undo": true. A refusal for want of capacity or of disruption
// budget is recorded in the audit trail, as a forced start is (by the
// store).
func (s *Server) evacuate(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	var req wire.EvacuateRequest
	if err := decode(r, &req); err != nil {
		return 0, nil, err
	}
	if !id.Allows(acl.Evacuate, req.Namespace, req.Service, "") {
		what := "evacuate a zone of"
		if req.Service == "" {
			what = "evacuate a zone for every service; only an admin may, in"
		}
		return 0, nil, s.deny(r, id, what, wire.InstanceKey{Namespace: req.Namespace, Service: req.Service})
	}
	if req.To != "" || req.Capacity != "" {
		// A failover's capacity is checked by its own route, against
		// the other region's view.
		return 0, nil, &wire.FieldError{Field: "to", Rule: "is not an evacuation's: fail a region over with POST /v1/regions/failover (cairn region failover)"}
	}
	if err := req.Validate(); err != nil {
		return 0, nil, err
	}
	e, err := s.cfg.Store.Evacuate(r.Context(), id.Name, req)
	if errors.Is(err, store.ErrCapacity) || errors.Is(err, store.ErrBudget) {
		s.auditRefusal(r, id, wire.InstanceKey{Namespace: req.Namespace, Service: req.Service}, userMessage(err))
	}
	if err != nil {
		return 0, nil, err
	}
	s.log.Info("evacuation", "scope", e.Scope(), "state", e.State(), "actor", id.Name, "forced", e.Forced)
	code := http.StatusCreated
	if req.Undo {
		code = http.StatusOK
	}
	return code, evacuationView(e, s.cfg.Now()), nil
}

// listEvacuations lists the evacuations in force (GET /v1/evacuations):
// every one to an admin, those of a namespace the token may read (and
// the zone-wide ones, which concern it) to others.
func (s *Server) listEvacuations(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	now := s.cfg.Now()
	out := []wire.EvacuationView{}
	for _, e := range s.cfg.Store.Evacuations() {
		if e.Service != "" && !id.Allows(acl.Read, e.Namespace, e.Service, "") {
			continue
		}
		out = append(out, evacuationView(e, now))
	}
	return http.StatusOK, out, nil
}

// evacuationView is e with its state spelled out for a reader.
func evacuationView(e wire.Evacuation, now time.Time) wire.EvacuationView {
	v := wire.EvacuationView{Evacuation: e, State: e.State()}
	if e.State() == "evacuated" {
		v.ExpiresIn = wire.Duration(max(e.ExpiresAt.Sub(now), 0).Round(time.Second))
	}
	if e.Forced {
		v.Note = fmt.Sprintf("started by %s past the capacity check or a disruption budget (its evacuated event says which)", e.Actor)
	}
	return v
}
