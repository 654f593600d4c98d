// Package kubesync reconciles cairn's registrations with Kubernetes
// EndpointSlices (cairn kube-sync): each endpoint of a ready or serving
// pod of a selected Service becomes an instance, registered through the
// API with a registrar token, fenced by the pod's UID; a terminating or
// vanished one is drained; a pod that turns unready is a self-report of
// not-ready, evidence beside cairn's own probes and callers' outcomes.
//
// The reconciliation is level-based: each round of a service compares
// what the slices say now with what cairn holds now, and writes only the
// difference, so a resync converges whatever was missed. It touches only
// the instances it registered (their registration id names this
// cluster's kube-sync); everything else in a service is someone else's.
package kubesync

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/wire"
)

// Endpoint is what the EndpointSlices say of one pod of a service.
type Endpoint struct {
	// ID is the instance id: the pod's name.
	ID string
	// UID is the pod's; a pod replaced under the same name has another.
	UID       string
	Addresses []string // canonical, sorted
	Ports     map[string]int
	Zone      string
	// Node is the node the pod runs on ("" if the slice does not say).
	Node string
	// Ready, Serving and Terminating are the slice's conditions, nil
	// read as the API says (ready and serving true, terminating false).
	Ready, Serving, Terminating bool
	// Source names the slice and its resourceVersion this came from.
	Source string
}

// Op is a write the plan asks for.
type Op uint8

// The writes, in the order a plan lists them.
const (
	OpRegister Op = iota
	OpReport
	OpRenew
	OpDrain
)

func (o Op) String() string {
	return [...]string{"register", "report", "renew", "drain"}[o]
}

// Action is one write to cairn.
type Action struct {
	Op  Op
	Key wire.InstanceKey
	// Incarnation is the one a report, renewal or drain acts on.
	Incarnation uint64
	// Registration is a register's.
	Registration wire.Registration
	// Ready is a report's.
	Ready bool
	// Why says what in the slices asked for it, for the log.
	Why string
}

// Conflict is an endpoint kube-sync leaves alone: its instance id is
// held by a live instance someone else registered.
type Conflict struct {
	ID, Registrar, RegistrationID string
}

// Planner turns what the slices say and what cairn holds into writes.
type Planner struct {
	// Owner prefixes the registration id of every instance this
	// kube-sync registers ("kube-sync/CLUSTER/"): an instance whose id
	// does not start with it is never touched.
	Owner string
	// Region is the region registrations name ("": the server's).
	Region string
	// NodeRegion, if set, gives the region of a pod on a node instead:
	// the node's topology.kubernetes.io/region label ("" when the node
	// or its label is unknown, or not a DNS label: the server's).
	NodeRegion func(node string) string
	// LeaseTTL is the lease registrations ask for; a lease with less
	// than half of it left is renewed.
	LeaseTTL time.Duration
}

// RegistrationID is the registration id of the pod with uid.
func (p Planner) RegistrationID(uid string) string { return p.Owner + uid }

// Owns reports whether kube-sync registered the endpoint cairn holds.
func (p Planner) Owns(e wire.Endpoint) bool { return strings.HasPrefix(e.RegistrationID, p.Owner) }

// live reports whether a lifecycle still has an incarnation to act on.
func live(l status.Lifecycle) bool {
	return l == status.Starting || l == status.Ready || l == status.Draining
}

