package store

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
	"pgregory.net/rapid"
)

// The property tests run with rapid's default number of checks in make
// test; run more with, for example,
//
//	go test -run TestProp ./store -rapid.checks=1000

var (
	propIDs   = []string{"a", "b", "c"}
	propAddrs = [][]string{{"10.0.0.1"}, {"10.0.0.2"}, {"10.0.0.1", "10.0.0.2"}, {"10.0.0.2", "10.0.0.1"}, {"2001:db8::1"}}
	propPorts = []map[string]int{{"http": 8080}, {"http": 8081}, {"http": 8080, "admin": 9090}}
	// A registration's weight and TTL: 0 takes the default, so 0 and
	// the default are the same registration.
	propWeights = []int{0, wire.DefaultWeight, 7}
	propTTLs    = []wire.Duration{0, wire.Duration(30 * time.Second), wire.Duration(5 * time.Second)}
	propPlaces  = [][2]string{{"", ""}, {"eu", "eu-1"}, {"eu", "eu-2"}}
	propLife    = []string{"", "starting", "ready"}
	propReports = []wire.Report{
		{Ready: true},
		{Ready: false},
		{Ready: true, Dependencies: map[string]wire.DependencyState{"db": wire.DepOK}},
		{Ready: true, Dependencies: map[string]wire.DependencyState{"db": wire.DepFailed, "cache": wire.DepDegraded}},
		{Ready: true, Dependencies: map[string]wire.DependencyState{"queue": wire.DepOK}}, // undeclared
	}
)

func genRegistration(id string) *rapid.Generator[wire.Registration] {
	return rapid.Custom(func(t *rapid.T) wire.Registration {
		place := rapid.SampledFrom(propPlaces).Draw(t, "place")
		return wire.Registration{
			ID:        id,
			Addresses: slices.Clone(rapid.SampledFrom(propAddrs).Draw(t, "addrs")),
			Ports:     maps.Clone(rapid.SampledFrom(propPorts).Draw(t, "ports")),
			Region:    place[0], Zone: place[1],
			Weight:    rapid.SampledFrom(propWeights).Draw(t, "weight"),
			LeaseTTL:  rapid.SampledFrom(propTTLs).Draw(t, "ttl"),
			Lifecycle: rapid.SampledFrom(propLife).Draw(t, "lifecycle"),
			// A registration id is usually absent, sometimes one of two
			// boot ids: a new id must fence the old process.
			RegistrationID: rapid.SampledFrom([]string{"", "", "boot-1", "boot-2"}).Draw(t, "registration id"),
			// A deploy ramp is usually absent: part of the content.
			Ramp: rapid.SampledFrom([]wire.Duration{0, 0, wire.Duration(20 * time.Second), wire.Duration(time.Minute)}).Draw(t, "ramp"),
		}
	})
}

// genHealth draws a committed verdict about incarnation inc, decided at
// at. Its lists are nil or non-empty: a leader's JSON encoding drops an
// empty list, so the FSM never holds one.
func genHealth(t *rapid.T, inc uint64, at time.Time) wire.Health {
	ago := func(label string) time.Time {
		return at.Add(-time.Duration(rapid.IntRange(0, 120).Draw(t, label)) * time.Second)
	}
	h := wire.Health{
		Incarnation:    inc,
		Verdict:        rapid.SampledFrom([]status.Verdict{status.Unknown, status.Healthy, status.Degraded, status.Unhealthy, status.Quarantined}).Draw(t, "verdict"),
		Eligible:       rapid.Bool().Draw(t, "eligible"),
		HealthEligible: rapid.Bool().Draw(t, "health eligible"),
		Flags:          status.Flags(rapid.IntRange(0, 63).Draw(t, "flags")),
		Reasons:        slices.Clone(rapid.SampledFrom([][]string{nil, {"probe failing: 3 consecutive failures"}, {"lifecycle draining", "slow start"}}).Draw(t, "reasons")),
		At:             at,
	}
	if h.Eligible {
		h.EligibleSince = ago("eligible since")
	}
	if !h.HealthEligible {
		h.FailingSince = ago("failing since")
		if rapid.Bool().Draw(t, "failing") {
			h.Failing = []wire.FailingClass{{Class: rapid.SampledFrom([]string{"probe", "outcome"}).Draw(t, "class"),
				Since: h.FailingSince, Hard: rapid.Bool().Draw(t, "hard"), Why: "3 consecutive failures"}}
		}
	}
	if rapid.Bool().Draw(t, "evidence") {
		h.Evidence = &wire.Evidence{Class: "probe", Observer: rapid.SampledFrom([]string{"n1", "n2"}).Draw(t, "observer"), At: ago("evidence at")}
	}
	if h.Verdict == status.Quarantined {
		h.QuarantineLevel = rapid.IntRange(1, 3).Draw(t, "quarantine level")
		h.QuarantineUntil = at.Add(time.Minute)
	}
	return h
}

