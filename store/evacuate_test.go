package store

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// zonedLog is a log with prod/web's six instances, two in each of
// zones a, b and c of region r1, registered ready.
func zonedLog(t *testing.T, shiftBack time.Duration) *fsmLog {
	t.Helper()
	l := newLog(t)
	svc := webService()
	sb := wire.Duration(shiftBack)
	svc.Policy.ShiftBack = &sb
	l.must(applySvc(svc))
	for i, z := range []string{"a", "a", "b", "b", "c", "c"} {
		c := registerCmd(z+string(rune('1'+i%2)), "10.0.0."+string(rune('1'+i)))
		c.Register.Region, c.Register.Zone = "r1", z
		l.must(c)
	}
	return l
}

func evacCmd(req wire.EvacuateRequest) command {
	return command{Op: opEvacuate, Actor: "admin:ops", Evacuate: &req}
}

// withdraw commits a withdrawing verdict for instance id of prod/web.
func withdraw(l *fsmLog, t *testing.T, id string) {
	t.Helper()
	in := instanceOf(t, l.f, webKey(id))
	l.must(command{Op: opHealth, Actor: "evaluator@n1", Health: []HealthUpdate{{Key: webKey(id),
		Health: wire.Health{Incarnation: in.Incarnation, Verdict: status.Unhealthy, At: l.now}}}})
}

func TestEvacuateAndUndo(t *testing.T) {
	l := zonedLog(t, 100*time.Second)
	r := l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Reason: "power work"}))
	e := r.Evacuation
	if e.ID == 0 || e.State() != "evacuated" || e.ExpiresAt != e.StartedAt.Add(wire.DefaultEvacuationExpiry) || e.Actor != "admin:ops" {
		t.Fatalf("started %+v", e)
	}
	if got := l.f.evacuationList(); len(got) != 1 || got[0].ID != e.ID {
		t.Fatalf("evacuations %+v", got)
	}
	// The instances stay registered and ready: a preference shift.
	if in := instanceOf(t, l.f, webKey("a1")); in.Lifecycle != status.Ready {
		t.Fatalf("a1 is %s", in.Lifecycle)
	}
	// Undo of another scope is not found and changes nothing.
	before := withoutRev(l.f)
	if r := l.apply(evacCmd(wire.EvacuateRequest{Zone: "b", Undo: true})); !errors.Is(r.Err, ErrNotFound) {
		t.Fatalf("undo of b: %v", r.Err)
	}
	after := withoutRev(l.f)
	if len(before.Events) != len(after.Events) || len(after.Evacuations) != 1 {
		t.Fatalf("a refused undo changed the state")
	}
	r = l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Undo: true}))
	if r.Evacuation.State() != "returning" || r.Evacuation.EndedBy != "admin:ops" || r.Evacuation.Share(100*time.Second) != 0.1 {
		t.Fatalf("undone %+v", r.Evacuation)
	}
	var kinds []string
	for _, ev := range l.f.events.list() {
		if ev.Kind != wire.EventRegistered && ev.Kind != wire.EventApplied {
			kinds = append(kinds, string(ev.Kind))
		}
	}
	if got := strings.Join(kinds, " "); got != "evacuated evacuation_ended" {
		t.Fatalf("events %q", got)
	}
}

