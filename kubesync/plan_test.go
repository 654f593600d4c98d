package kubesync

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

var (
	t0      = time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	svcKey  = wire.ServiceKey{Namespace: "shop", Name: "web"}
	planner = Planner{Owner: "kube-sync/k1/", LeaseTTL: 10 * time.Minute}
)

func ep(id, uid, addr string) Endpoint {
	return Endpoint{ID: id, UID: uid, Addresses: []string{addr}, Ports: map[string]int{"http": 8080}, Zone: "a",
		Ready: true, Serving: true, Source: "EndpointSlice shop/web-x@7"}
}

// held is cairn's record of e, registered by kube-sync as incarnation inc.
func held(e Endpoint, inc uint64) wire.Endpoint {
	return wire.Endpoint{InstanceID: e.ID, Incarnation: inc, Addresses: e.Addresses, Ports: e.Ports, Zone: e.Zone,
		Region: "r1", Lifecycle: status.Ready, RegistrationID: planner.RegistrationID(e.UID),
		Registrar: "registrar:kube", LeaseDeadline: t0.Add(9 * time.Minute), LeaseTTL: wire.Duration(planner.LeaseTTL)}
}

// show renders a plan as "op id[@inc][=ready]" lines.
func show(as []Action) string {
	var out []string
	for _, a := range as {
		s := a.Op.String() + " " + a.Key.ID
		if a.Incarnation != 0 {
			s += fmt.Sprintf("@%d", a.Incarnation)
		}
		if a.Op == OpReport {
			s += fmt.Sprintf("=%v", a.Ready)
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

func TestPlan(t *testing.T) {
	a, b := ep("web-a", "uid-a", "10.1.0.1"), ep("web-b", "uid-b", "10.1.0.2")
	with := func(e Endpoint, f func(*Endpoint)) Endpoint { f(&e); return e }
	heldAs := func(e wire.Endpoint, f func(*wire.Endpoint)) wire.Endpoint { f(&e); return e }
	for _, tc := range []struct {
		name string
		want []Endpoint
		have []wire.Endpoint
		plan string
		// conflicts lists the ids left alone.
		conflicts []string
	}{
		{name: "new endpoints are registered", want: []Endpoint{a, b}, plan: "register web-a; register web-b"},
		{name: "what cairn holds already: nothing", want: []Endpoint{a, b}, have: []wire.Endpoint{held(a, 3), held(b, 4)}},
		{name: "addresses in another order: the same", want: []Endpoint{with(a, func(e *Endpoint) { e.Addresses = []string{"10.1.0.1", "fd00::1"} })},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.Addresses = []string{"fd00::1", "10.1.0.1"} })}},
		{name: "a pod replaced under the same name registers its UID", want: []Endpoint{with(a, func(e *Endpoint) { e.UID = "uid-a2" })},
			have: []wire.Endpoint{held(a, 3)}, plan: "register web-a"},
		{name: "another port: registered again", want: []Endpoint{with(a, func(e *Endpoint) { e.Ports = map[string]int{"http": 9090} })},
			have: []wire.Endpoint{held(a, 3)}, plan: "register web-a"},
		{name: "terminating: drained", want: []Endpoint{with(a, func(e *Endpoint) { e.Terminating, e.Ready = true, false })},
			have: []wire.Endpoint{held(a, 3)}, plan: "drain web-a@3"},
		{name: "terminating and draining already: nothing", want: []Endpoint{with(a, func(e *Endpoint) { e.Terminating, e.Ready = true, false })},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.Lifecycle = status.Draining })}},
		{name: "terminating, never registered: nothing", want: []Endpoint{with(a, func(e *Endpoint) { e.Terminating = true })}},
		{name: "terminating old UID beside a newer record: the newer is left", want: []Endpoint{with(a, func(e *Endpoint) { e.Terminating = true })},
			have: []wire.Endpoint{heldAs(held(a, 5), func(e *wire.Endpoint) { e.RegistrationID = planner.RegistrationID("uid-a2") })}},
		{name: "gone from the slices: drained", want: []Endpoint{a}, have: []wire.Endpoint{held(a, 3), held(b, 4)}, plan: "drain web-b@4"},
		{name: "gone and draining: nothing, cairn removes it", have: []wire.Endpoint{heldAs(held(b, 4), func(e *wire.Endpoint) { e.Lifecycle = status.Draining })}},
		{name: "gone and terminated: nothing", have: []wire.Endpoint{heldAs(held(b, 4), func(e *wire.Endpoint) { e.Lifecycle = status.Terminated })}},
		{name: "not ready: a self-report", want: []Endpoint{with(a, func(e *Endpoint) { e.Ready, e.Serving = false, false })},
			have: []wire.Endpoint{held(a, 3)}, plan: "report web-a@3=false"},
		{name: "not ready, reported already: nothing", want: []Endpoint{with(a, func(e *Endpoint) { e.Ready, e.Serving = false, false })},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.Report = &wire.SelfReport{Ready: false, Reporter: "registrar:kube"} })}},
		{name: "not ready, its lease past half: renewed too", want: []Endpoint{with(a, func(e *Endpoint) { e.Ready, e.Serving = false, false })},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) {
				e.Report, e.LeaseDeadline = &wire.SelfReport{Ready: false, Reporter: "registrar:kube"}, t0.Add(time.Minute)
			})}, plan: "renew web-a@3"},
		{name: "the pod reports on itself: not overwritten", want: []Endpoint{with(a, func(e *Endpoint) { e.Ready, e.Serving = false, false })},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.Report = &wire.SelfReport{Ready: true, Reporter: "instance:web-a"} })}},
		{name: "the pod reports on itself: not ready is its own", want: []Endpoint{a},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.Report = &wire.SelfReport{Ready: false, Reporter: "instance:web-a"} })}},
		{name: "replaced by a pod not ready yet: the old one drained", want: []Endpoint{with(a, func(e *Endpoint) { e.UID, e.Ready, e.Serving = "uid-a2", false, false })},
			have: []wire.Endpoint{held(a, 3)}, plan: "drain web-a@3"},
		{name: "another lease TTL: registered again", want: []Endpoint{a},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.LeaseTTL = wire.Duration(30 * time.Second) })}, plan: "register web-a"},
		{name: "ready again: a self-report", want: []Endpoint{a},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.Report = &wire.SelfReport{Ready: false, Reporter: "registrar:kube"} })}, plan: "report web-a@3=true"},
		{name: "never ready: no instance", want: []Endpoint{with(a, func(e *Endpoint) { e.Ready, e.Serving = false, false })}},
		{name: "drained by an operator: left drained", want: []Endpoint{a},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.Lifecycle = status.Draining })}},
		{name: "lease past half: renewed", want: []Endpoint{a},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.LeaseDeadline = t0.Add(4 * time.Minute) })}, plan: "renew web-a@3"},
		{name: "someone else's instance of that id: left alone", want: []Endpoint{a},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.RegistrationID, e.Registrar = "", "registrar:ops" })}, conflicts: []string{"web-a"}},
		{name: "another cluster's: left alone", want: []Endpoint{a},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.RegistrationID = "kube-sync/k2/uid-a" })}, conflicts: []string{"web-a"}},
		{name: "what it did not register is never drained",
			have: []wire.Endpoint{heldAs(held(b, 4), func(e *wire.Endpoint) { e.RegistrationID = "" }),
				heldAs(held(a, 3), func(e *wire.Endpoint) { e.RegistrationID = "kube-sync/k2/uid-a" })}},
		{name: "a terminated record of the id: registered anew", want: []Endpoint{a},
			have: []wire.Endpoint{heldAs(held(a, 3), func(e *wire.Endpoint) { e.Lifecycle, e.RegistrationID = status.Terminated, "" })}, plan: "register web-a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			as, cs := planner.Plan(svcKey, tc.want, tc.have, t0)
			if got := show(as); got != tc.plan {
				t.Errorf("plan:\n got %q\nwant %q", got, tc.plan)
			}
			var ids []string
			for _, c := range cs {
				ids = append(ids, c.ID)
			}
			if !slices.Equal(ids, tc.conflicts) {
				t.Errorf("conflicts %v, want %v", ids, tc.conflicts)
			}
			for _, a := range as {
				if a.Op == OpRegister {
					r := a.Registration
					if !strings.HasPrefix(r.RegistrationID, planner.Owner) || r.ID != a.Key.ID || r.LeaseTTL.D() != planner.LeaseTTL {
						t.Errorf("registration %+v: want the owner's registration id, the key's id and the lease", r)
					}
				}
			}
		})
	}
}