// genTransition draws the audit record of a health update, or none.
func genTransition(t *rapid.T) *Transition {
	if !rapid.Bool().Draw(t, "transition") {
		return nil
	}
	return &Transition{From: "eligible/unknown", To: rapid.SampledFrom([]string{"withdrawn/unhealthy", "eligible/healthy"}).Draw(t, "to"),
		Reason: "probe failing: 3 consecutive failures"}
}

// genServiceEvents draws evaluator events, some of a kind or about a
// service the FSM must ignore.
func genServiceEvents(t *rapid.T) []ServiceEvent {
	var out []ServiceEvent
	for i := range rapid.IntRange(0, 2).Draw(t, "service events") {
		out = append(out, ServiceEvent{
			Kind:      rapid.SampledFrom([]wire.EventKind{wire.EventHealthDisregarded, wire.EventHealthRestored, wire.EventQuarantined, wire.EventRegistered}).Draw(t, "kind"),
			Namespace: "prod", Service: rapid.SampledFrom([]string{"web", "web", "nope"}).Draw(t, "service"),
			Instance: rapid.SampledFrom(propIDs).Draw(t, "instance"), Incarnation: uint64(i), Detail: "1 of 2 ready instances healthy",
		})
	}
	return out
}

// evaluatorEvents counts the events of evs the FSM records.
func evaluatorEvents(evs []ServiceEvent) uint64 {
	var n uint64
	for _, e := range evs {
		switch {
		case e.Namespace != "prod" || e.Service != "web":
		case e.Kind == wire.EventHealthDisregarded, e.Kind == wire.EventHealthRestored, e.Kind == wire.EventQuarantined:
			n++
		}
	}
	return n
}

// fencingModel is what the FSM must hold, computed independently of it
// from the rules of SPEC §1: the expected record of every instance.
type fencingModel struct {
	l         *fsmLog
	svc       wire.Service
	instances map[string]*wire.Instance
	issued    map[string][]uint64 // every incarnation issued, per id
	maxInc    uint64              // the largest incarnation issued
	events    uint64
}

func newFencingModel(t *rapid.T) *fencingModel {
	m := &fencingModel{l: newLog(t), svc: webService().WithDefaults(),
		instances: map[string]*wire.Instance{}, issued: map[string][]uint64{}}
	m.l.must(applySvc(webService()))
	m.events = 1
	return m
}

// tick advances the clock by 1–5 s and returns the time of the next entry.
func (m *fencingModel) tick(t *rapid.T) time.Time {
	m.l.now = m.l.now.Add(time.Duration(rapid.IntRange(0, 4).Draw(t, "tick")) * time.Second)
	return m.l.now.Add(time.Second) // what l.apply stamps
}

// drawInc draws the incarnation a mutation carries: the current one, or
// more often a stale, older, future or made-up one.
func (m *fencingModel) drawInc(t *rapid.T, id string) uint64 {
	var cur uint64
	if in := m.instances[id]; in != nil {
		cur = in.Incarnation
	}
	choices := []uint64{cur, cur + 1, cur + 5, 0, rapid.Uint64Range(0, m.maxInc+2).Draw(t, "any")}
	if cur > 0 {
		choices = append(choices, cur-1)
	}
	choices = append(choices, m.issued[id]...)
	return rapid.SampledFrom(choices).Draw(t, "inc")
}

func (m *fencingModel) stateOf(id string) (wire.Instance, bool) {
	m.l.f.mu.RLock()
	defer m.l.f.mu.RUnlock()
	in := m.l.f.instances.get(webKey(id))
	if in == nil {
		return wire.Instance{}, false
	}
	return cloneInstance(in.view()), true
}

func sameRegistration(r wire.Registration, in *wire.Instance) bool {
	return slices.Equal(r.Addresses, in.Addresses) && maps.Equal(r.Ports, in.Ports) &&
		r.Region == in.Region && r.Zone == in.Zone && r.Weight == in.Weight && r.LeaseTTL == in.LeaseTTL &&
		r.RegistrationID == in.RegistrationID && r.Ramp == in.Ramp
}

// drawReplaces draws what a registration says it replaces: mostly
// nothing, otherwise the current incarnation or any other.
func (m *fencingModel) drawReplaces(t *rapid.T, id string) uint64 {
	if rapid.IntRange(0, 2).Draw(t, "names what it replaces") == 0 {
		return 0
	}
	return m.drawInc(t, id)
}

// registrationFenced is the model's own statement of the fencing rules
// of a registration (SPEC §1, issue 8): it returns why reg (normalised)
// may not take the place of old, or "".
func registrationFenced(old *wire.Instance, reg wire.Registration) string {
	switch {
	case old == nil:
		return ""
	case reg.RegistrationID != "" && slices.Contains(old.RetiredRegistrationIDs, reg.RegistrationID):
		return "a retired registration id"
	case (old.Lifecycle == status.Starting || old.Lifecycle == status.Ready) && sameRegistration(reg, old):
		return "" // a retry
	case reg.Replaces != 0 && reg.Replaces != old.Incarnation:
		return "replaces names another incarnation"
	case reg.Replaces == 0 && reg.RegistrationID == "" && old.Lifecycle != status.Terminated:
		return "replaces a live record it does not name"
	}
	return ""
}