func TestEvacuateRefusedWithoutCapacity(t *testing.T) {
	l := zonedLog(t, time.Minute)
	// Zones b and c: 4 of 6 ready; withdraw three of them and only one
	// is left outside a, below 0.5 × 6.
	for _, id := range []string{"b1", "b2", "c1"} {
		withdraw(l, t, id)
	}
	before := withoutRev(l.f)
	r := l.apply(evacCmd(wire.EvacuateRequest{Zone: "a"}))
	if !errors.Is(r.Err, ErrCapacity) {
		t.Fatalf("evacuate: %v, want ErrCapacity", r.Err)
	}
	for _, want := range []string{"prod/web", "keep 1 eligible", "needs 3", "--force"} {
		if !strings.Contains(r.Err.Error(), want) {
			t.Errorf("error %q does not say %q", r.Err, want)
		}
	}
	if after := withoutRev(l.f); len(after.Evacuations) != 0 || len(after.Events) != len(before.Events) {
		t.Fatalf("a refused evacuation changed the state")
	}
	r = l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Force: true}))
	if !r.Evacuation.Forced {
		t.Fatalf("forced evacuation not marked: %+v", r.Evacuation)
	}
	last := lastEvent(l)
	if last.Kind != wire.EventEvacuated || !strings.Contains(last.Reason, "forced past the capacity check") {
		t.Fatalf("audit %+v", last)
	}
	// A second zone on top of the first: b's two are the only others,
	// and evacuating c too leaves none outside.
	if r := l.apply(evacCmd(wire.EvacuateRequest{Zone: "c", Namespace: "prod", Service: "web"})); !errors.Is(r.Err, ErrCapacity) {
		t.Fatalf("second zone: %v", r.Err)
	}
	if r := l.apply(evacCmd(wire.EvacuateRequest{Zone: "c", Namespace: "prod", Service: "nope"})); !errors.Is(r.Err, ErrNotFound) {
		t.Fatalf("unknown service: %v", r.Err)
	}
}

func TestEvacuationReturnsInSteps(t *testing.T) {
	l := zonedLog(t, 100*time.Second)
	l.must(evacCmd(wire.EvacuateRequest{Zone: "a"}))
	r := l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Undo: true}))
	id, start := r.Evacuation.ID, l.now
	step := func(at time.Time) []evacStep {
		l.f.mu.RLock()
		defer l.f.mu.RUnlock()
		return l.f.evacuationSteps(at)
	}
	// Within the first step nothing is due: the share has not moved.
	if s := step(start.Add(5 * time.Second)); len(s) != 0 {
		t.Fatalf("steps at +5s: %+v", s)
	}
	s := step(start.Add(25 * time.Second))
	if len(s) != 1 || s[0].ID != id || s[0].Returned.D() != 25*time.Second || s[0].Paused || s[0].Done {
		t.Fatalf("steps at +25s: %+v", s)
	}
	l.must(command{Op: opEvacuationStep, At: start.Add(25 * time.Second), Actor: "node:n1", EvacSteps: s})
	if got := l.f.evacs[id].Share(100 * time.Second); got != 0.3 {
		t.Fatalf("share at +25s: %v, want 0.3", got)
	}
	// An instance of the zone withdrawn: the return pauses, once.
	l.now = start.Add(30 * time.Second)
	withdraw(l, t, "a1")
	s = step(start.Add(40 * time.Second))
	if len(s) != 1 || !s[0].Paused || !strings.Contains(s[0].Reason, "1 of the zone's ready instances are withdrawn, 0 were") {
		t.Fatalf("steps after a withdrawal: %+v", s)
	}
	l.must(command{Op: opEvacuationStep, At: start.Add(40 * time.Second), Actor: "node:n1", EvacSteps: s})
	if e := l.f.evacs[id]; e.State() != "paused" {
		t.Fatalf("state %s", e.State())
	}
	if s := step(start.Add(200 * time.Second)); len(s) != 0 {
		t.Fatalf("a paused return moved: %+v", s)
	}
	// Its leader changes: a snapshot restored elsewhere carries on.
	into := newFSM()
	roundTrip(t, l.f, into)
	if e := into.evacs[id]; e == nil || e.State() != "paused" || e.Returned.D() != 40*time.Second {
		t.Fatalf("restored %+v", e)
	}
	// The instance is back: the return resumes from where it was, and
	// ends once the whole window has passed.
	in := instanceOf(t, l.f, webKey("a1"))
	l.must(command{Op: opHealth, Actor: "evaluator@n1", Health: []HealthUpdate{{Key: webKey("a1"),
		Health: wire.Health{Incarnation: in.Incarnation, Verdict: status.Healthy, Eligible: true, At: l.now}}}})
	s = step(start.Add(300 * time.Second))
	if len(s) != 1 || s[0].Paused || s[0].Returned.D() != 40*time.Second {
		t.Fatalf("resume: %+v", s)
	}
	l.must(command{Op: opEvacuationStep, At: start.Add(300 * time.Second), Actor: "node:n1", EvacSteps: s})
	s = step(start.Add(360 * time.Second))
	if len(s) != 1 || !s[0].Done {
		t.Fatalf("end: %+v", s)
	}
	l.must(command{Op: opEvacuationStep, At: start.Add(360 * time.Second), Actor: "node:n1", EvacSteps: s})
	if len(l.f.evacs) != 0 {
		t.Fatalf("evacuation left: %+v", l.f.evacuationList())
	}
	if last := lastEvent(l); last.Kind != wire.EventEvacuationReturned {
		t.Fatalf("last event %+v", last)
	}
}

