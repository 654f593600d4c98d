package wire

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// InstanceKey names one instance of a service.
type InstanceKey struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	ID        string `json:"instance_id"`
}

func (k InstanceKey) String() string { return k.Namespace + "/" + k.Service + "/" + k.ID }

// ServiceKey returns the key of the service k belongs to.
func (k InstanceKey) ServiceKey() ServiceKey { return ServiceKey{k.Namespace, k.Service} }

// DependencyState is what an instance reports of one dependency.
type DependencyState string

// The dependency states `cairn report` accepts.
const (
	DepOK       DependencyState = "ok"
	DepDegraded DependencyState = "degraded"
	DepFailed   DependencyState = "failed"
)

// SelfReport is the last readiness report an instance made about itself.
// It is stored now and evaluated by the health evaluator.
type SelfReport struct {
	Ready        bool                       `json:"ready"`
	Dependencies map[string]DependencyState `json:"dependencies,omitempty"`
	At           time.Time                  `json:"at"`
	Reporter     string                     `json:"reporter"`
}

// Instance is one registered instance of a service.
type Instance struct {
	Namespace   string         `json:"namespace"`
	Service     string         `json:"service"`
	ID          string         `json:"instance_id"`
	Incarnation uint64         `json:"incarnation"`
	Addresses   []string       `json:"addresses"`
	Ports       map[string]int `json:"ports"`
	Region      string         `json:"region,omitempty"`
	Zone        string         `json:"zone,omitempty"`
	Weight      int            `json:"weight"`
	// Lifecycle is the stage of the instance's life as its registrar
	// told it (SPEC §1), in status's words.
	Lifecycle status.Lifecycle `json:"lifecycle"`
	LeaseTTL  Duration         `json:"lease_ttl"`
	// LeaseTTLDefault is set when the registration left lease_ttl to the
	// service's policy, so that an identical retry still matches after
	// the policy changes.
	LeaseTTLDefault bool `json:"lease_ttl_default,omitempty"`
	// LeaseDeadline is when the lease runs out unless renewed. On the
	// leader it includes renewals not yet checkpointed.
	LeaseDeadline time.Time `json:"lease_deadline"`
	// Registrar is the identity of the token that registered the instance
	// (never the secret).
	Registrar string `json:"registrar"`
	// RegistrationID is the id the registrar gave this registration, if
	// any; RetiredRegistrationIDs are the ids of the registrations it
	// replaced (the newest 8), refused from then on so that a late retry
	// of a predecessor cannot fence its successor.
	RegistrationID         string   `json:"registration_id,omitempty"`
	RetiredRegistrationIDs []string `json:"retired_registration_ids,omitempty"`
	// SourceRevision is the store revision of the registration.
	SourceRevision uint64 `json:"source_revision"`
	// Source is what the registrar registered this incarnation from
	// (Registration.Source), if it said.
	Source        string      `json:"source,omitempty"`
	RegisteredAt  time.Time   `json:"registered_at"`
	DrainingSince time.Time   `json:"draining_since,omitzero"`
	TerminatedAt  time.Time   `json:"terminated_at,omitzero"`
	Report        *SelfReport `json:"report,omitempty"`
	// Health is the evaluator's last committed verdict about this
	// incarnation; nil until the first one (unknown, and eligible when
	// ready).
	Health *Health `json:"health,omitempty"`
	// Ramp is the slow-start window this incarnation asked for at its
	// registration (Registration.Ramp); omitted when it asked for none.
	Ramp Duration `json:"ramp,omitempty"`
}

// Key returns the instance's key.
func (in Instance) Key() InstanceKey { return InstanceKey{in.Namespace, in.Service, in.ID} }