func (m *fencingModel) register(t *rapid.T) {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	reg := genRegistration(id).Draw(t, "registration")
	reg.Replaces = m.drawReplaces(t, id)
	at := m.tick(t)
	c := command{Op: opRegister, Actor: "registrar", Key: webKey(id), Register: &reg}
	before := withoutRev(m.l.f)
	r := m.l.apply(c)
	ttlDefault := reg.LeaseTTL == 0
	// The model's own normalisation.
	if reg.Weight == 0 {
		reg.Weight = wire.DefaultWeight
	}
	if reg.LeaseTTL == 0 {
		reg.LeaseTTL = m.svc.Policy.LeaseTTL
	}
	if reg.Lifecycle == "" {
		reg.Lifecycle = "ready"
	}
	old := m.instances[id]
	// A starting or ready record past its hard expiry is over, ended or
	// not yet: a registration is fenced as if it had ended, and ends it.
	over := old != nil && (old.Lifecycle == status.Starting || old.Lifecycle == status.Ready) && old.LeaseTTL > 0 &&
		!at.Before(old.LeaseDeadline.Add((HardExpiryTTLs-1)*old.LeaseTTL.D()))
	against := old
	if over {
		ended := *old
		ended.Lifecycle = status.Terminated
		against = &ended
	}
	if why := registrationFenced(against, reg); why != "" {
		// Fenced: nothing changes, not even the audit trail.
		if !errors.Is(r.Err, ErrFenced) {
			t.Fatalf("registration of %s (%s, current %+v): %+v, %v; want ErrFenced", id, why, old, r.Instance, r.Err)
		}
		if after := withoutRev(m.l.f); !reflect.DeepEqual(before, after) {
			t.Fatalf("a fenced registration (%s) changed the state", why)
		}
		return
	}
	if r.Err != nil {
		t.Fatalf("registration refused: %v", r.Err)
	}
	if over {
		old.Lifecycle, old.TerminatedAt = status.Terminated, at
		m.events++ // expired
	}
	if old != nil && (old.Lifecycle == status.Starting || old.Lifecycle == status.Ready) && sameRegistration(reg, old) {
		if r.Created || r.Instance.Incarnation != old.Incarnation {
			t.Fatalf("identical retry of live %s (incarnation %d): created=%t incarnation %d, want the committed one",
				id, old.Incarnation, r.Created, r.Instance.Incarnation)
		}
		if d := at.Add(old.LeaseTTL.D()); d.After(old.LeaseDeadline) {
			old.LeaseDeadline = d
		}
		// A retry may move starting → ready, never back.
		if old.Lifecycle == status.Starting && reg.Lifecycle == "ready" {
			old.Lifecycle = status.Ready
			m.events++
		}
		return
	}
	if !r.Created || r.Instance.Incarnation <= m.maxInc {
		t.Fatalf("new registration of %s: created=%t incarnation %d, want a new incarnation > %d",
			id, r.Created, r.Instance.Incarnation, m.maxInc)
	}
	m.maxInc = r.Instance.Incarnation
	m.issued[id] = append(m.issued[id], m.maxInc)
	var retired []string
	if old != nil {
		retired = slices.Clone(old.RetiredRegistrationIDs)
		if old.RegistrationID != "" && old.RegistrationID != reg.RegistrationID {
			retired = append(retired, old.RegistrationID)
		}
		if len(retired) > maxRetiredIDs {
			retired = retired[len(retired)-maxRetiredIDs:]
		}
	}
	m.instances[id] = &wire.Instance{
		RetiredRegistrationIDs: retired, LeaseTTLDefault: ttlDefault,
		Namespace: "prod", Service: "web", ID: id, Incarnation: m.maxInc,
		Addresses: reg.Addresses, Ports: reg.Ports, Region: reg.Region, Zone: reg.Zone,
		Weight: reg.Weight, Lifecycle: mustLifecycle(t, reg.Lifecycle), LeaseTTL: reg.LeaseTTL,
		LeaseDeadline: at.Add(reg.LeaseTTL.D()), Registrar: "registrar", RegistrationID: reg.RegistrationID, Ramp: reg.Ramp,
		SourceRevision: m.l.index, RegisteredAt: at,
	}
	m.events++
}

