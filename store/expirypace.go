package store

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// ExpiryWindow is the window over which the leader paces hard expiries
// by a service's shrink cap: the cap's window in the evaluator (SPEC §2,
// 1/3 per 10 s by default).
const ExpiryWindow = 10 * time.Second

// expiryWindow is one service's pacing of hard expiries: the leader ends
// at most max(1, shrink_cap × base) registrations of the service per
// ExpiryWindow, base being the registrations it had when the window
// opened. The rest wait their turn; they still end (an expired lease must
// eventually leave everywhere), just not all in one tick. Leader-local:
// a new leader starts afresh, after giving every live lease a TTL anyway.
type expiryWindow struct {
	start  time.Time
	base   int // registrations (not terminated) when the window opened
	used   int // hard expiries committed in the window
	held   int // held back at the last tick
	noted  bool
	sample []string // a few of the instances held back, for the event
}

// expiryCandidate is a lease past its hard expiry, as housekeeping found
// it.
type expiryCandidate struct {
	leaseUpdate
	svc wire.ServiceKey
}

// paceExpiries picks, from the candidates (leases past their hard
// expiry), those this tick may end under each service's shrink cap, at
// most limit in all, and returns them with whether more were left out by
// limit alone (not by the cap). It counts each service's registrations
// from the replica when its window opens: call it under the FSM's read
// lock, with hkMu held.
func (s *Store) paceExpiries(now time.Time, cands []expiryCandidate, limit int) ([]leaseUpdate, bool) {
	if s.expiryWins == nil {
		s.expiryWins = map[wire.ServiceKey]*expiryWindow{}
	}
	// The longest past their hard expiry go first; then by key, so that
	// every tick picks the same ones.
	sort.Slice(cands, func(i, j int) bool {
		a, b := &cands[i], &cands[j]
		switch {
		case !a.Deadline.Equal(b.Deadline):
			return a.Deadline.Before(b.Deadline)
		case a.Key.Namespace != b.Key.Namespace:
			return a.Key.Namespace < b.Key.Namespace
		case a.Key.Service != b.Key.Service:
			return a.Key.Service < b.Key.Service
		}
		return a.Key.ID < b.Key.ID
	})
	var out []leaseUpdate
	more := false
	for k, w := range s.expiryWins {
		if !now.Before(w.start.Add(ExpiryWindow)) {
			delete(s.expiryWins, k) // a new window opens when one is next needed
		} else {
			w.held, w.sample = 0, w.sample[:0]
		}
	}
	for _, c := range cands {
		w := s.expiryWins[c.svc]
		if w == nil {
			w = &expiryWindow{start: now, base: s.registrationsLocked(c.svc)}
			s.expiryWins[c.svc] = w
		}
		if w.used >= s.expiryAllowance(c.svc, w.base) {
			w.held++
			if len(w.sample) < 5 {
				w.sample = append(w.sample, c.Key.ID)
			}
			continue
		}
		if len(out) == limit {
			more = true
			continue
		}
		w.used++
		out = append(out, c.leaseUpdate)
	}
	held := 0
	for _, w := range s.expiryWins {
		held += w.held
	}
	s.expiriesHeld = held
	s.metrics.expiriesHeld.Set(float64(held))
	return out, more
}

// unpace gives back the allowance of expiries whose entry did not
// commit. Called with hkMu held.
func (s *Store) unpace(expired []leaseUpdate) {
	for _, l := range expired {
		if w := s.expiryWins[l.Key.ServiceKey()]; w != nil && w.used > 0 {
			w.used--
		}
	}
}

// expiryAllowance is how many hard expiries of svc one window may
// commit: its shrink cap of base, and always at least one.
func (s *Store) expiryAllowance(svc wire.ServiceKey, base int) int {
	capf := wire.DefaultShrinkCap
	if d := s.fsm.services[svc]; d != nil && d.Policy.ShrinkCap > 0 {
		capf = d.Policy.ShrinkCap
	}
	return max(1, int(capf*float64(base)))
}

// registrationsLocked counts svc's registrations that are not over.
// Called under the FSM's read lock.
func (s *Store) registrationsLocked(svc wire.ServiceKey) int {
	n := 0
	for _, r := range s.fsm.instances.svcs[svc] {
		if r.lifecycle != status.Terminated {
			n++
		}
	}
	return n
}

// noteHeldExpiries writes one audit event per service and window in
// which hard expiries were held back by the shrink cap. Called with hkMu
// held, after the tick's entry.
func (s *Store) noteHeldExpiries(ctx context.Context) {
	keys := make([]wire.ServiceKey, 0, len(s.expiryWins))
	for k, w := range s.expiryWins {
		if w.held > 0 && !w.noted {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		w := s.expiryWins[k]
		e := wire.Event{Kind: wire.EventExpiryHeld, Namespace: k.Namespace, Service: k.Name,
			Actor: "node:" + s.cfg.NodeID,
			Reason: fmt.Sprintf("%d hard expiries held back by the shrink cap (at most %d of %d registrations a %s; %d ended in this window): %s",
				w.held, s.expiryAllowanceUnlocked(k, w.base), w.base, ExpiryWindow, w.used, strings.Join(w.sample, ", "))}
		if err := s.Audit(ctx, e); err != nil {
			s.log.Warn("recording held-back hard expiries", "service", k, "err", err)
			return // retried on the next tick
		}
		w.noted = true
	}
}

func (s *Store) expiryAllowanceUnlocked(svc wire.ServiceKey, base int) int {
	s.fsm.mu.RLock()
	defer s.fsm.mu.RUnlock()
	return s.expiryAllowance(svc, base)
}
