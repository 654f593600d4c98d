package store

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestFSMHardExpiry: an expire item ends exactly the incarnation it
// names, only when the entry's time is 4 TTLs past the judged expiry and
// no renewal has moved the recorded deadline past it since; any
// lifecycle but terminated ends, with one "expired" event.
func TestFSMHardExpiry(t *testing.T) {
	const ttl = 30 * time.Second
	expire := func(id string, inc uint64, judged, at time.Time) command {
		return command{Op: opHousekeep, At: at, Actor: "node:n1",
			Expire: []leaseUpdate{{fence{webKey(id), inc}, judged}}}
	}
	setup := func(t *testing.T) (*fsmLog, wire.Instance) {
		l := newLog(t)
		l.must(applySvc(webService()))
		in := l.must(registerCmd("a")).Instance
		if in.LeaseTTL.D() != ttl {
			t.Fatalf("lease TTL %s, want %s", in.LeaseTTL, ttl)
		}
		return l, in
	}
	unchanged := func(t *testing.T, l *fsmLog, c command) {
		t.Helper()
		before := withoutRev(l.f)
		if r := l.must(c); r.Expired != 0 {
			t.Errorf("result says %d expired", r.Expired)
		}
		if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
			t.Errorf("the entry changed the state:\nbefore %+v\nafter  %+v", before.Instances, after.Instances)
		}
	}

	t.Run("not before 4 TTLs past the judged expiry", func(t *testing.T) {
		l, in := setup(t)
		unchanged(t, l, expire("a", in.Incarnation, in.LeaseDeadline, in.LeaseDeadline.Add(4*ttl-time.Nanosecond)))
	})
	t.Run("another incarnation is left alone", func(t *testing.T) {
		l, in := setup(t)
		unchanged(t, l, expire("a", in.Incarnation+1, in.LeaseDeadline, in.LeaseDeadline.Add(5*ttl)))
		unchanged(t, l, expire("b", in.Incarnation, in.LeaseDeadline, in.LeaseDeadline.Add(5*ttl)))
	})
	t.Run("a renewal applied first wins", func(t *testing.T) {
		l, in := setup(t)
		renewed := in.LeaseDeadline.Add(time.Second)
		l.must(command{Op: opHousekeep, Leases: []leaseUpdate{{fence{webKey("a"), in.Incarnation}, renewed}}})
		unchanged(t, l, expire("a", in.Incarnation, in.LeaseDeadline, in.LeaseDeadline.Add(5*ttl)))
	})
	t.Run("a terminated record stays as it is", func(t *testing.T) {
		l, in := setup(t)
		l.must(mutateCmd(opDeregister, "a", in.Incarnation))
		unchanged(t, l, expire("a", in.Incarnation, in.LeaseDeadline, in.LeaseDeadline.Add(5*ttl)))
	})
	for _, life := range []status.Lifecycle{status.Ready, status.Starting, status.Draining} {
		t.Run("ends a "+life.String()+" instance at the hard expiry", func(t *testing.T) {
			l, in := setup(t)
			switch life {
			case status.Starting:
				c := registerCmd("a", "10.0.0.2")
				c.Register.Lifecycle, c.Register.Replaces = "starting", in.Incarnation
				in = l.must(c).Instance
			case status.Draining:
				l.must(mutateCmd(opDrain, "a", in.Incarnation))
			}
			seq := l.f.state().EventSeq
			at := in.LeaseDeadline.Add(4 * ttl)
			if r := l.must(expire("a", in.Incarnation, in.LeaseDeadline, at)); r.Expired != 1 {
				t.Errorf("result says %d expired, want 1", r.Expired)
			}
			got := instanceOf(t, l.f, webKey("a"))
			if got.Lifecycle != status.Terminated || !got.TerminatedAt.Equal(at) {
				t.Fatalf("after the hard expiry a is %s since %v, want terminated since %v", got.Lifecycle, got.TerminatedAt, at)
			}
			st := l.f.state()
			e := st.Events[len(st.Events)-1]
			if st.EventSeq != seq+1 || e.Kind != wire.EventExpired || e.Incarnation != in.Incarnation || e.From != life.String() ||
				e.To != status.Terminated.String() || e.Actor != "node:n1" || !strings.Contains(e.Reason, "hard expiry") {
				t.Errorf("events %d → %d, last %+v; want one %s event %s → terminated by node:n1", seq, st.EventSeq, e, wire.EventExpired, life)
			}
			// Applied again (a duplicate entry), it changes nothing.
			unchanged(t, l, expire("a", in.Incarnation, in.LeaseDeadline, at.Add(time.Second)))
		})
	}
}