func (m *fencingModel) badRegister(t *rapid.T) {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	reg := genRegistration(id).Draw(t, "registration")
	reg.Addresses = []string{rapid.SampledFrom([]string{"not-an-ip", "010.0.0.1", "::ffff:10.0.0.1", "fe80::1%eth0"}).Draw(t, "bad address")}
	m.tick(t)
	before := withoutRev(m.l.f)
	r := m.l.apply(command{Op: opRegister, Key: webKey(id), Register: &reg})
	if !errors.Is(r.Err, wire.ErrInvalid) {
		t.Fatalf("registration with address %q: error %v, want ErrInvalid", reg.Addresses[0], r.Err)
	}
	if after := withoutRev(m.l.f); !reflect.DeepEqual(before, after) {
		t.Fatalf("an invalid registration changed the state")
	}
}

// mutation applies c for instance id and checks the fencing rule: a
// mutation without the current incarnation is refused with ErrFenced (or
// ErrNotFound when there is no record) and changes nothing at all.
// It returns the live model record when c carried the current incarnation.
func (m *fencingModel) mutation(t *rapid.T, id string, c command) (*wire.Instance, result) {
	before := withoutRev(m.l.f)
	beforeIn, _ := m.stateOf(id)
	r := m.l.apply(c)
	cur := m.instances[id]
	unchanged := func(want error) {
		t.Helper()
		if !errors.Is(r.Err, want) {
			t.Fatalf("%s of %s with incarnation %d (current %v): error %v, want %v", c.Op, id, c.Incarnation, cur, r.Err, want)
		}
		afterIn, _ := m.stateOf(id)
		if !reflect.DeepEqual(beforeIn, afterIn) {
			t.Fatalf("refused %s changed %s:\nbefore %+v\nafter  %+v", c.Op, id, beforeIn, afterIn)
		}
		if after := withoutRev(m.l.f); !reflect.DeepEqual(before, after) {
			t.Fatalf("refused %s changed the state", c.Op)
		}
	}
	switch {
	case cur == nil:
		unchanged(ErrNotFound)
		return nil, r
	case c.Incarnation != cur.Incarnation:
		unchanged(ErrFenced)
		return nil, r
	case cur.Lifecycle == status.Terminated && c.Op != opDeregister:
		unchanged(ErrFenced)
		return nil, r
	}
	return cur, r
}

func (m *fencingModel) drain(t *rapid.T) {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	at := m.tick(t)
	cur, r := m.mutation(t, id, mutateCmd(opDrain, id, m.drawInc(t, id)))
	if cur == nil {
		return
	}
	if r.Err != nil {
		t.Fatalf("drain of %s refused: %v", id, r.Err)
	}
	if cur.Lifecycle != status.Draining {
		cur.Lifecycle, cur.DrainingSince = status.Draining, at
		m.events++
	}
}

func (m *fencingModel) deregister(t *rapid.T) {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	at := m.tick(t)
	cur, r := m.mutation(t, id, mutateCmd(opDeregister, id, m.drawInc(t, id)))
	if cur == nil {
		return
	}
	if r.Err != nil {
		t.Fatalf("deregistration of %s refused: %v", id, r.Err)
	}
	if cur.Lifecycle != status.Terminated {
		cur.Lifecycle, cur.TerminatedAt = status.Terminated, at
		m.events++
	}
}

func (m *fencingModel) report(t *rapid.T) {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	rep := rapid.SampledFrom(propReports).Draw(t, "report")
	at := m.tick(t)
	before := withoutRev(m.l.f)
	cur, r := m.mutation(t, id, reportCmd(id, m.drawInc(t, id), rep))
	if cur == nil {
		return
	}
	if _, ok := rep.Dependencies["queue"]; ok {
		if !errors.Is(r.Err, wire.ErrInvalid) {
			t.Fatalf("report with an undeclared dependency: error %v, want ErrInvalid", r.Err)
		}
		if after := withoutRev(m.l.f); !reflect.DeepEqual(before, after) {
			t.Fatalf("a refused report changed the state")
		}
		return
	}
	if r.Err != nil {
		t.Fatalf("report of %s refused: %v", id, r.Err)
	}
	prev := cur.Report
	cur.Report = &wire.SelfReport{Ready: rep.Ready, Dependencies: maps.Clone(rep.Dependencies), At: at, Reporter: "instance:" + id}
	if prev == nil || prev.Ready != rep.Ready || !maps.Equal(prev.Dependencies, rep.Dependencies) {
		m.events++
	}
}

// renew is the leader's lease checkpoint: it carries an incarnation too.
func (m *fencingModel) renew(t *rapid.T) {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	inc := m.drawInc(t, id)
	at := m.tick(t)
	d := at.Add(time.Duration(rapid.IntRange(-30, 60).Draw(t, "offset")) * time.Second)
	beforeIn, existed := m.stateOf(id)
	m.l.must(command{Op: opHousekeep, Leases: []leaseUpdate{{fence{webKey(id), inc}, d}}})
	cur := m.instances[id]
	if cur == nil || inc != cur.Incarnation || cur.Lifecycle == status.Terminated {
		if afterIn, _ := m.stateOf(id); existed && !reflect.DeepEqual(beforeIn, afterIn) {
			t.Fatalf("a checkpoint for incarnation %d changed %s:\nbefore %+v\nafter  %+v", inc, id, beforeIn, afterIn)
		}
		return
	}
	if d.After(cur.LeaseDeadline) {
		cur.LeaseDeadline = d
	}
}

