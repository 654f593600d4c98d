package store_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/store/storetest"
	"github.com/cairn-sd/cairn/wire"
)

// sampleHealth is a committed verdict with every field set, for
// incarnation inc.
func sampleHealth(inc uint64, at time.Time) wire.Health {
	return wire.Health{
		Incarnation: inc, Verdict: status.Unhealthy, Eligible: false, HealthEligible: false, Flags: 1 << 4,
		EligibleSince: at.Add(-time.Hour), FailingSince: at.Add(-time.Minute),
		Failing: []wire.FailingClass{
			{Class: "probe", Since: at.Add(-time.Minute), Hard: true, Why: "hard failure (connection refused)"},
			{Class: "outcome", Since: at.Add(-30 * time.Second), Why: "3 consecutive failures"},
		},
		QuarantineLevel: 2, QuarantineUntil: at.Add(2 * time.Minute),
		Reasons:  []string{"probe failing: hard failure (connection refused)", "lease expired (silence)"},
		Evidence: &wire.Evidence{Class: "probe", Observer: "n2", At: at.Add(-time.Minute)},
		At:       at,
	}
}

func healthOf(t *testing.T, s *store.Store, id string) *wire.Health {
	t.Helper()
	in, ok := s.Instance(key(id))
	if !ok {
		t.Fatalf("instance %s is missing", id)
	}
	return in.Health
}

