package wire

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/status"
)

// Replay is GET /v1/services/{ns}/{svc}/view?at=TIME|revision=N: what
// the answering node told a caller in one place about a service at a
// time of the past, over DNS and over xDS, each endpoint's state and
// the evidence behind it as the audit trail had it, what changed in the
// minute before, and how current the node's view was.
type Replay struct {
	Namespace string `json:"namespace"`
	Service   string `json:"service"`
	// At is the time replayed: the one asked, or for a revision the
	// build time of the table replayed.
	At time.Time `json:"at"`
	// Region and Zone are the caller's place replayed ("" for both: the
	// answering node's own).
	Region string `json:"region"`
	Zone   string `json:"zone"`
	// TableVersion, TableRevision and TableBuilt name the status table
	// in force at At on the answering node: its version (which the
	// node's logs carry), the store revision it was built from (the first
	// part of every xDS version sent from it), and when it was built.
	TableVersion  uint64    `json:"table_version"`
	TableRevision uint64    `json:"table_revision"`
	TableBuilt    time.Time `json:"table_built"`
	// Freshness is the node's at At: "fresh", "stale" (answers carried
	// EDE 3), "restored" (served from the table kept on disk: stale too)
	// or "expired" (past --max-stale: SERVFAIL). SyncedAt is when its
	// view was last known current then, when not fresh.
	Freshness string    `json:"freshness"`
	SyncedAt  time.Time `json:"synced_at,omitzero"`
	// HealthDisregarded: an endpoint was served only because the guard
	// disregarded health.
	HealthDisregarded bool `json:"health_disregarded"`
	// HistorySince is the oldest time the node's history of the service
	// answers for.
	HistorySince time.Time `json:"history_since"`
	// Candidates, for a revision, counts the states the service had in
	// tables of that revision; the one replayed is the one whose content
	// Version's digest names, else the last.
	Candidates int `json:"candidates,omitempty"`
	// Matched, when a version was given, reports whether the replayed
	// state's content has its digest: the response came from it.
	Matched *bool `json:"matched,omitempty"`

	Endpoints []ReplayEndpoint `json:"endpoints"`
	DNS       []ReplayDNS      `json:"dns"`
	XDS       []ReplayXDS      `json:"xds"`
	// Changes are the changes of the endpoints' state in the minute
	// before At (and, for an instance, around it), oldest first.
	Changes []ReplayChange `json:"changes"`
	// Events are the audit trail's events of the service in the same
	// span.
	Events []Event `json:"events"`
}

// ReplayQuery is what to replay: At, or Revision (with Digest, the
// second part of an xDS version, when a response's version is known),
// for a caller at Region and Zone (both empty: the answering node's
// place); Instance narrows the changes and events to one instance, over
// five minutes either side.
type ReplayQuery struct {
	Namespace, Service string
	At                 time.Time
	Revision           uint64
	Digest             string
	Region, Zone       string
	Instance           string
}

// ReplayEndpoint is one endpoint as the replayed table held it.
type ReplayEndpoint struct {
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
	Flags       []string         `json:"flags"`
	// Tier is the endpoint's tier for the caller replayed.
	Tier int `json:"tier"`
	// Transition is the audit trail's last eligibility event of this
	// incarnation at or before At: the verdict's reason, its evidence
	// (class, observer, when) and who decided. Omitted when the trail
	// holds none (then Reason says why).
	Transition *Event `json:"transition,omitempty"`
	// EvidenceAgeSeconds is how old that evidence was at At.
	EvidenceAgeSeconds *float64 `json:"evidence_age_seconds,omitempty"`
	Reason             string   `json:"reason,omitempty"`
}

// ReplayDNS is one query replayed: its name and type, and the answer the
// node's DNS server code gives it from the replayed table (over TCP:
// nothing truncated; A and AAAA samples drawn afresh among the same
// candidates when there are more than the limit).
type ReplayDNS struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Rcode string `json:"rcode"`
	// Answer and Additional are the records in presentation form.
	Answer     []string `json:"answer"`
	Additional []string `json:"additional,omitempty"`
	// EDE are the Extended DNS Errors, as "code: text".
	EDE []string `json:"ede,omitempty"`
	// Sampled: the name has more candidates than the answer's limit, so
	// a caller got some of Candidates, drawn by weight.
	Sampled    bool     `json:"sampled,omitempty"`
	Candidates []string `json:"candidates,omitempty"`
}