func (m *fencingModel) terminate(t *rapid.T) {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	inc := m.drawInc(t, id)
	at := m.tick(t)
	m.l.must(command{Op: opHousekeep, Terminate: []fence{{webKey(id), inc}}})
	if cur := m.instances[id]; cur != nil && cur.Incarnation == inc && cur.Lifecycle == status.Draining {
		cur.Lifecycle, cur.TerminatedAt = status.Terminated, at
		m.events++
	}
}

// expire is the leader's hard expiry: it names an incarnation and the
// lease expiry it judged, and lands only on that incarnation, live, not
// renewed past that expiry, when the entry's time is past the hard
// expiry (4 more TTLs).
func (m *fencingModel) expire(t *rapid.T) {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	cur := m.instances[id]
	inc := m.drawInc(t, id)
	if cur != nil && rapid.Bool().Draw(t, "names the current incarnation") {
		inc = cur.Incarnation
	}
	deadline := m.l.now.Add(time.Duration(rapid.IntRange(-300, 30).Draw(t, "judged expiry")) * time.Second)
	if cur != nil && rapid.Bool().Draw(t, "judged the recorded deadline") {
		deadline = cur.LeaseDeadline.Add(time.Duration(rapid.IntRange(-1, 1).Draw(t, "judged offset")) * time.Second)
	}
	if cur != nil && rapid.Bool().Draw(t, "jump near the hard expiry") {
		// Move the clock to about deadline + 4 TTLs (never back).
		target := deadline.Add(4*cur.LeaseTTL.D() + time.Duration(rapid.IntRange(-1, 1).Draw(t, "jump offset"))*time.Second)
		if target.After(m.l.now.Add(time.Second)) {
			m.l.now = target.Add(-time.Second)
		}
	}
	at := m.tick(t)
	beforeIn, existed := m.stateOf(id)
	m.l.must(command{Op: opHousekeep, Actor: "node:n1", Expire: []leaseUpdate{{fence{webKey(id), inc}, deadline}}})
	if cur == nil || cur.Incarnation != inc || cur.Lifecycle == status.Terminated ||
		cur.LeaseDeadline.After(deadline) || at.Before(deadline.Add(4*cur.LeaseTTL.D())) {
		if afterIn, _ := m.stateOf(id); existed && !reflect.DeepEqual(beforeIn, afterIn) {
			t.Fatalf("an expiry of incarnation %d judged at %v changed %s:\nbefore %+v\nafter  %+v", inc, deadline, id, beforeIn, afterIn)
		}
		return
	}
	cur.Lifecycle, cur.TerminatedAt = status.Terminated, at
	m.events++
}

func (m *fencingModel) prune(t *rapid.T) {
	at := m.tick(t)
	before := at.Add(-time.Duration(rapid.IntRange(0, 60).Draw(t, "age")) * time.Second)
	m.l.must(command{Op: opHousekeep, PruneBefore: before})
	for id, in := range m.instances {
		if in.Lifecycle == status.Terminated && in.TerminatedAt.Before(before) {
			delete(m.instances, id)
		}
	}
}

// health is the evaluator's commit: it lands only on the current
// incarnation of a live instance, and a new incarnation starts without
// it (the model's register leaves Health nil).
func (m *fencingModel) health(t *rapid.T) {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	inc := m.drawInc(t, id)
	at := m.tick(t)
	h := genHealth(t, inc, at)
	tr := genTransition(t)
	evs := genServiceEvents(t)
	beforeIn, existed := m.stateOf(id)
	m.l.must(command{Op: opHealth, Actor: "evaluator@n1", Health: []HealthUpdate{{Key: webKey(id), Health: h, Transition: tr}},
		ServiceEvents: evs})
	m.events += evaluatorEvents(evs)
	cur := m.instances[id]
	if cur == nil || inc != cur.Incarnation || cur.Lifecycle == status.Terminated {
		if afterIn, _ := m.stateOf(id); existed && !reflect.DeepEqual(beforeIn, afterIn) {
			t.Fatalf("health for incarnation %d changed %s:\nbefore %+v\nafter  %+v", inc, id, beforeIn, afterIn)
		}
		return
	}
	cur.Health = &h
	if tr != nil {
		m.events++
	}
}

func (m *fencingModel) check(t *rapid.T) {
	for _, id := range propIDs {
		got, ok := m.stateOf(id)
		want := m.instances[id]
		if ok != (want != nil) {
			t.Fatalf("instance %s present=%t, model says %t", id, ok, want != nil)
		}
		if want == nil {
			continue
		}
		if !reflect.DeepEqual(got, cloneInstance(*want)) {
			t.Fatalf("instance %s\n got %+v\nwant %+v", id, got, cloneInstance(*want))
		}
		if hist := m.issued[id]; got.Incarnation != hist[len(hist)-1] || !slices.IsSorted(hist) {
			t.Fatalf("instance %s has incarnation %d; issued so far %v: incarnations must only grow", id, got.Incarnation, hist)
		}
	}
	if st := m.l.f.state(); st.EventSeq != m.events {
		t.Fatalf("%d audit events, model expects %d", st.EventSeq, m.events)
	}
}