// TestPlanConverges applies each plan to a model of cairn and plans
// again: whatever cairn held, a second round has nothing to do.
func TestPlanConverges(t *testing.T) {
	a, b, c := ep("web-a", "uid-a", "10.1.0.1"), ep("web-b", "uid-b", "10.1.0.2"), ep("web-c", "uid-c", "10.1.0.3")
	c.Ready, c.Serving = false, false
	bTerm := b
	bTerm.Terminating, bTerm.Ready = true, false
	starts := [][]wire.Endpoint{
		nil,
		{held(a, 1)},
		{held(ep("web-a", "uid-old", "10.9.9.9"), 1), held(ep("web-z", "uid-z", "10.1.0.26"), 2), held(c, 3)},
	}
	for i, have := range starts {
		want := []Endpoint{a, bTerm, c}
		model := map[string]wire.Endpoint{}
		for _, h := range have {
			model[h.InstanceID] = h
		}
		next := uint64(10)
		apply := func(as []Action) {
			for _, act := range as {
				switch act.Op {
				case OpRegister:
					next++
					r := act.Registration
					model[r.ID] = wire.Endpoint{InstanceID: r.ID, Incarnation: next, Addresses: r.Addresses, Ports: r.Ports,
						Zone: r.Zone, Region: "r1", Lifecycle: status.Ready, RegistrationID: r.RegistrationID, Registrar: "registrar:kube",
						LeaseDeadline: t0.Add(r.LeaseTTL.D()), LeaseTTL: r.LeaseTTL}
				case OpDrain:
					m := model[act.Key.ID]
					m.Lifecycle = status.Draining
					model[act.Key.ID] = m
				case OpReport:
					m := model[act.Key.ID]
					m.Report = &wire.SelfReport{Ready: act.Ready, Reporter: m.Registrar}
					model[act.Key.ID] = m
				}
			}
		}
		list := func() []wire.Endpoint {
			var out []wire.Endpoint
			for _, m := range model {
				out = append(out, m)
			}
			return out
		}
		first, _ := planner.Plan(svcKey, want, list(), t0)
		apply(first)
		if second, _ := planner.Plan(svcKey, want, list(), t0); len(second) != 0 {
			t.Errorf("start %d: after %q, a second round still plans %q", i, show(first), show(second))
		}
	}
}

