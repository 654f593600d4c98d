package store

import (
	"cmp"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration that reads and writes as a Go duration
// string ("30s", "1m30s") in both JSON and YAML, as SPEC §6.1 asks of
// service definitions.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d as a Go duration string.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON reads a duration string. A bare number is refused: its unit
// would be a guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	// A *json.UnmarshalTypeError lets encoding/json name the field.
	bad := &json.UnmarshalTypeError{Value: string(b), Type: reflect.TypeFor[Duration]()}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return bad
	}
	if _, err := time.ParseDuration(s); err != nil {
		return bad
	}
	return d.parse(s)
}

// MarshalYAML writes d as a duration string.
func (d Duration) MarshalYAML() (any, error) { return d.String(), nil }

// UnmarshalYAML reads a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a duration string such as \"30s\"", n.Line)
	}
	return d.parse(n.Value)
}

func (d *Duration) parse(s string) error {
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration string such as \"30s\", got %q", s)
	}
	*d = Duration(v)
	return nil
}

// ServiceKey names a service: the namespace is the tenant boundary.
type ServiceKey struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

// InstanceKey names one instance of a service.
type InstanceKey struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	ID        string `json:"instance_id"`
}

func (k InstanceKey) String() string { return k.Namespace + "/" + k.Service + "/" + k.ID }

// ServiceKey returns the key of the service k belongs to.
func (k InstanceKey) ServiceKey() ServiceKey { return ServiceKey{k.Namespace, k.Service} }

// Port is a named service port.
type Port struct {
	Name     string `json:"name" yaml:"name"`
	Number   int    `json:"number" yaml:"number"`
	Protocol string `json:"protocol" yaml:"protocol"`
}

// Dependency is a dependency an instance may report on. A failing shared
// dependency lowers weight; only a non-shared one may make it unready.
type Dependency struct {
	Name   string `json:"name" yaml:"name"`
	Shared bool   `json:"shared" yaml:"shared"`
}

// Capability says which evidence a service can give about itself.
type Capability struct {
	// Readiness is probe, self or none. Defaults to probe when the service
	// declares a check and to none otherwise.
	Readiness    string       `json:"readiness" yaml:"readiness"`
	Dependencies []Dependency `json:"dependencies,omitempty" yaml:"dependencies,omitempty"`
}

// Check is the active health check of a service.
type Check struct {
	// Type is tcp, http or grpc.
	Type string `json:"type" yaml:"type"`
	// Port names one of the service's ports. Defaults to the first port.
	Port string `json:"port" yaml:"port"`
	// Path is the HTTP path; defaults to "/" for http checks.
	Path string `json:"path,omitempty" yaml:"path,omitempty"`
	// Interval defaults to 2s.
	Interval Duration `json:"interval" yaml:"interval"`
	// Timeout defaults to 1s and must be shorter than Interval.
	Timeout Duration `json:"timeout" yaml:"timeout"`
}

// Policy holds the per-service thresholds. A zero field takes its default
// when the definition is applied, so a stored definition is always complete.
type Policy struct {
	DNSTTL             Duration  `json:"dns_ttl" yaml:"dns_ttl"`                                     // default 5s
	ARecordLimit       int       `json:"a_record_limit" yaml:"a_record_limit"`                       // default 8
	MinHealthyFraction *float64  `json:"min_healthy_fraction,omitempty" yaml:"min_healthy_fraction"` // default 0.5; 0 never disregards health
	WithdrawAfter      int       `json:"withdraw_after" yaml:"withdraw_after"`                       // default 3
	AdmitAfter         int       `json:"admit_after" yaml:"admit_after"`                             // default 5; must exceed withdraw_after
	AdmitMin           *Duration `json:"admit_min,omitempty" yaml:"admit_min"`                       // default 10s; 0 = no minimum time
	SlowStart          *Duration `json:"slow_start,omitempty" yaml:"slow_start"`                     // default 30s; 0 = no slow start
	DrainWindow        Duration  `json:"drain_window" yaml:"drain_window"`                           // default 30s
	LeaseTTL           Duration  `json:"lease_ttl" yaml:"lease_ttl"`                                 // default 30s
	ShrinkCap          float64   `json:"shrink_cap" yaml:"shrink_cap"`                               // default 0.33
	MaxEjectionPercent *int      `json:"max_ejection_percent,omitempty" yaml:"max_ejection_percent"` // default 10; 0 = outcomes never withdraw
	// OutcomeQuorum is how many distinct callers must report an instance
	// failing in the same window before outcomes withdraw it; fewer only
	// lower its weight.
	OutcomeQuorum int `json:"outcome_quorum" yaml:"outcome_quorum"` // default 2
	// CorrelatedFailureFraction: when one prober sees more than this
	// fraction of its targets in one zone time out or become unreachable
	// at once, its evidence about that zone is set aside.
	CorrelatedFailureFraction float64 `json:"correlated_failure_fraction" yaml:"correlated_failure_fraction"` // default 0.5
	// FlapLimit: more than this many eligibility changes in 2 minutes
	// quarantine an instance; 0 never quarantines.
	FlapLimit *int `json:"flap_limit,omitempty" yaml:"flap_limit"` // default 4
}