// TestPropFencing: no interleaving of registrations, renewals, drains,
// deregistrations, reports, terminations, hard expiries, pruning and
// evaluator commits carrying random incarnations lets an older (or
// made-up) incarnation change a newer record; incarnations only grow; a
// changed registration that names what it replaces gets a new, larger
// incarnation (without the predecessor's health) while an identical retry
// of a live one gets the committed one, and one that does not is refused
// and changes nothing.
func TestPropFencing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		m := newFencingModel(t)
		t.Repeat(map[string]func(*rapid.T){
			"register":    m.register,
			"badRegister": m.badRegister,
			"drain":       m.drain,
			"deregister":  m.deregister,
			"report":      m.report,
			"renew":       m.renew,
			"terminate":   m.terminate,
			"expire":      m.expire,
			"prune":       m.prune,
			"health":      m.health,
			"":            m.check,
		})
	})
}

// genCommand draws any log entry, valid or not. Its incarnations are
// mostly the current one in ref, the replica the log is applied to, and
// otherwise anything.
func genCommand(t *rapid.T, ref *fsm) command {
	id := rapid.SampledFrom(propIDs).Draw(t, "id")
	var inc uint64
	ref.mu.RLock()
	if in := ref.instances.get(webKey(id)); in != nil {
		inc = in.incarnation
	}
	ref.mu.RUnlock()
	if rapid.IntRange(0, 2).Draw(t, "stale") == 0 {
		inc = rapid.Uint64Range(0, 6).Draw(t, "inc")
	}
	switch op := rapid.IntRange(0, 18).Draw(t, "op"); op {
	case 0:
		svc := webService()
		svc.Policy.DrainWindow = wire.Duration(rapid.SampledFrom([]time.Duration{0, 5 * time.Second, time.Minute}).Draw(t, "drain window"))
		svcs := []wire.Service{svc}
		if rapid.Bool().Draw(t, "two") {
			other := webService()
			other.Namespace = "staging"
			svcs = append(svcs, other)
		}
		if rapid.IntRange(0, 5).Draw(t, "invalid") == 0 {
			bad := webService()
			bad.Ports = nil
			svcs = append(svcs, bad)
		}
		return applySvc(svcs...)
	case 1, 2:
		reg := genRegistration(id).Draw(t, "registration")
		if rapid.Bool().Draw(t, "names what it replaces") {
			reg.Replaces = inc
		}
		return command{Op: opRegister, Actor: "registrar", Key: webKey(id), Register: &reg}
	case 3:
		return mutateCmd(opDrain, id, inc)
	case 4:
		return mutateCmd(opDeregister, id, inc)
	case 5, 6:
		return reportCmd(id, inc, rapid.SampledFrom(propReports).Draw(t, "report"))
	case 7:
		return command{Op: opHousekeep, Actor: "node:n1",
			Leases: []leaseUpdate{{fence{webKey(id), inc}, t0.Add(time.Duration(rapid.IntRange(0, 600).Draw(t, "deadline")) * time.Second)}}}
	case 8:
		return command{Op: opHousekeep, Actor: "node:n1", Terminate: []fence{{webKey(id), inc}}}
	case 17:
		// A hard expiry, judged on any deadline (the entry's time, set by
		// the caller, decides whether it is past).
		return command{Op: opHousekeep, Actor: "node:n1",
			Expire: []leaseUpdate{{fence{webKey(id), inc}, t0.Add(time.Duration(rapid.IntRange(-600, 600).Draw(t, "expired at")) * time.Second)}}}
	case 9:
		return command{Op: opHousekeep, Actor: "node:n1",
			PruneBefore: t0.Add(time.Duration(rapid.IntRange(0, 600).Draw(t, "prune")) * time.Second)}
	case 10:
		n := rapid.SampledFrom([]string{"n1", "n2"}).Draw(t, "node")
		if rapid.Bool().Draw(t, "join") {
			return command{Op: opSetMember, Member: &wire.Member{NodeID: n, RaftAddr: n + ":1", HTTPAddr: n + ":2"}}
		}
		return command{Op: opDelMember, Member: &wire.Member{NodeID: n}}
	case 11:
		kind := rapid.SampledFrom([]wire.EventKind{wire.EventRefused, wire.EventReported}).Draw(t, "kind")
		return command{Op: opAudit, Actor: "api", Event: &wire.Event{Kind: kind, Namespace: "prod", Service: "web", Reason: "test"}}
	case 12:
		return command{Op: opLeader, Actor: "node:n1"}
	case 13:
		acc := rapid.SampledFrom([]string{"ta", "tb"}).Draw(t, "accessor")
		return command{Op: opPutTokens, Actor: "admin", Tokens: []TokenRecord{{Accessor: acc,
			Digest: strings.Repeat(rapid.SampledFrom([]string{"a", "b", "z"}).Draw(t, "digest"), 64),
			Scope:  rapid.SampledFrom([]string{"admin", "reader"}).Draw(t, "scope"), Namespaces: []string{"prod"}, Source: "api"}}}
	case 14:
		return command{Op: opDelToken, Actor: "admin", Accessor: rapid.SampledFrom([]string{"ta", "tb"}).Draw(t, "accessor")}
	case 15, 16:
		// The evaluator's commit: updates for several instances, each
		// for their current incarnation or any, and evaluator events.
		c := command{Op: opHealth, Actor: "evaluator@n1", ServiceEvents: genServiceEvents(t)}
		at := t0.Add(time.Duration(rapid.IntRange(0, 600).Draw(t, "decided")) * time.Second)
		for range rapid.IntRange(0, 3).Draw(t, "updates") {
			id := rapid.SampledFrom(propIDs).Draw(t, "update id")
			var inc uint64
			ref.mu.RLock()
			if in := ref.instances.get(webKey(id)); in != nil {
				inc = in.incarnation
			}
			ref.mu.RUnlock()
			if rapid.IntRange(0, 3).Draw(t, "stale update") == 0 {
				inc = rapid.Uint64Range(0, 6).Draw(t, "update inc")
			}
			c.Health = append(c.Health, HealthUpdate{Key: webKey(id), Health: genHealth(t, inc, at), Transition: genTransition(t)})
		}
		return c
	default:
		return command{Op: "bogus"}
	}
}