// TestPlanNodeRegion: with the regions of the nodes, each pod is
// registered in its node's; a node whose region changes moves its pods;
// an unknown node, or a label that is no DNS label, leaves the region
// to the server.
func TestPlanNodeRegion(t *testing.T) {
	regions := map[string]string{"node-a": "west", "node-b": "Not_A_Label"}
	p := planner
	p.NodeRegion = func(n string) string { return regions[n] }
	a, b, c := ep("web-a", "uid-a", "10.1.0.1"), ep("web-b", "uid-b", "10.1.0.2"), ep("web-c", "uid-c", "10.1.0.3")
	a.Node, b.Node, c.Node = "node-a", "node-b", "node-gone"
	as, _ := p.Plan(svcKey, []Endpoint{a, b, c}, nil, t0)
	got := map[string]string{}
	for _, x := range as {
		got[x.Key.ID] = x.Registration.Region
	}
	if want := map[string]string{"web-a": "west", "web-b": "", "web-c": ""}; !maps.Equal(got, want) {
		t.Errorf("regions %v, want %v", got, want)
	}
	ha := held(a, 3)
	ha.Region = "west"
	hc := held(c, 4) // registered with the server's region, r1
	if as, _ := p.Plan(svcKey, []Endpoint{a, c}, []wire.Endpoint{ha, hc}, t0); len(as) != 0 {
		t.Errorf("in their regions already: %q, want nothing", show(as))
	}
	regions["node-a"] = "east"
	if as, _ := p.Plan(svcKey, []Endpoint{a, c}, []wire.Endpoint{ha, hc}, t0); show(as) != "register web-a" || as[0].Registration.Region != "east" {
		t.Errorf("node-a moved to east: %q, want web-a registered in east", show(as))
	}
}
