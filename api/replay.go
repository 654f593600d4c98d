package api

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/cairn-sd/cairn/history"
	"github.com/cairn-sd/cairn/internal/acl"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// replayView is GET /v1/services/{ns}/{svc}/view: the view this node
// gave a caller at ?region=&zone= (default: the node's place) at ?at=
// (RFC 3339, or a negative duration before now), or from the tables of
// store ?revision=, or the one an xDS ?version= was sent from; with
// ?instance=, that instance's changes and events around it. The service
// need not exist any more: its history is this node's.
func (s *Server) replayView(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	ns, name, err := pathService(r)
	if err != nil {
		return 0, nil, err
	}
	if !id.Allows(acl.Read, ns, name, "") {
		return 0, nil, fmt.Errorf("%s token may not read %s/%s: %w", id.Scope, ns, name, acl.ErrDenied)
	}
	v := r.URL.Query()
	q := wire.ReplayQuery{Namespace: ns, Service: name, Region: v.Get("region"), Zone: v.Get("zone"), Instance: v.Get("instance")}
	given := 0
	for _, k := range []string{"at", "revision", "version"} {
		if v.Has(k) {
			given++
		}
	}
	if given != 1 {
		return 0, nil, badRequest("at", "give exactly one of at, revision and version")
	}
	switch {
	case v.Has("at"):
		if q.At, err = wire.ParseReplayTime(v.Get("at"), s.cfg.Now()); err != nil {
			return 0, nil, badRequest("at", "%v", err)
		}
	case v.Has("revision"):
		if q.Revision, err = strconv.ParseUint(v.Get("revision"), 10, 64); err != nil || q.Revision == 0 {
			return 0, nil, badRequest("revision", "%q must be a store revision: a number from 1", v.Get("revision"))
		}
	default:
		if q.Revision, q.Digest, err = wire.ParseReplayVersion(v.Get("version")); err != nil {
			return 0, nil, badRequest("version", "%v", err)
		}
	}
	for _, k := range []string{"region", "zone", "instance"} {
		if x := v.Get(k); x != "" {
			if err := wire.CheckLabel(k, x); err != nil {
				return 0, nil, err
			}
		}
	}
	if s.cfg.Replay == nil {
		return 0, nil, fmt.Errorf("this node keeps no history of its views: %w", store.ErrNotFound)
	}
	rep, err := s.cfg.Replay(q)
	if errors.Is(err, history.ErrUnknown) || errors.As(err, new(*history.TooOldError)) {
		return 0, nil, fmt.Errorf("%s/%s: %w: %w", ns, name, err, store.ErrNotFound)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, rep, nil
}

// timeline is GET /v1/services/{ns}/{svc}/history?from=&to=: the
// service's eligible endpoints per zone over a span of this node's
// history (default: the last 24 hours, from where it starts), with the
// withdrawals, admissions and evacuations that moved them.
func (s *Server) timeline(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	ns, name, err := pathService(r)
	if err != nil {
		return 0, nil, err
	}
	if !id.Allows(acl.Read, ns, name, "") {
		return 0, nil, fmt.Errorf("%s token may not read %s/%s: %w", id.Scope, ns, name, acl.ErrDenied)
	}
	now := s.cfg.Now()
	from, to := now.Add(-24*time.Hour), now
	v := r.URL.Query()
	if x := v.Get("from"); x != "" {
		if from, err = wire.ParseReplayTime(x, now); err != nil {
			return 0, nil, badRequest("from", "%v", err)
		}
	}
	if x := v.Get("to"); x != "" {
		if to, err = wire.ParseReplayTime(x, now); err != nil {
			return 0, nil, badRequest("to", "%v", err)
		}
	}
	if !to.After(from) {
		return 0, nil, badRequest("to", "%s is not after from (%s)", to.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano))
	}
	if s.cfg.Timeline == nil {
		return 0, nil, fmt.Errorf("this node keeps no history of its views: %w", store.ErrNotFound)
	}
	out, err := s.cfg.Timeline(ns, name, from, to)
	if errors.Is(err, history.ErrUnknown) {
		return 0, nil, fmt.Errorf("%s/%s: %w: %w", ns, name, err, store.ErrNotFound)
	}
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, out, nil
}