// TestCommitHealth: a commit lands on the current incarnation of a live
// instance only, records each transition with its evidence and each
// evaluator event, and ignores what is not the evaluator's.
func TestCommitHealth(t *testing.T) {
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	n := storetest.Single(t, store.Config{Now: clk.Now})
	ctx := t.Context()
	mustApply(t, n.Store, webService(time.Hour))
	a := mustRegister(t, n.Store, registration("a", "10.0.0.1"))
	b := mustRegister(t, n.Store, registration("b", "10.0.0.2"))
	c := mustRegister(t, n.Store, registration("c", "10.0.0.3"))
	if _, err := n.Deregister(ctx, "admin", key("c"), c.Incarnation); err != nil {
		t.Fatal(err)
	}
	if h := healthOf(t, n.Store, "a"); h != nil {
		t.Fatalf("a new registration carries health %+v, want none", h)
	}
	clk.Advance(time.Minute)
	now := clk.Now()
	before := len(n.Events("prod", "web", 0))

	ha := sampleHealth(a.Incarnation, now)
	ups := []store.HealthUpdate{
		{Key: key("a"), Health: ha, Transition: &store.Transition{From: "eligible/unknown", To: "withdrawn/unhealthy", Reason: ha.Reasons[0]}},
		{Key: key("b"), Health: sampleHealth(b.Incarnation+1, now), Transition: &store.Transition{From: "x", To: "y", Reason: "future incarnation"}},
		{Key: key("b"), Health: sampleHealth(b.Incarnation-1, now), Transition: &store.Transition{From: "x", To: "y", Reason: "older incarnation"}},
		{Key: key("c"), Health: sampleHealth(c.Incarnation, now), Transition: &store.Transition{From: "x", To: "y", Reason: "terminated"}},
		{Key: key("zz"), Health: sampleHealth(1, now), Transition: &store.Transition{From: "x", To: "y", Reason: "unknown instance"}},
	}
	evs := []store.ServiceEvent{
		{Kind: wire.EventHealthDisregarded, Namespace: "prod", Service: "web", Detail: "1 of 4 ready instances healthy"},
		{Kind: wire.EventQuarantined, Namespace: "prod", Service: "web", Instance: "a", Incarnation: a.Incarnation, Detail: "quarantined for 1m0s (level 1)"},
		{Kind: wire.EventHealthRestored, Namespace: "prod", Service: "web", Detail: "4 of 4 ready instances healthy"},
		{Kind: wire.EventRegistered, Namespace: "prod", Service: "web", Detail: "not the evaluator's kind"},
		{Kind: wire.EventHealthDisregarded, Namespace: "prod", Service: "nope", Detail: "unknown service"},
	}
	if err := n.CommitHealth(ctx, "evaluator@n1", ups, evs); err != nil {
		t.Fatalf("CommitHealth: %v", err)
	}
	if got := healthOf(t, n.Store, "a"); got == nil || !reflect.DeepEqual(*got, ha) {
		t.Errorf("a's health\n%+v\nwant\n%+v", got, ha)
	}
	if got := healthOf(t, n.Store, "b"); got != nil {
		t.Errorf("an update for another incarnation landed on b: %+v", got)
	}
	if got := healthOf(t, n.Store, "c"); got != nil {
		t.Errorf("an update landed on terminated c: %+v", got)
	}
	if _, ok := n.Instance(key("zz")); ok {
		t.Errorf("an update created instance zz")
	}

	got := n.Events("prod", "web", 0)[before:]
	want := []wire.Event{
		{At: now, Kind: wire.EventEligibility, Namespace: "prod", Service: "web", Instance: "a", Incarnation: a.Incarnation,
			From: "eligible/unknown", To: "withdrawn/unhealthy", Reason: ha.Reasons[0], Evidence: ha.Evidence, Actor: "evaluator@n1"},
		{At: now, Kind: wire.EventHealthDisregarded, Namespace: "prod", Service: "web", Reason: "1 of 4 ready instances healthy", Actor: "evaluator@n1"},
		{At: now, Kind: wire.EventQuarantined, Namespace: "prod", Service: "web", Instance: "a", Incarnation: a.Incarnation,
			Reason: "quarantined for 1m0s (level 1)", Actor: "evaluator@n1"},
		{At: now, Kind: wire.EventHealthRestored, Namespace: "prod", Service: "web", Reason: "4 of 4 ready instances healthy", Actor: "evaluator@n1"},
	}
	for i := range got {
		got[i].Seq = 0
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events\n%+v\nwant\n%+v", got, want)
	}

	// A reader's copy is its own.
	in, _ := n.Instance(key("a"))
	in.Health.Reasons[0] = "changed"
	in.Health.Failing[0].Why = "changed"
	in.Health.Evidence.Observer = "changed"
	if again := healthOf(t, n.Store, "a"); !reflect.DeepEqual(*again, ha) {
		t.Errorf("changing a read copy changed the store: %+v", again)
	}

	// The next verdict replaces the last.
	clk.Advance(time.Second)
	healed := wire.Health{Incarnation: a.Incarnation, Verdict: status.Healthy, Eligible: true, HealthEligible: true, Flags: 1,
		EligibleSince: clk.Now(), At: clk.Now()}
	if err := n.CommitHealth(ctx, "evaluator@n1", []store.HealthUpdate{{Key: key("a"), Health: healed}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := healthOf(t, n.Store, "a"); got == nil || !reflect.DeepEqual(*got, healed) {
		t.Errorf("a's health after the second commit %+v, want %+v", got, healed)
	}
	if got := len(n.Events("prod", "web", 0)); got != before+len(want) {
		t.Errorf("an update without a transition recorded %d events", got-before-len(want))
	}
	if got := healthOf(t, n.Store, "a").String(); got != "healthy eligible" {
		t.Errorf("Health.String() = %q, want %q", got, "healthy eligible")
	}

	// A retry of the committed registration keeps the verdict; a new
	// registration (a new incarnation) starts without one, and a late
	// verdict about its predecessor does not land on it.
	if retry := mustRegister(t, n.Store, registration("a", "10.0.0.1")); retry.Incarnation != a.Incarnation || retry.Health == nil {
		t.Errorf("an identical retry: incarnation %d, health %+v; want %d with its health", retry.Incarnation, retry.Health, a.Incarnation)
	}
	re := registration("a", "10.0.0.9")
	re.Replaces = a.Incarnation
	a2 := mustRegister(t, n.Store, re)
	if a2.Incarnation == a.Incarnation || a2.Health != nil {
		t.Fatalf("re-registration: incarnation %d (was %d), health %+v; want a new incarnation without health", a2.Incarnation, a.Incarnation, a2.Health)
	}
	if err := n.CommitHealth(ctx, "evaluator@n1", []store.HealthUpdate{{Key: key("a"), Health: healed}}, nil); err != nil {
		t.Fatal(err)
	}
	if got := healthOf(t, n.Store, "a"); got != nil {
		t.Errorf("a verdict about incarnation %d landed on incarnation %d: %+v", a.Incarnation, a2.Incarnation, got)
	}
}

func TestCommitHealthLimits(t *testing.T) {
	n := storetest.Single(t, store.Config{})
	ctx := t.Context()
	mustApply(t, n.Store, webService(time.Hour))
	rev := n.Revision()

	if err := n.CommitHealth(ctx, "evaluator@n1", nil, nil); err != nil {
		t.Errorf("an empty commit: %v, want nil", err)
	}
	if got := n.Revision(); got != rev {
		t.Errorf("an empty commit moved the revision from %d to %d", rev, got)
	}

	many := make([]store.HealthUpdate, store.MaxHealthUpdates+1)
	for i := range many {
		many[i] = store.HealthUpdate{Key: key(fmt.Sprintf("i%d", i)), Health: wire.Health{Incarnation: 1, Verdict: status.Healthy}}
	}
	err := n.CommitHealth(ctx, "evaluator@n1", many, nil)
	var fe *wire.FieldError
	if !errors.Is(err, wire.ErrInvalid) || !errors.As(err, &fe) || fe.Field != "updates" ||
		!strings.Contains(err.Error(), fmt.Sprint(store.MaxHealthUpdates)) || !strings.Contains(err.Error(), fmt.Sprint(len(many))) {
		t.Fatalf("%d updates: error %v, want ErrInvalid on field updates naming the limit and the count", len(many), err)
	}
	if got := n.Revision(); got != rev {
		t.Errorf("a refused commit moved the revision from %d to %d", rev, got)
	}
	// The limit itself is one log entry (of updates about nothing).
	if err := n.CommitHealth(ctx, "evaluator@n1", many[:store.MaxHealthUpdates], nil); err != nil {
		t.Errorf("%d updates: %v, want accepted", store.MaxHealthUpdates, err)
	}
	if got := n.Revision(); got != rev+1 {
		t.Errorf("revision %d after one commit at %d, want one entry", got, rev)
	}
}

// TestCommitHealthOnFollower: only the leader commits.
func TestCommitHealthOnFollower(t *testing.T) {
	nodes := storetest.Cluster(t, 3)
	leader := storetest.Leader(t, nodes)
	mustApply(t, leader.Store, webService(time.Hour))
	a := mustRegister(t, leader.Store, registration("a", "10.0.0.1"))
	up := []store.HealthUpdate{{Key: key("a"), Health: wire.Health{Incarnation: a.Incarnation, Verdict: status.Healthy, Eligible: true}}}
	for _, f := range followers(nodes, leader) {
		storetest.WaitFor(t, wait, func() error {
			if _, ok := f.Instance(key("a")); !ok {
				return fmt.Errorf("%s has not seen instance a", f.NodeID())
			}
			return nil
		})
		if err := f.CommitHealth(t.Context(), "evaluator@"+f.NodeID(), up, nil); !errors.Is(err, store.ErrNotLeader) {
			t.Errorf("CommitHealth on follower %s: %v, want ErrNotLeader", f.NodeID(), err)
		}
	}
	if err := leader.CommitHealth(t.Context(), "evaluator@"+leader.NodeID(), up, nil); err != nil {
		t.Fatal(err)
	}
	// Every replica holds the verdict.
	for _, nd := range nodes {
		storetest.WaitFor(t, wait, func() error {
			if in, _ := nd.Instance(key("a")); in.Health == nil || !in.Health.Eligible {
				return fmt.Errorf("%s holds %+v", nd.NodeID(), in.Health)
			}
			return nil
		})
	}
}

// TestHealthSurvivesRestart: committed verdicts and their events come
// back from a snapshot and from the log after it.
func TestHealthSurvivesRestart(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	cfg := store.Config{DataDir: dir, Now: clk.Now}
	n := storetest.Single(t, cfg)
	ctx := t.Context()
	mustApply(t, n.Store, webService(time.Hour))
	a := mustRegister(t, n.Store, registration("a", "10.0.0.1"))
	b := mustRegister(t, n.Store, registration("b", "10.0.0.2"))
	commit := func(in wire.Instance) {
		t.Helper()
		clk.Advance(time.Second)
		up := store.HealthUpdate{Key: in.Key(), Health: sampleHealth(in.Incarnation, clk.Now()),
			Transition: &store.Transition{From: "eligible/unknown", To: "withdrawn/unhealthy", Reason: "probe failing"}}
		ev := store.ServiceEvent{Kind: wire.EventQuarantined, Namespace: "prod", Service: "web", Instance: in.ID,
			Incarnation: in.Incarnation, Detail: "quarantined"}
		if err := n.CommitHealth(ctx, "evaluator@n1", []store.HealthUpdate{up}, []store.ServiceEvent{ev}); err != nil {
			t.Fatal(err)
		}
	}
	commit(a)
	if err := n.Snapshot(); err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	commit(b) // only in the log
	wantA, wantB := healthOf(t, n.Store, "a"), healthOf(t, n.Store, "b")
	if wantA == nil || wantB == nil {
		t.Fatal("commits did not land")
	}
	wantEvents := n.Events("", "", 0)
	wantRev := n.Revision()
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}

	n = storetest.Single(t, cfg)
	storetest.WaitFor(t, wait, func() error {
		if n.Revision() < wantRev {
			return fmt.Errorf("revision %d, want at least %d", n.Revision(), wantRev)
		}
		return nil
	})
	if got := healthOf(t, n.Store, "a"); !reflect.DeepEqual(got, wantA) {
		t.Errorf("a's health from the snapshot\n%+v\nwant\n%+v", got, wantA)
	}
	if got := healthOf(t, n.Store, "b"); !reflect.DeepEqual(got, wantB) {
		t.Errorf("b's health from the log\n%+v\nwant\n%+v", got, wantB)
	}
	if got := n.Events("", "", 0); !reflect.DeepEqual(got[:len(wantEvents)], wantEvents) {
		t.Errorf("events after restart\n%+v\nwant them to start with\n%+v", got, wantEvents)
	}
}