func TestEvacuationExpires(t *testing.T) {
	l := zonedLog(t, time.Minute)
	r := l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Expires: wire.Duration(time.Hour)}))
	id := r.Evacuation.ID
	l.f.mu.RLock()
	early, due := l.f.evacuationSteps(l.now.Add(59*time.Minute)), l.f.evacuationSteps(l.now.Add(time.Hour))
	l.f.mu.RUnlock()
	if len(early) != 0 || len(due) != 1 || !due[0].Expire {
		t.Fatalf("early %+v due %+v", early, due)
	}
	// An expiry entry applied before its time (a leader's clock ahead)
	// changes nothing: time travels in the log.
	l.must(command{Op: opEvacuationStep, At: l.now.Add(30 * time.Minute), Actor: "node:n1", EvacSteps: due})
	if l.f.evacs[id].State() != "evacuated" {
		t.Fatal("expired early")
	}
	l.must(command{Op: opEvacuationStep, At: r.Evacuation.ExpiresAt, Actor: "node:n1", EvacSteps: due})
	e := l.f.evacs[id]
	if e.State() != "returning" || e.EndedBy != "expiry" {
		t.Fatalf("after expiry %+v", e)
	}
	last := lastEvent(l)
	if last.Kind != wire.EventEvacuationEnded || !strings.Contains(last.Reason, "expired") {
		t.Fatalf("event %+v", last)
	}
}

func TestEvacuateValidates(t *testing.T) {
	l := zonedLog(t, time.Minute)
	for _, tc := range []struct {
		req   wire.EvacuateRequest
		field string
	}{
		{wire.EvacuateRequest{}, "zone"},
		{wire.EvacuateRequest{Zone: "A_1"}, "zone"},
		{wire.EvacuateRequest{Zone: "a", Service: "web"}, "service"},
		{wire.EvacuateRequest{Zone: "a", Expires: wire.Duration(8 * 24 * time.Hour)}, "expires"},
		{wire.EvacuateRequest{Zone: "a", Undo: true, Force: true}, "undo"},
	} {
		r := l.apply(evacCmd(tc.req))
		var fe *wire.FieldError
		if !errors.As(r.Err, &fe) || fe.Field != tc.field {
			t.Errorf("%+v: %v, want a field error on %s", tc.req, r.Err, tc.field)
		}
	}
	if len(l.f.evacs) != 0 {
		t.Fatal("an invalid request started an evacuation")
	}
}

// An instance served only because the guard disregards health is no
// capacity: the rest of a service at the guard cannot carry a zone.
func TestEvacuateDisregardedIsNoCapacity(t *testing.T) {
	l := zonedLog(t, time.Minute)
	for _, id := range []string{"b1", "b2", "c1", "c2"} {
		in := instanceOf(t, l.f, webKey(id))
		l.must(command{Op: opHealth, Actor: "evaluator@n1", Health: []HealthUpdate{{Key: webKey(id),
			Health: wire.Health{Incarnation: in.Incarnation, Verdict: status.Unhealthy, Eligible: true,
				Flags: status.Eligible | status.HealthDisregarded, At: l.now}}}})
	}
	if r := l.apply(evacCmd(wire.EvacuateRequest{Zone: "a"})); !errors.Is(r.Err, ErrCapacity) || !strings.Contains(r.Err.Error(), "keep 0") {
		t.Fatalf("evacuate with the rest under the guard: %v", r.Err)
	}
}