// Registration is a request to register an instance. Addresses must be
// canonical already (the API checks them against the address policy).
type Registration struct {
	Namespace string         `json:"-"`
	Service   string         `json:"-"`
	ID        string         `json:"instance_id"`
	Addresses []string       `json:"addresses"`
	Ports     map[string]int `json:"ports"`
	Region    string         `json:"region,omitempty"`
	Zone      string         `json:"zone,omitempty"`
	// Weight is the base weight, 1–65535; 0 means the default 100. (On
	// the wire an absent weight takes the default and an explicit 0 is
	// refused: the API decodes it apart, see RegisterRequest.)
	Weight int `json:"weight,omitempty"`
	// LeaseTTL defaults to the service's policy lease_ttl.
	LeaseTTL Duration `json:"lease_ttl,omitempty"`
	// Lifecycle is "starting" or "ready" (status.Lifecycle's names);
	// empty means ready. It stays text in a request, unlike
	// Instance.Lifecycle: absent must differ from starting (status's
	// zero value), and a name a registration may not ask for is refused
	// by Normalize, naming the field.
	Lifecycle string `json:"lifecycle,omitempty"`
	// RegistrationID optionally names this registration (a process's boot
	// id, say). A retry with the same id and content returns the committed
	// record; a new id always allocates a new incarnation, so a restarted
	// process fences its predecessor even when nothing else changed.
	RegistrationID string `json:"registration_id,omitempty"`
	// Replaces is the incarnation the registrar last saw of this instance
	// (0: none). Without a registration id, a registration whose content
	// differs from a live record (starting, ready or draining) replaces it
	// only when Replaces names that record's incarnation, so that a late
	// retry of an old registration can never overwrite its successor. A
	// non-zero Replaces must name the current incarnation whenever a
	// record exists. It is not part of a registration's content: an
	// identical retry matches whatever it carries.
	Replaces uint64 `json:"replaces,omitempty"`
	// Ramp is a deploy ramp: a slow start of this length for the new
	// incarnation, even when the service's policy slow_start is shorter
	// (the longer of the two applies, see SlowStartWindow), for as long
	// as the incarnation lives. 0 (absent) means the policy's alone;
	// whole seconds up to MaxRamp. It is part of a registration's
	// content: a retry with another ramp is another registration.
	Ramp Duration `json:"ramp,omitempty"`
	// Source optionally says what the registrar took the registration
	// from: kube-sync names the EndpointSlice and its resourceVersion
	// ("EndpointSlice shop/web-1@216"). It is recorded with the
	// incarnation the registration creates, shown in its view and its
	// audit event, for a reader tracing where an instance came from.
	// It is not part of a registration's content: a retry from a newer
	// source is still a retry, and keeps the source it was created from.
	Source string `json:"source,omitempty"`
}

// MaxSource is the longest Registration.Source.
const MaxSource = 256

// MaxRamp is the longest deploy ramp a registration may ask for: an
// instance an hour in slow start has been given all the time a rollout
// needs, and a longer one is a typo (30h for 30m) that would keep it
// underweight for days.
const MaxRamp = time.Hour

// SlowStartWindow is the slow-start window of an incarnation registered
// with ramp under a policy slow start of policy: the longer of the two.
// A window of 0 or less means no slow start. It is the one home of the
// rule: the evaluator's weights and flags, every node's table builds and
// the API's rollout view all take their window from it.
func SlowStartWindow(policy, ramp time.Duration) time.Duration { return max(policy, ramp) }

// CheckRamp refuses a ramp out of range or finer than a second.
func CheckRamp(field string, d Duration) error {
	switch {
	case d < 0:
		return invalid(field, "%s is negative; a ramp is 0 (none) or a slow-start window up to %s", d, MaxRamp)
	case d.D() > MaxRamp:
		return invalid(field, "%s is longer than the %s a ramp may last", d, MaxRamp)
	case d.D()%time.Second != 0:
		return invalid(field, "%s is not a whole number of seconds", d)
	}
	return nil
}

// Key returns the key of the instance r registers.
func (r Registration) Key() InstanceKey { return InstanceKey{r.Namespace, r.Service, r.ID} }

