package store

import (
	"fmt"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// The FSM's side of leases: housekeeping entries (renewal checkpoints,
// ended drains, hard expiries, pruning), the hard expiry itself, and a
// takeover's grace. The leader's side is in lease.go.

// housekeep applies a housekeeping entry: renewal checkpoints, ended
// drains, hard expiries and tombstone pruning. It returns how many
// registrations it ended at their hard expiry.
func (f *fsm) housekeep(c command) int {
	expired := 0
	for _, l := range c.Leases {
		in := f.instances.get(l.Key)
		if in == nil || in.incarnation != l.Incarnation || in.lifecycle == status.Terminated {
			continue
		}
		if d := nanos(l.Deadline); d > in.leaseDeadline {
			in.leaseDeadline = d
		}
	}
	for _, t := range c.Terminate {
		in := f.instances.get(t.Key)
		if in == nil || in.incarnation != t.Incarnation || in.lifecycle != status.Draining {
			continue
		}
		in.lifecycle = status.Terminated
		in.change(func(m *recordMore) { m.terminatedAt = nanos(c.At) })
		f.withdraw(in)
		f.record(wire.Event{At: c.At, Kind: wire.EventTerminated, Namespace: in.svc.Namespace, Service: in.svc.Name,
			Instance: in.id, Incarnation: in.incarnation, From: status.Draining.String(), To: status.Terminated.String(),
			Reason: "drain window over", Actor: c.Actor})
	}
	for _, l := range c.Expire {
		in := f.instances.get(l.Key)
		if in == nil || in.incarnation != l.Incarnation || in.lifecycle == status.Terminated || in.leaseTTL <= 0 {
			continue
		}
		// A renewal applied since the leader judged the lease wins, and
		// so does a lease the entry's own time does not show past its
		// hard expiry: time travels in the log, not in the replica.
		if in.leaseDeadline > nanos(l.Deadline) || c.At.Before(hardExpiry(l.Deadline, in.leaseTTL.D())) {
			continue
		}
		f.endAtHardExpiry(in, c.At, l.Deadline, c.Actor, "")
		expired++
	}
	if !c.PruneBefore.IsZero() {
		before := nanos(c.PruneBefore)
		for in := range f.instances.all {
			if in.lifecycle == status.Terminated && in.terminatedAt() < before {
				f.instances.del(in)
			}
		}
	}
	return expired
}

// endAtHardExpiry terminates in, whose lease ran out at deadline and is
// past its hard expiry at at, with an audit event "expired".
func (f *fsm) endAtHardExpiry(in *record, at, deadline time.Time, actor, why string) {
	from := in.lifecycle
	in.lifecycle = status.Terminated
	in.change(func(m *recordMore) { m.terminatedAt = nanos(at) })
	f.withdraw(in)
	f.record(wire.Event{At: at, Kind: wire.EventExpired, Namespace: in.svc.Namespace, Service: in.svc.Name,
		Instance: in.id, Incarnation: in.incarnation, From: from.String(), To: status.Terminated.String(),
		Reason: fmt.Sprintf("lease past its hard expiry (%d × lease_ttl %s since the last renewal; the lease ran out at %s)%s",
			HardExpiryTTLs, in.leaseTTL, deadline.Format(time.RFC3339Nano), why),
		Actor: actor})
}

// overAt reports whether in, starting or ready, is past its hard expiry
// at at, by its recorded deadline (which a takeover's grace has moved
// already), whether or not housekeeping has ended it yet: a registration
// held back by the pacing of hard expiries is over all the same. (A
// draining one is on its way out, and replacing it still needs its
// incarnation named.)
func overAt(in *record, at time.Time) bool {
	return in != nil && (in.lifecycle == status.Starting || in.lifecycle == status.Ready) && in.leaseTTL > 0 &&
		!at.Before(hardExpiry(fromNanos(in.leaseDeadline), in.leaseTTL.D()))
}

// HardExpiryTTLs is how many lease TTLs after its last renewal a
// registration is over (SPEC §2: 5 × TTL): its lease has then been
// expired for four TTLs.
const HardExpiryTTLs = 5

// hardExpiry returns when a lease that expires at exp (its deadline, or a
// new leader's grace) is past its hard expiry.
func hardExpiry(exp time.Time, ttl time.Duration) time.Time {
	return exp.Add((HardExpiryTTLs - 1) * ttl)
}

// grace applies a takeover at since: every lease that was live at silent
// (not past its hard expiry; zero silent: every lease) runs at least one
// TTL from since. Nothing could renew while there was no leader, and the
// new leader cannot know of renewals the old one did not replicate: time
// without a leader never counts against a lease (SPEC §2). A registration
// that was over by silent stays over. O(instances), once per takeover.
func (f *fsm) grace(since, silent time.Time) {
	for in := range f.instances.all {
		if in.lifecycle == status.Terminated || in.leaseTTL <= 0 {
			continue
		}
		ttl := in.leaseTTL.D()
		d := fromNanos(in.leaseDeadline)
		if !silent.IsZero() && !hardExpiry(d, ttl).After(silent) {
			continue
		}
		if g := nanos(since.Add(ttl)); g > in.leaseDeadline {
			in.leaseDeadline = g
		}
	}
}

// silentSince is the time of the last command entry of a term before
// term: when, as this replica knows, a leader was last at work before
// term's (zero: no such entry). Called with f.mu held.
func (f *fsm) silentSince(term uint64) time.Time {
	if f.logTerm < term {
		return f.logTime
	}
	return f.prevTermTime
}