// TestEvacuationEntriesSignalShift: every entry that moves an
// evacuation (start, renewal, undo, expiry, a step of the return) moves
// the shift revision once applied; only a start or a renewal (traffic
// must leave the zone) calls onShift, so that the table builder
// publishes it at once, while the return's moves wait for each node's
// round. A refused evacuation, a step that changes nothing and entries
// about something else do neither.
func TestEvacuationEntriesSignalShift(t *testing.T) {
	l := zonedLog(t, 100*time.Second)
	shifts := 0
	l.f.onShift = func() {
		if !l.f.mu.TryLock() {
			t.Error("onShift called under the fsm's lock")
			return
		}
		l.f.mu.Unlock()
		shifts++
	}
	moves, last := 0, l.f.shiftRev
	want := func(what string, n, m int) {
		t.Helper()
		if l.f.shiftRev != last {
			moves, last = moves+1, l.f.shiftRev
		}
		if shifts != n || moves != m {
			t.Fatalf("%s: onShift called %d times in all, the shift revision moved %d times; want %d and %d", what, shifts, moves, n, m)
		}
	}
	withdraw(l, t, "b1")
	want("a withdrawal", 0, 0)
	r := l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Expires: wire.Duration(time.Hour)}))
	want("a start", 1, 1)
	l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Reason: "renewed", Expires: wire.Duration(time.Hour)}))
	want("a renewal", 2, 2)
	if r := l.apply(evacCmd(wire.EvacuateRequest{Zone: "b", Namespace: "prod", Service: "nope"})); r.Err == nil {
		t.Fatal("an evacuation of an unknown service was accepted")
	}
	want("a refusal", 2, 2)
	// A step naming the evacuation before its expiry changes nothing.
	id := r.Evacuation.ID
	l.must(command{Op: opEvacuationStep, At: l.now.Add(time.Minute), Actor: "node:n1", EvacSteps: []evacStep{{ID: id, Expire: true}}})
	want("an expiry applied early", 2, 2)
	l.must(command{Op: opEvacuationStep, At: l.now.Add(2 * time.Hour), Actor: "node:n1", EvacSteps: []evacStep{{ID: id, Expire: true}}})
	want("the expiry", 2, 3)
	l.must(command{Op: opEvacuationStep, At: l.now.Add(3 * time.Hour), Actor: "node:n1",
		EvacSteps: []evacStep{{ID: id, Returned: wire.Duration(30 * time.Second)}}})
	want("a step of the return", 2, 4)
	l.must(evacCmd(wire.EvacuateRequest{Zone: "c"}))
	want("a second evacuation started", 3, 5)
	l.must(evacCmd(wire.EvacuateRequest{Zone: "c", Undo: true}))
	want("the second evacuation undone", 3, 6)
}

