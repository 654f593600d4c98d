package wire

import (
	"time"

	"github.com/cairn-sd/cairn/status"
)

// Error is the body of every error response (SPEC §6).
type Error struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// Error codes. Clients branch on Code, never on the message.
const (
	CodeInvalid          = "invalid_argument"
	CodeTooLarge         = "too_large"
	CodeUnauthenticated  = "unauthenticated"
	CodeDenied           = "permission_denied"
	CodeForbiddenAddress = "forbidden_address"
	CodeNotFound         = "not_found"
	CodeFenced           = "fenced"
	CodeConflict         = "conflict"
	CodeCapacity         = "insufficient_capacity"
	CodeMethod           = "method_not_allowed"
	CodeNoLeader         = "no_leader"
	// CodeBudget: a voluntary disruption the service's disruption budget
	// does not allow (429); force overrides it.
	CodeBudget   = "disruption_budget"
	CodeInternal = "internal"
)

// ServiceSummary is one row of GET /v1/services.
type ServiceSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Ports     int    `json:"ports"`
	Instances int    `json:"instances"`
	Eligible  int    `json:"eligible"`
	Revision  uint64 `json:"revision"`
	// HealthDisregarded: an instance of the service is published only
	// because the guard disregards health (the view's flag of the same
	// name).
	HealthDisregarded bool `json:"health_disregarded"`
	// Zones counts Instances and Eligible per zone, by zone name (an
	// instance without a zone counts under ""); only zones with an
	// instance, never null.
	Zones []ZoneCount `json:"zones"`
}

// ZoneCount is one zone's share of a ServiceSummary's counts.
type ZoneCount struct {
	Zone      string `json:"zone"`
	Instances int    `json:"instances"`
	Eligible  int    `json:"eligible"`
}

// Endpoint is one instance as GET .../endpoints shows it.
//
// Verdict, Eligible, Weight, Flags and Tier are what the answering
// node's DNS and xDS servers serve: its status table's entry for this
// incarnation, read from the table TableVersion names (InTable false:
// the table does not hold it, and nothing is served: unknown, not
// eligible, weight 0). Lifecycle, the lease and the report are the
// store's; Evaluator is the evaluator's committed verdict beside what is
// served.
type Endpoint struct {
	InstanceID  string           `json:"instance_id"`
	Incarnation uint64           `json:"incarnation"`
	Addresses   []string         `json:"addresses"`
	Ports       map[string]int   `json:"ports"`
	Region      string           `json:"region"`
	Zone        string           `json:"zone"`
	Lifecycle   status.Lifecycle `json:"lifecycle"`
	Verdict     status.Verdict   `json:"verdict"`
	Eligible    bool             `json:"eligible"`
	Weight      int              `json:"weight"`
	BaseWeight  int              `json:"base_weight"`
	Reasons     []string         `json:"reasons"`
	// LeaseDeadline is the deadline recorded by the last renewal;
	// LeaseExpiry is when the lease runs out as this node tells it, which
	// is later for one TTL after a leader change (see docs/decisions.md).
	LeaseDeadline time.Time `json:"lease_deadline"`
	LeaseExpiry   time.Time `json:"lease_expiry"`
	LeaseExpired  bool      `json:"lease_expired"`
	// LeaseTTL is the lease the incarnation was registered with.
	LeaseTTL  Duration `json:"lease_ttl"`
	Registrar string   `json:"registrar"`
	// RegistrationID is the id the registrar gave the incarnation, if
	// any (Registration.RegistrationID): kube-sync knows its own by it.
	RegistrationID string `json:"registration_id,omitempty"`
	// Source is what the registrar registered the incarnation from, if
	// it said (Registration.Source).
	Source string      `json:"source,omitempty"`
	Report *SelfReport `json:"report,omitempty"`
	// Flags are the status table's flags (eligible, slow_start,
	// health_disregarded, …).
	Flags []string `json:"flags"`
	// VerdictEvidence is the evidence the committed verdict was decided
	// on, and VerdictAt when it was decided.
	VerdictEvidence *Evidence `json:"verdict_evidence,omitempty"`
	VerdictAt       time.Time `json:"verdict_at,omitzero"`
	// Evidence is the latest evidence per class and observer, freshest
	// first within each class. Only the leader holds it: a follower's
	// answer leaves it out.
	Evidence []ClassEvidence `json:"evidence,omitzero"`
	// Tier is the priority the endpoint has for a caller at the node's
	// own locality (its --region/--zone): 0 same zone, 1 same region, 2
	// another region, 3 an evacuated zone, as the DNS server ranks it for
	// a caller of unknown place and the xDS server for a subscriber in
	// the node's zone. Omitted when the table does not hold the
	// incarnation.
	Tier *int `json:"tier,omitempty"`
	// Evacuation is "evacuated" while an evacuation of the endpoint's
	// zone puts it last for every caller, "returning" while the zone
	// comes back, Share being the fraction of its traffic it has taken
	// back; both omitted otherwise.
	Evacuation string   `json:"evacuation,omitempty"`
	Share      *float64 `json:"share,omitempty"`
	// InTable: the table holds this incarnation.
	InTable bool `json:"in_table"`
	// TableVersion is the version of the status table the row was read
	// from (status.Table.Version, which the node's xDS versions and logs
	// carry), and TableRevision the store revision that table was built
	// from; both 0 when the node has no table.
	TableVersion  uint64 `json:"table_version"`
	TableRevision uint64 `json:"table_revision"`
	// Evaluator is the evaluator's last committed verdict about this
	// incarnation (replicated: every node holds it), which the table
	// serves from its next build on: it differs from Verdict and
	// Eligible for up to a round. Omitted before the first verdict.
	Evaluator *EvaluatorVerdict `json:"evaluator,omitempty"`
}

