package store

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

func (f *fsm) applyServices(index uint64, c command) error {
	next := make([]wire.Service, len(c.Services))
	seen := map[wire.ServiceKey]bool{}
	for i, s := range c.Services {
		s = s.WithDefaults()
		if err := s.Validate(); err != nil {
			return fmt.Errorf("service %d (%s): %w", i, s.Key(), err)
		}
		if seen[s.Key()] {
			return fmt.Errorf("service %d: %w", i, invalid("name", "%s is defined twice", s.Key()))
		}
		seen[s.Key()] = true
		next[i] = s
	}
	// All or nothing: nothing changes until every document is valid.
	for _, s := range next {
		old := f.services[s.Key()]
		if old != nil {
			s.Revision = old.Revision
			if reflect.DeepEqual(*old, s) {
				continue
			}
		}
		s.Revision = index
		f.services[s.Key()] = &s
		f.record(wire.Event{At: c.At, Kind: wire.EventApplied, Namespace: s.Namespace, Service: s.Name, Actor: c.Actor})
	}
	return nil
}

func (f *fsm) register(index uint64, c command) (wire.Instance, bool, error) {
	if c.Register == nil {
		return wire.Instance{}, false, invalid("body", "registration is missing")
	}
	reg := *c.Register
	reg.Namespace, reg.Service = c.Key.Namespace, c.Key.Service
	ttlDefault := reg.LeaseTTL == 0
	svc, ok := f.services[c.Key.ServiceKey()]
	if !ok {
		return wire.Instance{}, false, fmt.Errorf("service %s is not defined; apply its definition first: %w", c.Key.ServiceKey(), ErrNotFound)
	}
	if err := reg.Normalize(*svc); err != nil {
		return wire.Instance{}, false, err
	}
	// The definition's strings, not the entry's: every instance of the
	// service, and its key in f.instances, then shares one copy.
	reg.Namespace, reg.Service = svc.Namespace, svc.Name
	key := reg.Key()
	old := f.instances.get(key)
	// A registration past its hard expiry is over, even while its end
	// waits on the pacing of hard expiries: a new one is fenced as if it
	// had ended, and starts a new incarnation, never revives it.
	over, chk := overAt(old, c.At), old
	if over {
		ended := *old
		ended.lifecycle = status.Terminated
		chk = &ended
	}
	if err := fenceRegistration(chk, reg, ttlDefault); err != nil {
		return wire.Instance{}, false, err
	}
	if over {
		f.endAtHardExpiry(old, c.At, fromNanos(old.leaseDeadline), c.Actor, "; registered again")
	}
	lc, _ := status.ParseLifecycle(reg.Lifecycle) // starting or ready: Normalize checked
	if isRetry(old, reg, ttlDefault) {
		// A retry of the committed registration: same incarnation. It
		// re-arms the lease, as any sign of life does.
		if d := nanos(c.At.Add(old.leaseTTL.D())); d > old.leaseDeadline {
			old.leaseDeadline = d
		}
		// A retry may move starting → ready, never back.
		if old.lifecycle == status.Starting && lc == status.Ready {
			f.record(wire.Event{At: c.At, Kind: wire.EventRegistered, Namespace: key.Namespace, Service: key.Service,
				Instance: key.ID, Incarnation: old.incarnation, From: status.Starting.String(), To: reg.Lifecycle, Actor: c.Actor})
			old.lifecycle = status.Ready
		}
		return cloneInstance(old.view()), false, nil
	}
	f.nextInc++
	in := &record{
		svc: f.serviceKey(svc.Key()), id: key.ID,
		incarnation:    f.nextInc,
		sourceRevision: index,
		addresses:      slices.Clone(reg.Addresses),
		ports:          f.sharedPorts(svc.Key(), maps.Clone(reg.Ports)),
		origin:         f.origin(reg.Region, reg.Zone, c.Actor),
		leaseTTL:       reg.LeaseTTL,
		leaseDeadline:  nanos(c.At.Add(reg.LeaseTTL.D())),
		registeredAt:   nanos(c.At),
		weight:         uint16(reg.Weight), // 1–65535: Normalize checked
		lifecycle:      lc,
		ttlDefault:     ttlDefault,
	}
	var retired []string
	e := wire.Event{At: c.At, Kind: wire.EventRegistered, Namespace: key.Namespace, Service: key.Service,
		Instance: key.ID, Incarnation: in.incarnation, To: reg.Lifecycle, Actor: c.Actor}
	if old != nil {
		retired = slices.Clone(old.retired())
		if id := old.registrationID(); id != "" && id != reg.RegistrationID {
			retired = append(retired, id)
		}
		if n := len(retired); n > maxRetiredIDs {
			retired = retired[n-maxRetiredIDs:]
		}
		e.From = old.lifecycle.String()
		e.Reason = fmt.Sprintf("replaces incarnation %d", old.incarnation)
	}
	if reg.RegistrationID != "" || len(retired) > 0 || reg.Ramp != 0 || reg.Source != "" {
		in.change(func(m *recordMore) {
			m.registrationID, m.retired, m.ramp, m.source = reg.RegistrationID, retired, reg.Ramp, reg.Source
		})
	}
	if reg.Source != "" {
		e.Reason = strings.TrimPrefix(e.Reason+"; from "+reg.Source, "; ")
	}
	if old != nil && old.lifecycle != status.Terminated {
		// The old incarnation is gone, and its address may not be the
		// new one's.
		f.withdrawn = append(f.withdrawn, Withdrawal{Key: key, Incarnation: old.incarnation, Lifecycle: status.Terminated})
	}
	f.instances.put(in)
	f.record(e)
	return cloneInstance(in.view()), true, nil
}