// Normalize fills r's defaults from svc and checks it against svc. It does
// not judge addresses against a policy (the API does that), only their
// syntax and canonical form.
func (r *Registration) Normalize(svc Service) error {
	if err := CheckLabel("instance_id", r.ID); err != nil {
		return err
	}
	if len(r.Addresses) == 0 {
		return invalid("addresses", "at least one address is required")
	}
	if len(r.Addresses) > 16 {
		return invalid("addresses", "%d addresses; at most 16 are allowed", len(r.Addresses))
	}
	seen := map[string]bool{}
	for i, a := range r.Addresses {
		f := fmt.Sprintf("addresses[%d]", i)
		ip, err := netip.ParseAddr(a)
		if err != nil {
			return invalid(f, "%q is not an IP address", a)
		}
		if ip.Zone() != "" {
			return invalid(f, "%q carries a zone; addresses must be routable without one", a)
		}
		if ip.Unmap().String() != a {
			return invalid(f, "%q is not in canonical form (%s)", a, ip.Unmap())
		}
		if seen[a] {
			return invalid(f, "%q is listed twice", a)
		}
		seen[a] = true
	}
	if len(r.Ports) == 0 {
		return invalid("ports", "at least one port is required")
	}
	for name, num := range r.Ports {
		if _, ok := svc.Port(name); !ok {
			return invalid("ports", "%q is not a port of service %s/%s", name, svc.Namespace, svc.Name)
		}
		if num < 1 || num > 65535 {
			return invalid("ports", "%s=%d is out of range 1-65535", name, num)
		}
	}
	if len(r.Source) > MaxSource {
		return invalid("source", "is %d characters; at most %d are allowed", len(r.Source), MaxSource)
	}
	for _, c := range r.Source {
		if c < 0x20 || c == 0x7f {
			return invalid("source", "holds a control character; it is one line of text")
		}
	}
	if len(r.RegistrationID) > 128 {
		return invalid("registration_id", "is %d characters; at most 128 are allowed", len(r.RegistrationID))
	}
	if r.Region != "" {
		if err := CheckLabel("region", r.Region); err != nil {
			return err
		}
	}
	if r.Zone != "" {
		if err := CheckLabel("zone", r.Zone); err != nil {
			return err
		}
	}
	if r.Weight == 0 {
		r.Weight = DefaultWeight
	}
	if r.Weight < 1 || r.Weight > 65535 {
		return invalid("weight", "%d is out of range 1-65535", r.Weight)
	}
	if r.LeaseTTL == 0 {
		r.LeaseTTL = svc.Policy.LeaseTTL
	}
	if err := checkLeaseTTL("lease_ttl", r.LeaseTTL); err != nil {
		return err
	}
	if err := CheckRamp("ramp", r.Ramp); err != nil {
		return err
	}
	switch r.Lifecycle {
	case "":
		r.Lifecycle = status.Ready.String()
	case status.Starting.String(), status.Ready.String():
	default:
		return invalid("lifecycle", "%q must be starting or ready", r.Lifecycle)
	}
	return nil
}

// Report is a self-report: readiness and dependency states.
type Report struct {
	Ready        bool                       `json:"ready"`
	Dependencies map[string]DependencyState `json:"dependencies,omitempty"`
}

// Validate checks r against the dependencies svc declares.
func (r Report) Validate(svc Service) error {
	for name, st := range r.Dependencies {
		found := false
		for _, d := range svc.Capability.Dependencies {
			if d.Name == name {
				found = true
			}
		}
		if !found {
			return invalid("dependencies", "%q is not a declared dependency of %s/%s", name, svc.Namespace, svc.Name)
		}
		switch st {
		case DepOK, DepDegraded, DepFailed:
		default:
			return invalid("dependencies", "%s=%q must be ok, degraded or failed", name, st)
		}
	}
	return nil
}