// EvaluatorVerdict is the evaluator's judgement of one incarnation as
// committed to the store (Health), beside what the table serves.
type EvaluatorVerdict struct {
	Verdict status.Verdict `json:"verdict"`
	// Eligible is the eligibility the evaluator decided, after the guard
	// and the shrink cap; HealthEligible its judgement of the evidence
	// alone.
	Eligible       bool      `json:"eligible"`
	HealthEligible bool      `json:"health_eligible"`
	Reasons        []string  `json:"reasons"`
	Evidence       *Evidence `json:"evidence,omitempty"`
	At             time.Time `json:"at"`
}

// View is a service's current view (SPEC §1).
type View struct {
	Revision          uint64 `json:"revision"`
	HealthDisregarded bool   `json:"health_disregarded"`
	// TableVersion and TableRevision name the status table every
	// endpoint of the view was read from (Endpoint.TableVersion).
	TableVersion  uint64 `json:"table_version"`
	TableRevision uint64 `json:"table_revision"`
	// Freshness is the answering node's, as its DNS answers have it.
	Freshness
	Endpoints []Endpoint `json:"endpoints"`
	// Evacuations are those in force over some of the endpoints' zones.
	Evacuations []EvacuationView `json:"evacuations,omitempty"`
}

// Freshness is how current a node's published view is, by the rule its
// DNS answers follow (SPEC §3, serve-stale): its age is the time since
// the older of its last contact with a leader and its last status table
// (since the node started, when it has had neither), and it is stale
// past the node's --stale-after, and while it serves the table kept on
// disk before its store caught up.
type Freshness struct {
	Stale      bool    `json:"stale"`
	AgeSeconds float64 `json:"age_seconds"`
}

// ServiceDetail is GET /v1/services/{ns}/{svc}.
type ServiceDetail struct {
	Definition Service `json:"definition"`
	View       View    `json:"view"`
	// Budget is the disruption budget and what holds it.
	Budget *DisruptionBudget `json:"disruption_budget,omitempty"`
}

// Registered is the answer to a registration.
type Registered struct {
	Instance
	// Created is false when the request was a retry of the committed
	// registration.
	Created bool `json:"created"`
}

// RegisterRequest is the body of a registration: a Registration
// whose weight and lease_ttl tell an absent field (the default) from one
// given as 0, so that an explicit 0 is refused, naming the field, rather
// than silently taken for the default. (The shallower fields win over the
// embedded ones in encoding/json.)
type RegisterRequest struct {
	Registration
	// Weight is the base weight, 1–65535; absent means 100.
	Weight *int `json:"weight,omitempty"`
	// LeaseTTL is 5s–24h; absent means the service's lease_ttl.
	LeaseTTL *Duration `json:"lease_ttl,omitempty"`
}

