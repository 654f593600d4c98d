package api

import (
	"context"
	"fmt"
	"net/http"

	"github.com/cairn-sd/cairn/health"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// maxProbeBody bounds a probe report: a full batch of a node's capacity
// (10,000 targets by default) is about 1.5 MB of JSON.
const maxProbeBody = 64 << 20

// evaluating returns the node's evaluator when this node is the ready
// leader, or the 503 to answer (health.Node.Evaluating).
func (s *Server) evaluating() (*health.Node, error) {
	if err := s.cfg.Health.Evaluating(); err != nil {
		return nil, err
	}
	return s.cfg.Health, nil
}

// outcomes takes POST /v1/outcomes: one caller's success, failure and
// timeout counts per endpoint. The caller is the token's identity; every
// endpoint must be in a namespace it may report on, or nothing is taken.
func (s *Server) outcomes(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	var rep wire.OutcomeReport
	if err := decode(r, &rep); err != nil {
		return 0, nil, err
	}
	if err := rep.Validate(); err != nil {
		return 0, nil, badRequest("body", "%v", err)
	}
	for _, e := range rep.Endpoints {
		if !id.Allows(acl.Outcome, e.Namespace, e.Service, e.Instance) {
			return 0, nil, s.deny(r, id, "report outcomes about", wire.InstanceKey{Namespace: e.Namespace, Service: e.Service, ID: e.Instance})
		}
	}
	h, err := s.evaluating()
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, h.Outcomes(id.Name, rep), nil
}

// forwardedOutcomes takes POST /v1/internal/outcomes: the load reports
// a server's xDS subscribers sent it over LRS, each under the caller the
// server authenticated (an observer named "xds:…"). Only a server may
// send them: an admin, or a prober token that names its node.
func (s *Server) forwardedOutcomes(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	if !id.Allows(acl.ForwardOutcomes, "", "", "") {
		return 0, nil, fmt.Errorf("%s token may not forward xDS outcomes (a server's prober token naming its node may): %w", id.Scope, acl.ErrDenied)
	}
	var b wire.OutcomeBatch
	if err := decode(r, &b); err != nil {
		return 0, nil, err
	}
	if err := b.Validate(); err != nil {
		return 0, nil, badRequest("body", "%v", err)
	}
	h, err := s.evaluating()
	if err != nil {
		return 0, nil, err
	}
	return http.StatusAccepted, h.OutcomeBatch(b), nil
}

// probeResults takes POST /v1/internal/probe-results: a server's batch of
// probe results. The observer is the token's: a prober token reports as
// the node it names (a report naming no observer is taken as that node's,
// one naming another is refused and nothing of it is taken); an admin
// token, and every caller with ACLs off, reports as the observer the body
// names.
func (s *Server) probeResults(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	// Refuse a token that may report as no one before reading the body.
	if _, err := id.ProbeObserver(""); err != nil {
		return 0, nil, err
	}
	var rep wire.ProbeReport
	if err := decode(r, &rep); err != nil {
		return 0, nil, err
	}
	if rep.Observer != "" {
		if err := wire.CheckLabel("observer", rep.Observer); err != nil {
			return 0, nil, err
		}
	}
	observer, err := id.ProbeObserver(rep.Observer)
	if err != nil {
		s.log.Warn("refused probe results", "identity", id.Name, "node", id.Node, "observer", rep.Observer)
		return 0, nil, err
	}
	if observer == "" {
		return 0, nil, badRequest("observer", "is required (an admin token reports as the observer it names)")
	}
	rep.Observer = observer
	if len(rep.Results) > wire.MaxProbeResults {
		return 0, nil, badRequest("results", "at most %d, got %d", wire.MaxProbeResults, len(rep.Results))
	}
	h, err := s.evaluating()
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, h.ProbeReport(rep), nil
}

// waitPublished waits until this node's status table reflects the store
// up to rev; on a node that publishes no table it returns at once. A
// write it waits for is committed already: the error says so, and a
// retry of the idempotent write waits again.
func (s *Server) waitPublished(ctx context.Context, rev uint64) error {
	p := s.cfg.Publish
	if p == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	if err := p.WaitPublished(ctx, rev); err != nil {
		return fmt.Errorf("committed at revision %d, but this node's table has not published it yet (%v); retry: %w",
			rev, err, store.ErrNoLeader)
	}
	return nil
}
