package api

import (
	"cmp"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/internal/acl"
	cstatus "github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// rollout is GET /v1/services/{ns}/{svc}/rollout: the service's live
// instances with what this node's table serves of each (as the
// endpoints view reads it, from one table), the latest set marked
// (wire.Rollout says which instances it holds), and the latest set
// counted.
func (s *Server) rollout(w http.ResponseWriter, r *http.Request, id acl.Identity) (int, any, error) {
	svc, err := s.service(r, id)
	if err != nil {
		return 0, nil, err
	}
	policy := wire.Duration(wire.DefaultSlowStart)
	if p := svc.Policy.SlowStart; p != nil {
		policy = *p
	}
	now := s.cfg.Now()
	p := s.acquire()
	defer p.release()
	out := wire.Rollout{Namespace: svc.Namespace, Service: svc.Name, SlowStart: policy,
		Instances: []wire.RolloutInstance{}, TableVersion: p.version(), TableRevision: p.revision()}
	var regs []time.Time
	var wins []time.Duration
	for _, in := range s.cfg.Store.Instances(svc.Namespace, svc.Name) {
		if in.Lifecycle == cstatus.Terminated {
			continue
		}
		e := endpointOf(in, now, s.cfg.Store.LeaseExpiry(in))
		s.overlay(p, &e, in)
		ri := wire.RolloutInstance{InstanceID: in.ID, Incarnation: in.Incarnation, RegisteredAt: in.RegisteredAt,
			Lifecycle: in.Lifecycle, Verdict: e.Verdict, Eligible: e.Eligible, Weight: e.Weight, BaseWeight: in.Weight,
			Ramp: in.Ramp, SlowStart: wire.Duration(wire.SlowStartWindow(policy.D(), in.Ramp.D())), Phase: wire.PhaseNotEligible}
		if e.Eligible {
			ri.Phase = wire.PhaseFullWeight
			if slices.Contains(e.Flags, cstatus.SlowStart.String()) {
				ri.Phase = wire.PhaseRamping
			}
			ri.RampPercent = (100*ri.Weight + ri.BaseWeight/2) / max(ri.BaseWeight, 1)
		}
		out.Instances = append(out.Instances, ri)
		regs, wins = append(regs, in.RegisteredAt), append(wins, ri.SlowStart.D())
	}
	out.StartedAt = wire.LatestSince(regs, wins)
	sum := &out.Summary
	for i := range out.Instances {
		ri := &out.Instances[i]
		sum.Instances++
		if !out.StartedAt.IsZero() && !ri.RegisteredAt.Before(out.StartedAt) {
			ri.Latest = true
			sum.Latest++
			switch ri.Phase {
			case wire.PhaseFullWeight:
				sum.InRotation++
				sum.FullWeight++
			case wire.PhaseRamping:
				sum.InRotation++
				sum.Ramping++
			default:
				sum.NotEligible++
			}
		}
	}
	sum.Complete = sum.Latest > 0 && sum.FullWeight == sum.Latest
	slices.SortFunc(out.Instances, func(a, b wire.RolloutInstance) int {
		switch {
		case a.Latest != b.Latest:
			if a.Latest {
				return -1
			}
			return 1
		case a.Latest:
			return cmp.Or(a.RegisteredAt.Compare(b.RegisteredAt), strings.Compare(a.InstanceID, b.InstanceID))
		}
		return strings.Compare(a.InstanceID, b.InstanceID)
	})
	return http.StatusOK, out, nil
}