// Plan returns the writes that bring the instances cairn holds of svc
// (have) to what the slices say (want), at now, and the endpoints left
// alone because another registrar holds their id. want holds one
// Endpoint per id (Desired merges the slices).
func (p Planner) Plan(svc wire.ServiceKey, want []Endpoint, have []wire.Endpoint, now time.Time) ([]Action, []Conflict) {
	held := make(map[string]wire.Endpoint, len(have))
	for _, e := range have {
		if live(e.Lifecycle) {
			held[e.InstanceID] = e
		}
	}
	var out []Action
	var conflicts []Conflict
	wanted := make(map[string]bool, len(want))
	for _, d := range want {
		wanted[d.ID] = true
		key := wire.InstanceKey{Namespace: svc.Namespace, Service: svc.Name, ID: d.ID}
		a, ok := held[d.ID]
		if ok && !p.Owns(a) {
			conflicts = append(conflicts, Conflict{ID: d.ID, Registrar: a.Registrar, RegistrationID: a.RegistrationID})
			continue
		}
		ours := ok && a.RegistrationID == p.RegistrationID(d.UID)
		alive := ok && a.Lifecycle != status.Draining
		// The self-report is kube-sync's to make while it made the last
		// one (or none was made): a pod that reports on itself, with an
		// instance token, is heard, not overwritten every round.
		reportable := ok && (a.Report == nil || a.Report.Reporter == a.Registrar)
		drain := func(why string) {
			out = append(out, Action{Op: OpDrain, Key: key, Incarnation: a.Incarnation, Why: why})
		}
		renew := func() {
			if ttl := cmp.Or(a.LeaseTTL.D(), p.LeaseTTL); a.LeaseDeadline.Sub(now) < ttl/2 {
				out = append(out, Action{Op: OpRenew, Key: key, Incarnation: a.Incarnation, Why: "lease"})
			}
		}
		switch {
		case d.Terminating:
			// Serving while terminating is the drain Kubernetes gives
			// the pod; not serving, it is going. Either way no new
			// traffic: drained at once, removed by cairn after the
			// service's drain window.
			if ours && alive {
				drain("terminating in " + d.Source)
			}
		case !d.Ready && !d.Serving && !ours:
			// A new pod of the name, not ready yet: the one cairn holds
			// is its predecessor, gone (a name is taken again only once
			// the pod that had it is deleted), and the new one is no
			// instance until it is ready.
			if alive {
				drain("replaced by a pod not ready yet, in " + d.Source)
			}
		case !d.Ready && !d.Serving:
			// A pod failing its readiness probe stays an instance with a
			// self-report of not ready: evidence for cairn's evaluator,
			// not a deregistration, and its lease is kept.
			if alive {
				if reportable && (a.Report == nil || a.Report.Ready) {
					out = append(out, Action{Op: OpReport, Key: key, Incarnation: a.Incarnation, Ready: false, Why: "not ready in " + d.Source})
				}
				renew()
			}
		case ours && !alive:
			// Drained by someone (an operator's cairn drain): left to
			// drain. Once cairn has removed it, the pod, still in the
			// slices, is registered again: the slices own kube-sync's
			// instances; to keep a pod out, take it out of its Service.
		case !ours || !sameContent(p, d, a):
			why := "new in " + d.Source
			if ok {
				why = "replaces incarnation " + strconv.FormatUint(a.Incarnation, 10) + " from " + d.Source
			}
			out = append(out, Action{Op: OpRegister, Key: key, Registration: p.registration(d), Why: why})
		default:
			if d.Ready && reportable && a.Report != nil && !a.Report.Ready {
				out = append(out, Action{Op: OpReport, Key: key, Incarnation: a.Incarnation, Ready: true, Why: "ready again in " + d.Source})
			}
			renew()
		}
	}
	// What kube-sync registered and no slice holds any longer: the pod
	// was deleted, the Service unselected or gone.
	for _, id := range slices.Sorted(maps.Keys(held)) {
		a := held[id]
		if wanted[id] || !p.Owns(a) || a.Lifecycle == status.Draining {
			continue
		}
		out = append(out, Action{Op: OpDrain, Key: wire.InstanceKey{Namespace: svc.Namespace, Service: svc.Name, ID: id},
			Incarnation: a.Incarnation, Why: "gone from the EndpointSlices"})
	}
	return out, conflicts
}

// registration is what kube-sync registers for d.
func (p Planner) registration(d Endpoint) wire.Registration {
	return wire.Registration{
		ID: d.ID, Addresses: slices.Clone(d.Addresses), Ports: maps.Clone(d.Ports),
		Region: p.regionOf(d), Zone: d.Zone, LeaseTTL: wire.Duration(p.LeaseTTL),
		RegistrationID: p.RegistrationID(d.UID), Source: d.Source,
	}
}

// sameContent reports whether cairn's record a holds what registering d
// would: the same addresses, ports, zone, lease TTL and region (the one
// cairn gave it, when kube-sync names none). The weight is the default
// both ways; the source is no part of a registration's content.
func sameContent(p Planner, d Endpoint, a wire.Endpoint) bool {
	have := slices.Clone(a.Addresses)
	slices.Sort(have)
	region := p.regionOf(d)
	return slices.Equal(have, d.Addresses) && maps.Equal(a.Ports, d.Ports) && a.Zone == d.Zone &&
		(region == "" || a.Region == region) && (a.LeaseTTL == 0 || a.LeaseTTL.D() == p.LeaseTTL)
}

// regionOf is the region d is registered in ("": the server's).
func (p Planner) regionOf(d Endpoint) string {
	if p.NodeRegion == nil {
		return p.Region
	}
	if r := p.NodeRegion(d.Node); wire.CheckLabel("region", r) == nil {
		return r
	}
	return ""
}