// isRetry reports whether reg (normalised; ttlDefault says whether it
// left lease_ttl to the policy) is a retry of old, the committed record:
// old is starting or ready and holds exactly what reg asks for. What reg
// says it replaces does not matter: the retry of a registration that
// replaced incarnation N names N, and must still find its own result.
func isRetry(old *record, reg wire.Registration, ttlDefault bool) bool {
	return old != nil && (old.lifecycle == status.Starting || old.lifecycle == status.Ready) && sameAs(reg, old, ttlDefault)
}

// fenceRegistration returns an ErrFenced error when reg (normalised) may
// not take the place of old, the instance's record (nil: none):
//   - a registration id old has retired is a late retry of a replaced
//     registration;
//   - unless reg is a retry of old, a non-zero Replaces must name old's
//     incarnation;
//   - without a registration id, a registration that is not a retry of a
//     live record (starting, ready or draining) must name it in Replaces:
//     the registrar must have seen what it overwrites.
//
// A terminated record, or none, takes any registration that names no
// other incarnation. The FSM and the leader's pre-check both decide with
// it, so that a refusal costs no log entry.
func fenceRegistration(old *record, reg wire.Registration, ttlDefault bool) error {
	if old == nil {
		return nil
	}
	key, inc := old.key(), old.incarnation
	if reg.RegistrationID != "" && slices.Contains(old.retired(), reg.RegistrationID) {
		return fmt.Errorf("instance %s: registration id %q was replaced by incarnation %d: %w",
			key, reg.RegistrationID, inc, ErrFenced)
	}
	if isRetry(old, reg, ttlDefault) {
		return nil
	}
	if reg.Replaces != 0 && reg.Replaces != inc {
		return fmt.Errorf("instance %s: replaces %d is not the current incarnation %d (%s): the registration is late or was "+
			"sent on an old view; read the instance and pass replaces %d (cairn register --replaces %d) to replace it: %w",
			key, reg.Replaces, inc, old.lifecycle, inc, inc, ErrFenced)
	}
	if reg.Replaces == 0 && reg.RegistrationID == "" && old.lifecycle != status.Terminated {
		what := "with other content"
		if old.lifecycle == status.Draining {
			what = "and draining"
		}
		return fmt.Errorf("instance %s is registered as incarnation %d %s; to replace it, register with replaces %d "+
			"(cairn register --replaces %d), or deregister it first: %w",
			key, inc, what, inc, inc, ErrFenced)
	}
	return nil
}

