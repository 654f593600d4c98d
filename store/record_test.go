package store

import (
	"bytes"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// TestVerdictKeepsEveryValue: a verdict reads back as the wire.Health it
// was made from, every field of it (empty lists as nil, as a snapshot
// restores them).
func TestVerdictKeepsEveryValue(t *testing.T) {
	for _, c := range sampleHealthCommands(t0) {
		for _, u := range c.Health {
			want := u.Health
			if len(want.Failing) == 0 {
				want.Failing = nil
			}
			if len(want.Reasons) == 0 {
				want.Reasons = nil
			}
			if got := NewVerdict(u.Health).Health(); !reflect.DeepEqual(got, want) {
				t.Errorf("%s: verdict reads back as\n%+v\nwant\n%+v", u.Key, got, want)
			}
		}
	}
}

// TestVerdictHeadsAreShared: verdicts that differ only in their times
// share one head; verdicts with other reasons do not, however their
// strings could be run together.
func TestVerdictHeadsAreShared(t *testing.T) {
	f := newFSM()
	h := func(at time.Time, reasons ...string) *wire.Health {
		return &wire.Health{Incarnation: 1, Verdict: status.Unknown, Eligible: true, Reasons: reasons, At: at, EligibleSince: at}
	}
	a, b := f.verdictOf(h(t0, "x")), f.verdictOf(h(t0.Add(time.Second), "x"))
	if a.head != b.head {
		t.Error("verdicts that differ only in their times have heads of their own")
	}
	if a.Health().At != t0 || b.Health().At != t0.Add(time.Second) {
		t.Errorf("times %v and %v, want %v and %v", a.Health().At, b.Health().At, t0, t0.Add(time.Second))
	}
	c, d := f.verdictOf(h(t0, "x\x00y")), f.verdictOf(h(t0, "x", "y"))
	e := f.verdictOf(&wire.Health{Verdict: status.Healthy, Eligible: true, Reasons: []string{"x"}})
	if c.head == d.head || c.head == a.head || e.head == a.head {
		t.Error("verdicts with other reasons share a head")
	}
	if got := d.Health().Reasons; !reflect.DeepEqual(got, []string{"x", "y"}) {
		t.Errorf("reasons %q, want [x y]", got)
	}
}

// TestNanos: the zero time, times before 1970 and the ends of what int64
// nanoseconds hold read back; times beyond them are clamped.
func TestNanos(t *testing.T) {
	for _, tm := range []time.Time{{}, t0, time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC), time.Unix(0, math.MinInt64+1).UTC(), time.Unix(0, math.MaxInt64).UTC()} {
		if got := fromNanos(nanos(tm)); !got.Equal(tm) || got.IsZero() != tm.IsZero() {
			t.Errorf("%v reads back as %v", tm, got)
		}
	}
	if got := nanos(time.Date(1, 1, 1, 0, 0, 1, 0, time.UTC)); got != math.MinInt64+1 {
		t.Errorf("year 1: %d, want the earliest time", got)
	}
	if got := nanos(time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)); got != math.MaxInt64 {
		t.Errorf("year 9999: %d, want the latest time", got)
	}
	if got := fromNanos(nanos(t0.In(time.FixedZone("x", 3600)))); got != t0 {
		t.Errorf("a time in another zone reads back as %v, want %v in UTC", got, t0)
	}
}

// TestRestoreRefusesWhatNoFSMWrites: a snapshot whose instance has a
// lifecycle or a weight no version writes is refused, naming the field,
// and the replica keeps its state.
func TestRestoreRefusesWhatNoFSMWrites(t *testing.T) {
	old := readFile(t, oldSnapshotFile)
	for _, c := range []struct{ from, to, field string }{
		{`"lifecycle":"draining"`, `"lifecycle":"sleeping"`, "lifecycle"},
		{`"weight":65535`, `"weight":65536`, "weight"},
		{`"weight":50`, `"weight":0`, "weight"},
	} {
		bad := bytes.Replace(old, []byte(c.from), []byte(c.to), 1)
		if bytes.Equal(bad, old) {
			t.Fatalf("%s is not in the snapshot", c.from)
		}
		l := goldenLog(t)
		before := l.f.state()
		err := l.f.Restore(io.NopCloser(bytes.NewReader(bad)))
		if err == nil || !strings.Contains(err.Error(), c.field) {
			t.Errorf("%s: Restore = %v, want an error naming %s", c.to, err, c.field)
		}
		if after := l.f.state(); !reflect.DeepEqual(after, before) {
			t.Errorf("%s: a refused snapshot changed the state: %s", c.to, firstDiff(after, before))
		}
	}
}

// TestIndex: the records by service and id count each key once, give a
// replaced key its new record, and drop a service's map with its last
// record, also when deleting while ranging.
func TestIndex(t *testing.T) {
	x := newIndex()
	web, api := &wire.ServiceKey{Namespace: "prod", Name: "web"}, &wire.ServiceKey{Namespace: "prod", Name: "api"}
	a, a2, b, c := &record{svc: web, id: "a"}, &record{svc: web, id: "a"}, &record{svc: web, id: "b"}, &record{svc: api, id: "a"}
	for _, r := range []*record{a, b, c, a2} {
		x.put(r)
	}
	if x.len() != 3 || x.get(webKey("a")) != a2 || x.get(wire.InstanceKey{Namespace: "prod", Service: "api", ID: "a"}) != c {
		t.Fatalf("len %d, a %p (want %p), api/a %p (want %p)", x.len(), x.get(webKey("a")), a2, x.get(wire.InstanceKey{Namespace: "prod", Service: "api", ID: "a"}), c)
	}
	for r := range x.all {
		if r.svc == web {
			x.del(r)
		}
	}
	x.del(b) // gone already
	if x.len() != 1 || x.get(webKey("b")) != nil || len(x.svcs) != 1 {
		t.Errorf("after deleting web's records: len %d, services %d, b %p", x.len(), len(x.svcs), x.get(webKey("b")))
	}
}

// TestRecordSizes: the FSM keeps a record per instance and a verdict per
// judged instance; each takes a size class of its own (128 and 48
// bytes), and a field more would take the next.
func TestRecordSizes(t *testing.T) {
	if got := unsafe.Sizeof(record{}); got > 128 {
		t.Errorf("record is %d bytes, want at most 128", got)
	}
	if got := unsafe.Sizeof(Verdict{}); got > 48 {
		t.Errorf("Verdict is %d bytes, want at most 48", got)
	}
}