// MutateRequest is the body of renew, drain, deregister and report.
type MutateRequest struct {
	Incarnation  uint64                     `json:"incarnation"`
	Ready        *bool                      `json:"ready,omitempty"`
	Dependencies map[string]DependencyState `json:"dependencies,omitempty"`
	// Force, on a drain or a deregistration, overrides the service's
	// disruption budget; the override is audited.
	Force bool `json:"force,omitempty"`
}

// Status is GET /v1/status: this node as it sees itself.
type Status struct {
	NodeID   string `json:"node_id"`
	State    string `json:"state"`
	LeaderID string `json:"leader_id"`
	// Revision is the last raft index applied to this node's replica; a
	// follower is caught up once its revision reaches the leader's.
	Revision uint64 `json:"revision"`
	CaughtUp bool   `json:"caught_up"`
	// LastContact is when this node last heard from a leader or, if
	// older, last knew its replica had applied what the leader had, by
	// its own clock; on the leader itself it is the time of the answer.
	// Omitted
	// while the node has never heard from one.
	LastContact time.Time `json:"last_contact,omitzero"`
	// Freshness is how current what this node serves is: its views, its
	// DNS answers.
	Freshness
	// TableVersion is the version of the status table this node's DNS
	// and xDS servers answer from (0: none yet). It moves every
	// evaluation round, writes or not: a page showing what is served
	// (weights in slow start) reloads when it moves.
	TableVersion uint64 `json:"table_version"`
	// TableRevision is the store revision that table was built from (0:
	// none yet). It catches up with Revision a round after a write: a
	// page showing what is served reloads when it moves, so that it
	// never keeps what it read between a commit and its publication.
	TableRevision uint64 `json:"table_revision"`
	// GRPCAddr is the address this node's xDS server (gRPC) listens on,
	// as bound: HOST:PORT, the host possibly unspecified (0.0.0.0, ::)
	// when it listens on every interface. cairn xds-bootstrap points its
	// client there. Omitted when the node runs no xDS server.
	GRPCAddr string `json:"grpc_addr,omitempty"`
	// XDS is this node's xDS subscribers over all services; omitted when
	// the node runs no xDS server.
	XDS *XDSSummary `json:"xds,omitempty"`
	// TLS is the state of this node's certificates; omitted when it
	// speaks plaintext.
	TLS *TLSState `json:"tls,omitempty"`
}

// TLSState is what a node's certificates in use say of their own health
// (field notes T1, T2): their expiry, a rotation due, a reload failing.
type TLSState struct {
	// CertNotAfter is when the node's certificate expires.
	CertNotAfter time.Time `json:"cert_not_after"`
	// CANotAfter is when the earliest CA the node trusts expires.
	CANotAfter time.Time `json:"ca_not_after"`
	// RotateSoon: the certificate has lived two thirds of its lifetime.
	RotateSoon bool `json:"rotate_soon"`
	// ReloadFailing: the files on disk cannot be loaded; the node still
	// uses the ones it loaded last.
	ReloadFailing bool `json:"reload_failing"`
}

// XDSSummary is the xDS subscribers of one server over every service:
// its open streams, and those streams' subscribers by the oldest store
// revision they acknowledged of any endpoint assignment (XDSSubscribers
// over all services; a subscriber counts once). A stream that named no
// endpoint assignment counts in Streams alone.
type XDSSummary struct {
	Streams int `json:"streams"`
	XDSSubscribers
}

// ClassEvidence is one observer's latest evidence about an instance in
// one class, for `cairn endpoints`.
type ClassEvidence struct {
	Class    string    `json:"class"`
	Observer string    `json:"observer"`
	At       time.Time `json:"at"`
	OK       bool      `json:"ok"`
	// Detail: a probe's status code or error; an outcome window's counts.
	Detail string `json:"detail,omitempty"`
}

// XDSSubscribers is GET /v1/services/{ns}/{svc}/subscribers: the xDS
// subscribers of the server answering that hold assignments of the
// service, by the store revision of the content they acknowledged. A
// subscriber is behind when what it acknowledged is not what the
// server would send it now: a change on its way, or one it refused.
type XDSSubscribers struct {
	Subscribers int           `json:"subscribers"`
	Behind      int           `json:"behind"`
	Revisions   []XDSRevision `json:"revisions"` // newest first
}

// XDSRevision is how many subscribers hold a service's assignments as
// of one store revision, and how many of those are behind.
type XDSRevision struct {
	Revision    uint64 `json:"revision"`
	Subscribers int    `json:"subscribers"`
	Behind      int    `json:"behind"`
}