// ReplayXDS is the assignment of one of the service's ports a
// subscriber at the caller's place was sent from the replayed table.
type ReplayXDS struct {
	Cluster string `json:"cluster"`
	// Version is the resource's version: the table's store revision,
	// then the content's digest.
	Version   string              `json:"version"`
	Endpoints []ReplayXDSEndpoint `json:"endpoints"`
}

// ReplayXDSEndpoint is one endpoint of an assignment.
type ReplayXDSEndpoint struct {
	Address  string `json:"address"`
	Region   string `json:"region"`
	Zone     string `json:"zone"`
	Priority int    `json:"priority"`
	Weight   int    `json:"weight"`
	Health   string `json:"health"`
}

// ReplayChange is one endpoint's change in one table: what it was and
// what it became (Before or After nil: it came or went).
type ReplayChange struct {
	At            time.Time       `json:"at"`
	TableVersion  uint64          `json:"table_version"`
	TableRevision uint64          `json:"table_revision"`
	InstanceID    string          `json:"instance_id"`
	Before        *ReplayEndpoint `json:"before,omitempty"`
	After         *ReplayEndpoint `json:"after,omitempty"`
}

// ParseReplayVersion reads an xDS version cairn sent, as a replay takes
// it (the view's ?version=, `cairn replay --version`): the store
// revision (from 1), a "-", then the content's digest.
func ParseReplayVersion(s string) (revision uint64, digest string, err error) {
	head, digest, ok := strings.Cut(s, "-")
	rev, perr := strconv.ParseUint(head, 10, 64)
	if !ok || perr != nil || rev == 0 || digest == "" {
		return 0, "", fmt.Errorf("%q is not an xDS version cairn sent: <store revision>-<digest>", s)
	}
	return rev, digest, nil
}

// ParseReplayTime reads a replay's time (the view's ?at=, `cairn replay
// --at`): RFC 3339, or a negative duration before now ("-90s", "-2h").
func ParseReplayTime(s string, now time.Time) (time.Time, error) {
	if strings.HasPrefix(s, "-") {
		if d, err := time.ParseDuration(s); err == nil {
			return now.Add(d), nil
		}
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2026-12-06T14:02:17Z) nor a duration before now (-90s)", s)
	}
	return t, nil
}

// ServiceHistory is GET /v1/services/{ns}/{svc}/history: how many of the
// service's endpoints the answering node served in each zone, over a
// span of its history, and what moved them.
type ServiceHistory struct {
	Namespace string    `json:"namespace"`
	Service   string    `json:"service"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	// HistorySince is the oldest time the node's history of the service
	// answers for; From is never earlier.
	HistorySince time.Time `json:"history_since"`
	// Zones holds, per zone, the eligible endpoints at From and at each
	// change of their number, oldest first.
	Zones []ZoneSeries `json:"zones"`
	// Marks are the withdrawals and admissions of endpoints, and the
	// audit trail's evacuation events, in the span, oldest first.
	Marks []HistoryMark `json:"marks"`
}

// ZoneSeries is one zone's eligible endpoints over time.
type ZoneSeries struct {
	Region string       `json:"region"`
	Zone   string       `json:"zone"`
	Points []CountPoint `json:"points"`
}

// CountPoint is a count from a time on.
type CountPoint struct {
	At       time.Time `json:"at"`
	Eligible int       `json:"eligible"`
}

// HistoryMark is one event on the timeline: "withdrawal" or "admission"
// of an instance (by the tables), or an evacuation event's kind
// ("evacuated", "evacuation_ended", …), with its zone and reason.
type HistoryMark struct {
	At       time.Time `json:"at"`
	Kind     string    `json:"kind"`
	Instance string    `json:"instance_id,omitempty"`
	Region   string    `json:"region,omitempty"`
	Zone     string    `json:"zone,omitempty"`
	Detail   string    `json:"detail,omitempty"`
}