// current returns the instance c names if c carries its current
// incarnation.
func (f *fsm) current(key wire.InstanceKey, inc uint64) (*record, error) {
	in := f.instances.get(key)
	if in == nil {
		return nil, fmt.Errorf("instance %s is not registered: %w", key, ErrNotFound)
	}
	if inc != in.incarnation {
		return nil, fmt.Errorf("instance %s: incarnation %d is not the current incarnation %d: %w", key, inc, in.incarnation, ErrFenced)
	}
	return in, nil
}

func (f *fsm) mutate(c command) (wire.Instance, error) {
	in, err := f.current(c.Key, c.Incarnation)
	if err != nil {
		return wire.Instance{}, err
	}
	e := wire.Event{At: c.At, Namespace: in.svc.Namespace, Service: in.svc.Name, Instance: in.id,
		Incarnation: in.incarnation, From: in.lifecycle.String(), Actor: c.Actor}
	var override *wire.Event // a forced disruption past the budget
	switch c.Op {
	case opDrain:
		switch in.lifecycle {
		case status.Draining:
			return cloneInstance(in.view()), nil // a retry
		case status.Terminated:
			return wire.Instance{}, fmt.Errorf("instance %s is deregistered: %w", c.Key, ErrFenced)
		}
		if override, err = f.disruption(c, in); err != nil {
			return wire.Instance{}, err
		}
		in.lifecycle = status.Draining
		in.change(func(m *recordMore) { m.drainingSince = nanos(c.At) })
		f.withdraw(in)
		e.Kind = wire.EventDrained
	case opDeregister:
		if in.lifecycle == status.Terminated {
			return cloneInstance(in.view()), nil // a retry
		}
		if override, err = f.disruption(c, in); err != nil {
			return wire.Instance{}, err
		}
		in.lifecycle = status.Terminated
		in.change(func(m *recordMore) { m.terminatedAt = nanos(c.At) })
		f.withdraw(in)
		e.Kind = wire.EventDeregistered
	case opReport:
		if in.lifecycle == status.Terminated {
			return wire.Instance{}, fmt.Errorf("instance %s is deregistered: %w", c.Key, ErrFenced)
		}
		if c.Report == nil {
			return wire.Instance{}, invalid("body", "report is missing")
		}
		if err := c.Report.Validate(*f.services[c.Key.ServiceKey()]); err != nil {
			return wire.Instance{}, err
		}
		prev := in.report()
		// No dependencies are a nil map, as a snapshot restores them: a
		// reader's copy shares the record's map (listRecords), so a
		// restored replica must hold the same value, not an empty one.
		rep := &wire.SelfReport{Ready: c.Report.Ready, At: c.At, Reporter: f.strs.str(c.Actor)}
		if len(c.Report.Dependencies) > 0 {
			rep.Dependencies = maps.Clone(c.Report.Dependencies)
		}
		in.change(func(m *recordMore) { m.report = rep })
		// maps.Equal, not reflect.DeepEqual: a snapshot restores an empty
		// map as nil, and a restored replica must decide as the others do.
		if prev != nil && prev.Ready == rep.Ready && maps.Equal(prev.Dependencies, rep.Dependencies) {
			return cloneInstance(in.view()), nil // no news: not worth an audit entry
		}
		e.Kind, e.From = wire.EventReported, ""
		e.Reason = fmt.Sprintf("ready=%t", c.Report.Ready)
		for _, k := range sortedKeys(c.Report.Dependencies) {
			e.Reason += fmt.Sprintf(" %s=%s", k, c.Report.Dependencies[k])
		}
	}
	if e.Kind != wire.EventReported {
		e.To = in.lifecycle.String()
	}
	if override != nil {
		f.record(*override)
	}
	f.record(e)
	return cloneInstance(in.view()), nil
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