// Service is a service definition: the desired state applied with
// `cairn apply`.
type Service struct {
	Namespace  string     `json:"namespace" yaml:"namespace"`
	Name       string     `json:"name" yaml:"name"`
	Ports      []Port     `json:"ports" yaml:"ports"`
	Capability Capability `json:"capability" yaml:"capability"`
	Check      *Check     `json:"check,omitempty" yaml:"check,omitempty"`
	Policy     Policy     `json:"policy" yaml:"policy"`
	// Revision is the store revision that last changed the definition. It
	// is set by the store; a value in input is ignored, so that a
	// definition read from the API can be applied back.
	Revision uint64 `json:"revision,omitempty" yaml:"revision,omitempty"`
}

// Key returns the service's key.
func (s Service) Key() ServiceKey { return ServiceKey{s.Namespace, s.Name} }

// Port returns the port called name.
func (s Service) Port(name string) (Port, bool) {
	for _, p := range s.Ports {
		if p.Name == name {
			return p, true
		}
	}
	return Port{}, false
}

// Lifecycle is the stage of an instance's life, as its registrar tells it.
type Lifecycle string

// The lifecycles of SPEC §1.
const (
	Starting   Lifecycle = "starting"
	Ready      Lifecycle = "ready"
	Draining   Lifecycle = "draining"
	Terminated Lifecycle = "terminated"
)

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
	Lifecycle   Lifecycle      `json:"lifecycle"`
	LeaseTTL    Duration       `json:"lease_ttl"`
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
	SourceRevision uint64      `json:"source_revision"`
	RegisteredAt   time.Time   `json:"registered_at"`
	DrainingSince  time.Time   `json:"draining_since,omitzero"`
	TerminatedAt   time.Time   `json:"terminated_at,omitzero"`
	Report         *SelfReport `json:"report,omitempty"`
	// Health is the evaluator's last committed verdict about this
	// incarnation; nil until the first one (unknown, and eligible when
	// ready).
	Health *Health `json:"health,omitempty"`
}

// Key returns the instance's key.
func (in Instance) Key() InstanceKey { return InstanceKey{in.Namespace, in.Service, in.ID} }

func (in Instance) clone() Instance {
	out := in
	out.Addresses = append([]string(nil), in.Addresses...)
	out.RetiredRegistrationIDs = slices.Clone(in.RetiredRegistrationIDs)
	out.Ports = make(map[string]int, len(in.Ports))
	for k, v := range in.Ports {
		out.Ports[k] = v
	}
	if in.Report != nil {
		r := *in.Report
		r.Dependencies = make(map[string]DependencyState, len(in.Report.Dependencies))
		for k, v := range in.Report.Dependencies {
			r.Dependencies[k] = v
		}
		out.Report = &r
	}
	out.Health = in.Health.clone()
	return out
}

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
	// refused: the API decodes it apart, see api.RegisterRequest.)
	Weight int `json:"weight,omitempty"`
	// LeaseTTL defaults to the service's policy lease_ttl.
	LeaseTTL Duration `json:"lease_ttl,omitempty"`
	// Lifecycle is starting or ready; defaults to ready.
	Lifecycle Lifecycle `json:"lifecycle,omitempty"`
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
}

// Key returns the key of the instance r registers.
func (r Registration) Key() InstanceKey { return InstanceKey{r.Namespace, r.Service, r.ID} }

// sameAs reports whether r (normalised; ttlDefault says whether it left
// lease_ttl to the policy) asks for exactly what in already holds, so that
// a retried registration returns the committed record.
func (r Registration) sameAs(in Instance, ttlDefault bool) bool {
	sameTTL := r.LeaseTTL == in.LeaseTTL || ttlDefault && in.LeaseTTLDefault
	if r.ID != in.ID || r.RegistrationID != in.RegistrationID || r.Region != in.Region || r.Zone != in.Zone ||
		r.Weight != in.Weight || !sameTTL ||
		len(r.Addresses) != len(in.Addresses) || len(r.Ports) != len(in.Ports) {
		return false
	}
	for i := range r.Addresses {
		if r.Addresses[i] != in.Addresses[i] {
			return false
		}
	}
	for k, v := range r.Ports {
		if in.Ports[k] != v {
			return false
		}
	}
	return true
}

// Member is one server of the cluster as the store records it.
type Member struct {
	NodeID   string `json:"node_id"`
	RaftAddr string `json:"raft_addr"`
	HTTPAddr string `json:"http_addr"`
	// Region and Zone are where the server runs (its --region and
	// --zone): a target's two probers are chosen in different zones.
	Region string `json:"region,omitempty"`
	Zone   string `json:"zone,omitempty"`
	// Leader and Voter come from the raft configuration when listed.
	Leader bool `json:"leader"`
	Voter  bool `json:"voter"`
}