// comparable form of a result: errors by message.
type resultView struct {
	Instance wire.Instance
	Created  bool
	Expired  int
	Rev      uint64
	Err      string
}

func viewOf(r result) resultView {
	v := resultView{Instance: r.Instance, Created: r.Created, Expired: r.Expired, Rev: r.Rev}
	if r.Err != nil {
		v.Err = r.Err.Error()
	}
	return v
}

// TestPropSnapshotRestore: restoring a snapshot taken at any point of a
// log and applying the rest of the log gives the same state, and the same
// answers, as applying the whole log.
func TestPropSnapshotRestore(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := newFSM()
		var (
			cmds []command
			want []resultView
			at   = t0
		)
		for i := range rapid.IntRange(1, 60).Draw(t, "entries") {
			c := genCommand(t, a)
			at = at.Add(time.Duration(rapid.IntRange(1, 20).Draw(t, "step")) * time.Second)
			c.At = at
			cmds = append(cmds, c)
			want = append(want, viewOf(applyAt(t, a, uint64(i+1), c)))
		}
		cut := rapid.IntRange(0, len(cmds)).Draw(t, "cut")

		b := newFSM()
		for i, c := range cmds[:cut] {
			applyAt(t, b, uint64(i+1), c)
		}
		c := newFSM()
		roundTrip(t, b, c)
		// Restoring into a replica that already holds other state must
		// discard it.
		d := newFSM()
		for i, c := range cmds {
			applyAt(t, d, uint64(i+1), c)
		}
		roundTrip(t, b, d)

		for _, r := range []struct {
			name string
			f    *fsm
		}{{"fresh", c}, {"dirty", d}} {
			name, f := r.name, r.f
			for i := cut; i < len(cmds); i++ {
				if got := viewOf(applyAt(t, f, uint64(i+1), cmds[i])); !reflect.DeepEqual(got, want[i]) {
					t.Fatalf("%s restore at %d: entry %d (%s) answered\n%+v\nwant\n%+v", name, cut, i+1, cmds[i].Op, got, want[i])
				}
			}
			if got, want := f.state(), a.state(); !reflect.DeepEqual(got, want) {
				t.Fatalf("%s restore at %d of %d: %s", name, cut, len(cmds), firstDiff(got, want))
			}
		}
	})
}

// firstDiff names the first part of two states that differs.
func firstDiff(got, want fsmState) string {
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := 0; i < gv.NumField(); i++ {
		if !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
			return fmt.Sprintf("first difference in %s:\n got %+v\nwant %+v", gv.Type().Field(i).Name, gv.Field(i).Interface(), wv.Field(i).Interface())
		}
	}
	return "no difference"
}