// TestReturnHeldWithoutLeader: ten minutes without a leader in the
// middle of a return count for nothing; the new leader carries on from
// the share the log held.
func TestReturnHeldWithoutLeader(t *testing.T) {
	l := zonedLog(t, 100*time.Second)
	l.must(evacCmd(wire.EvacuateRequest{Zone: "a"}))
	r := l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Undo: true}))
	id, start := r.Evacuation.ID, l.now
	at := start.Add(25 * time.Second)
	l.f.mu.RLock()
	s := l.f.evacuationSteps(at)
	l.f.mu.RUnlock()
	l.must(command{Op: opEvacuationStep, At: at, Actor: "node:n1", EvacSteps: s})
	// The last entry of the old term at +27 s; a new leader at +10 min.
	silent, takeover := start.Add(27*time.Second), start.Add(10*time.Minute)
	l.must(command{Op: opLeader, At: takeover, Actor: "node:n2", Grace: true, SilentSince: silent})
	e := l.f.evacs[id]
	if e.Returned.D() != 27*time.Second || !e.ReturnedAt.Equal(takeover) {
		t.Fatalf("after the takeover: returned %s at %s; want 27s at the takeover", e.Returned, e.ReturnedAt)
	}
	l.f.mu.RLock()
	s = l.f.evacuationSteps(takeover.Add(time.Second))
	l.f.mu.RUnlock()
	if len(s) != 0 {
		t.Fatalf("the new leader's first tick steps %+v; the share has not moved", s)
	}
	if got := e.Share(100 * time.Second); got != 0.3 {
		t.Fatalf("share %v, want 0.3", got)
	}
}

// TestUndoResumesAPausedReturn: a return held by an instance that stays
// down moves on when the operator undoes again, counting from the
// instances withdrawn now; a zone of nothing is refused unless forced.
func TestUndoResumesAPausedReturn(t *testing.T) {
	l := zonedLog(t, 100*time.Second)
	l.must(evacCmd(wire.EvacuateRequest{Zone: "a"}))
	id := l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Undo: true})).Evacuation.ID
	withdraw(l, t, "a1")
	l.f.mu.RLock()
	s := l.f.evacuationSteps(l.now.Add(time.Second))
	l.f.mu.RUnlock()
	l.must(command{Op: opEvacuationStep, At: l.now.Add(time.Second), Actor: "node:n1", EvacSteps: s})
	if l.f.evacs[id].State() != "paused" {
		t.Fatalf("state %s, want paused", l.f.evacs[id].State())
	}
	r := l.must(evacCmd(wire.EvacuateRequest{Zone: "a", Undo: true}))
	if e := r.Evacuation; e.State() != "returning" || e.Baseline != 1 || e.ID != id {
		t.Fatalf("after a second undo: %+v", e)
	}
	l.f.mu.RLock()
	s = l.f.evacuationSteps(l.now.Add(time.Second))
	l.f.mu.RUnlock()
	for _, st := range s {
		if st.Paused {
			t.Fatalf("paused again by the instance the undo counted: %+v", st)
		}
	}
	last := lastEvent(l)
	if last.Kind != wire.EventEvacuationPaused || last.From != "paused" || last.To != "returning" {
		t.Fatalf("event %+v", last)
	}
	if r := l.apply(evacCmd(wire.EvacuateRequest{Zone: "typo"})); !errors.Is(r.Err, ErrNotFound) || !strings.Contains(r.Err.Error(), "holds no instance") {
		t.Fatalf("a zone of nothing: %v", r.Err)
	}
	l.must(evacCmd(wire.EvacuateRequest{Zone: "typo", Force: true}))
}

// TestEvacuationsBounded: past MaxEvacuations in force a new one is
// refused, force or not, and changes nothing; renewing one in force is
// not a new one.
func TestEvacuationsBounded(t *testing.T) {
	l := zonedLog(t, time.Minute)
	for i := range MaxEvacuations {
		l.must(evacCmd(wire.EvacuateRequest{Zone: fmt.Sprintf("z%d", i), Force: true}))
	}
	r := l.apply(evacCmd(wire.EvacuateRequest{Zone: "a", Force: true}))
	if !errors.Is(r.Err, ErrCapacity) || !strings.Contains(r.Err.Error(), "evacuations are in force") {
		t.Fatalf("one past the bound: %v", r.Err)
	}
	if len(l.f.evacs) != MaxEvacuations {
		t.Fatalf("%d evacuations in force", len(l.f.evacs))
	}
	l.must(evacCmd(wire.EvacuateRequest{Zone: "z0", Reason: "renewed", Force: true}))
}