// TokenRecord is an API token as the store keeps it: the SHA-256 digest
// of its secret, never the secret.
type TokenRecord struct {
	// Accessor names the token in listings, logs and the audit trail.
	Accessor   string   `json:"accessor"`
	Digest     string   `json:"digest"` // hex SHA-256 of the secret
	Scope      string   `json:"scope"`
	Namespaces []string `json:"namespaces,omitempty"`
	Namespace  string   `json:"namespace,omitempty"`
	Service    string   `json:"service,omitempty"`
	Instance   string   `json:"instance,omitempty"`
	// Node is the server a prober token speaks for (acl.Token.Node).
	Node string `json:"node,omitempty"`
	// Source is "file" for tokens seeded from a server's ACL file and
	// "api" for tokens created over the API.
	Source      string    `json:"source"`
	Description string    `json:"description,omitempty"`
	CreatedAt   time.Time `json:"created_at"`
}

// sameGrant reports whether t and o are the same secret with the same
// rights.
func (t TokenRecord) sameGrant(o TokenRecord) bool {
	return t.Digest == o.Digest && t.Scope == o.Scope && slices.Equal(t.Namespaces, o.Namespaces) &&
		t.Namespace == o.Namespace && t.Service == o.Service && t.Instance == o.Instance && t.Node == o.Node
}

func (t TokenRecord) validate() error {
	if err := CheckLabel("accessor", t.Accessor); err != nil {
		return err
	}
	if len(t.Digest) != 64 || strings.Trim(t.Digest, "0123456789abcdef") != "" {
		return invalid("digest", "must be 64 lower-case hex digits")
	}
	if t.Scope == "" {
		return invalid("scope", "is required")
	}
	if t.Node != "" {
		if t.Scope != "prober" {
			return invalid("node", "only a prober token names a node")
		}
		if err := CheckLabel("node", t.Node); err != nil {
			return err
		}
	}
	return nil
}

// EventKind is the kind of an audit event.
type EventKind string

// Audit event kinds.
const (
	EventApplied      EventKind = "applied"
	EventRegistered   EventKind = "registered"
	EventDrained      EventKind = "drained"
	EventDeregistered EventKind = "deregistered"
	EventTerminated   EventKind = "terminated" // drain window over
	EventExpired      EventKind = "expired"    // lease past its hard expiry
	EventReported     EventKind = "reported"
	EventRefused      EventKind = "refused"
	EventTokenCreated EventKind = "token_created"
	EventTokenDeleted EventKind = "token_deleted"
)

// Event is one entry of the durable audit trail.
type Event struct {
	Seq         uint64    `json:"seq"`
	At          time.Time `json:"at"`
	Kind        EventKind `json:"kind"`
	Namespace   string    `json:"namespace"`
	Service     string    `json:"service"`
	Instance    string    `json:"instance_id,omitempty"`
	Incarnation uint64    `json:"incarnation,omitempty"`
	From        string    `json:"from,omitempty"`
	To          string    `json:"to,omitempty"`
	Reason      string    `json:"reason,omitempty"`
	// Evidence is what an eligibility transition was decided on.
	Evidence *Evidence `json:"evidence,omitempty"`
	Actor    string    `json:"actor"`
}

// listInstances copies the records of m that filter accepts (nil: all),
// under the FSM's lock, in no order. The copies share their slices, maps
// and pointers with the records: the FSM never modifies those in place
// once a record holds them (a change replaces them), so sharing them is
// safe for as long as the reader does not modify them either. A deep copy
// of every instance would cost a map, a slice and a Health per instance
// on every listing, and the health loop lists every instance on every
// store revision.
func listInstances(m map[InstanceKey]*Instance, filter func(*Instance) bool) []Instance {
	n := len(m)
	if filter != nil {
		n = 0
	}
	out := make([]Instance, 0, n)
	for _, in := range m {
		if filter == nil || filter(in) {
			out = append(out, *in)
		}
	}
	return out
}

// sortInstances sorts by key; it needs no lock, so callers release the
// FSM's first (a sort of 100,000 instances takes tens of milliseconds,
// which Apply would otherwise wait out).
func sortInstances(out []Instance) {
	slices.SortFunc(out, func(a, b Instance) int { return compareKeys(a.Key(), b.Key()) })
}

// compareKeys orders keys as their strings ("ns/svc/id") compare, without
// making the strings: a sort of n instances would otherwise make
// 2 n log n of them.
func compareKeys(a, b InstanceKey) int {
	if a.Namespace == b.Namespace && a.Service == b.Service {
		return strings.Compare(a.ID, b.ID)
	}
	as := [...]string{a.Namespace, "/", a.Service, "/", a.ID}
	bs := [...]string{b.Namespace, "/", b.Service, "/", b.ID}
	i, j, ai, bj := 0, 0, 0, 0
	for {
		for i < len(as) && ai == len(as[i]) {
			i, ai = i+1, 0
		}
		for j < len(bs) && bj == len(bs[j]) {
			j, bj = j+1, 0
		}
		switch {
		case i == len(as) && j == len(bs):
			return 0
		case i == len(as):
			return -1
		case j == len(bs):
			return 1
		}
		if c := cmp.Compare(as[i][ai], bs[j][bj]); c != 0 {
			return c
		}
		ai, bj = ai+1, bj+1
	}
}