// TestPropRegistrationFencing: under any interleaving of registrations —
// fresh ones naming what they replace or not, late duplicates of earlier
// requests, registrars that read the record first — drains,
// deregistrations and pruning, a registration without a registration id
// never replaces a live record whose incarnation it did not name, a
// non-zero replaces always names the record replaced, a request that is
// not a new incarnation leaves the record's content alone, a refused one
// changes nothing, and incarnations only grow.
func TestPropRegistrationFencing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		l := newLog(t)
		l.must(applySvc(webService()))
		var (
			sent   []wire.Registration // every request sent so far, as sent
			seen   []uint64            // every incarnation a registrar was answered
			maxInc uint64
		)
		current := func(id string) *wire.Instance {
			l.f.mu.RLock()
			defer l.f.mu.RUnlock()
			if in := l.f.instances.get(webKey(id)); in != nil {
				c := cloneInstance(in.view())
				return &c
			}
			return nil
		}
		send := func(t *rapid.T, reg wire.Registration) {
			old := current(reg.ID)
			before := withoutRev(l.f)
			r := l.apply(command{Op: opRegister, Actor: "registrar", Key: webKey(reg.ID), Register: &reg})
			sent = append(sent, reg)
			switch {
			case r.Err != nil:
				if !errors.Is(r.Err, ErrFenced) {
					t.Fatalf("registration %+v: %v; want success or ErrFenced", reg, r.Err)
				}
				if after := withoutRev(l.f); !reflect.DeepEqual(before, after) {
					t.Fatalf("a refused registration %+v changed the state", reg)
				}
				if old == nil {
					t.Fatalf("registration %+v of an unknown instance refused: %v", reg, r.Err)
				}
				if !strings.Contains(r.Err.Error(), fmt.Sprint(old.Incarnation)) {
					t.Fatalf("refusal %q does not name the current incarnation %d", r.Err, old.Incarnation)
				}
			case r.Created:
				if r.Instance.Incarnation <= maxInc {
					t.Fatalf("new incarnation %d after %d: incarnations must only grow", r.Instance.Incarnation, maxInc)
				}
				maxInc = r.Instance.Incarnation
				if old != nil && old.Lifecycle != status.Terminated && reg.RegistrationID == "" && reg.Replaces != old.Incarnation {
					t.Fatalf("registration %+v without a registration id replaced live incarnation %d (%s) it did not name",
						reg, old.Incarnation, old.Lifecycle)
				}
				if old != nil && reg.Replaces != 0 && reg.Replaces != old.Incarnation {
					t.Fatalf("registration %+v replaced incarnation %d, not the one it named", reg, old.Incarnation)
				}
				seen = append(seen, r.Instance.Incarnation)
			default:
				// A retry: the committed record, its content untouched.
				if old == nil || r.Instance.Incarnation != old.Incarnation {
					t.Fatalf("retry %+v answered incarnation %d; the record was %+v", reg, r.Instance.Incarnation, old)
				}
				got := current(reg.ID)
				if !slices.Equal(got.Addresses, old.Addresses) || !maps.Equal(got.Ports, old.Ports) || got.Weight != old.Weight ||
					got.Zone != old.Zone || got.RegistrationID != old.RegistrationID || got.Incarnation != old.Incarnation {
					t.Fatalf("a retry changed the record's content:\nbefore %+v\nafter  %+v", old, got)
				}
				seen = append(seen, r.Instance.Incarnation)
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"register": func(t *rapid.T) {
				id := rapid.SampledFrom(propIDs[:2]).Draw(t, "id")
				reg := genRegistration(id).Draw(t, "registration")
				if rapid.IntRange(0, 3).Draw(t, "with a registration id") != 0 {
					reg.RegistrationID = ""
				}
				choices := []uint64{0, rapid.Uint64Range(1, maxInc+2).Draw(t, "any")}
				if cur := current(id); cur != nil {
					choices = append(choices, cur.Incarnation, cur.Incarnation) // read first
				}
				choices = append(choices, seen...)
				reg.Replaces = rapid.SampledFrom(choices).Draw(t, "replaces")
				send(t, reg)
			},
			"late duplicate": func(t *rapid.T) {
				if len(sent) == 0 {
					t.Skip("nothing sent yet")
				}
				reg := rapid.SampledFrom(sent).Draw(t, "earlier request")
				reg.Addresses, reg.Ports = slices.Clone(reg.Addresses), maps.Clone(reg.Ports)
				send(t, reg)
			},
			"drain": func(t *rapid.T) {
				id := rapid.SampledFrom(propIDs[:2]).Draw(t, "id")
				if cur := current(id); cur != nil {
					l.apply(mutateCmd(opDrain, id, cur.Incarnation))
				}
			},
			"deregister": func(t *rapid.T) {
				id := rapid.SampledFrom(propIDs[:2]).Draw(t, "id")
				if cur := current(id); cur != nil {
					l.apply(mutateCmd(opDeregister, id, cur.Incarnation))
				}
			},
			"prune": func(t *rapid.T) {
				l.must(command{Op: opHousekeep, Actor: "node:n1", PruneBefore: l.now.Add(time.Hour)})
			},
		})
	})
}

// mustLifecycle is the lifecycle a normalized registration names.
func mustLifecycle(t *rapid.T, s string) status.Lifecycle {
	l, err := status.ParseLifecycle(s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
