package wire

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// ProbeReport is one observer's batch of probe results: what a follower
// sends the leader every batch interval (POST /v1/internal/probe-results),
// and what the leader's own prober hands its Node in process. It carries
// the latest result of every target the observer probes, changed or not.
type ProbeReport struct {
	Observer string        `json:"observer"`
	Seq      uint64        `json:"seq"`
	Results  []ProbeResult `json:"results"`
}

// ProbeResult is the latest result of one target.
type ProbeResult struct {
	// Target is the target id: "namespace/service/instance#incarnation".
	Target string    `json:"target"`
	At     time.Time `json:"at"`
	OK     bool      `json:"ok"`
	// Hard marks a refused connection.
	Hard bool `json:"hard,omitempty"`
	// Unreachable marks a check that got no answer at all (a timeout, an
	// unreachable network or host): evidence only while its observer
	// still reaches most of the target's zone.
	Unreachable bool `json:"unreachable,omitempty"`
	// Code is the HTTP status or gRPC serving status, 0 if none.
	Code int `json:"code,omitempty"`
	// Error says briefly why the check failed.
	Error string `json:"error,omitempty"`
}

// ProbeReply is the leader's answer to a ProbeReport.
type ProbeReply struct {
	Accepted  int `json:"accepted"`
	Discarded int `json:"discarded"`
	// Live is the members the leader counts as live: the set every node
	// assigns targets over.
	Live []string `json:"live"`
}

// OutcomeReport is one caller's outcomes (POST /v1/outcomes): per
// endpoint it was served, the calls that succeeded, failed and timed out
// over the caller's last window. The caller is the authenticated token.
type OutcomeReport struct {
	Endpoints []EndpointOutcome `json:"endpoints"`
}

// EndpointOutcome is one endpoint's counts.
type EndpointOutcome struct {
	Namespace   string `json:"namespace"`
	Service     string `json:"service"`
	Instance    string `json:"instance_id"`
	Incarnation uint64 `json:"incarnation"`
	Success     int    `json:"success"`
	Failure     int    `json:"failure"`
	Timeout     int    `json:"timeout"`
}

// OutcomeReply says what became of an OutcomeReport: endpoints accepted
// as evidence, and those discarded by reason (unknown_endpoint,
// stale_incarnation, not_served, no_calls).
type OutcomeReply struct {
	Accepted  int            `json:"accepted"`
	Discarded map[string]int `json:"discarded,omitempty"`
}

// Limits of the wire types.
const (
	MaxOutcomeEndpoints = 1000
	maxCount            = 1_000_000_000
	MaxProbeResults     = 1 << 20
)

// Validate checks r: 1 to 1000 endpoints, each named by valid labels and
// a non-zero incarnation, counts between 0 and 10⁹, no endpoint twice.
func (r OutcomeReport) Validate() error {
	if len(r.Endpoints) == 0 {
		return invalid("endpoints", "at least one endpoint is required")
	}
	if len(r.Endpoints) > MaxOutcomeEndpoints {
		return invalid("endpoints", "at most %d per report, got %d", MaxOutcomeEndpoints, len(r.Endpoints))
	}
	seen := make(map[string]bool, len(r.Endpoints))
	for i, e := range r.Endpoints {
		f := fmt.Sprintf("endpoints[%d]", i)
		for _, l := range []struct{ name, v string }{{"namespace", e.Namespace}, {"service", e.Service}, {"instance_id", e.Instance}} {
			if err := CheckLabel(f+"."+l.name, l.v); err != nil {
				return err
			}
		}
		if e.Incarnation == 0 {
			return invalid(f+".incarnation", "is required")
		}
		for _, c := range []struct {
			name string
			v    int
		}{{"success", e.Success}, {"failure", e.Failure}, {"timeout", e.Timeout}} {
			if c.v < 0 || c.v > maxCount {
				return invalid(f+"."+c.name, "must be between 0 and %d, got %d", maxCount, c.v)
			}
		}
		k := e.Key().String()
		if seen[k] {
			return invalid(f, "%s appears twice", k)
		}
		seen[k] = true
	}
	return nil
}

// Key returns the key of the instance e counts calls to.
func (e EndpointOutcome) Key() InstanceKey {
	return InstanceKey{Namespace: e.Namespace, Service: e.Service, ID: e.Instance}
}

// ObservedOutcomes is one caller's outcome counts as an xDS server
// forwards them: the caller (observer) it authenticated on its load
// reporting stream, and what it reported.
type ObservedOutcomes struct {
	Observer string `json:"observer"`
	OutcomeReport
}

// Caller is the caller an outcome report's observer names, whichever
// way the report came: a load report a server forwards as "xds:NAME" is
// NAME's, the same caller as NAME's own POST /v1/outcomes, so that one
// token (or, with ACLs off, the one anonymous caller) is one voice in the
// outcome quorum however it reports.
func Caller(observer string) string { return strings.TrimPrefix(observer, "xds:") }

// OutcomeBatch is POST /v1/internal/outcomes: what a server's xDS
// subscribers reported over LRS, as caller outcomes, forwarded to the
// leader. Each observer's name starts with "xds:".
type OutcomeBatch struct {
	Reports []ObservedOutcomes `json:"reports"`
}

// MaxOutcomeBatch bounds the reports of one OutcomeBatch.
const MaxOutcomeBatch = 1000

// Validate checks b: 1 to MaxOutcomeBatch reports, each from an observer
// named "xds:" and up to 256 printable characters without spaces, each a
// valid OutcomeReport.
func (b OutcomeBatch) Validate() error {
	if len(b.Reports) == 0 {
		return invalid("reports", "at least one report is required")
	}
	if len(b.Reports) > MaxOutcomeBatch {
		return invalid("reports", "at most %d per batch, got %d", MaxOutcomeBatch, len(b.Reports))
	}
	for i, r := range b.Reports {
		f := fmt.Sprintf("reports[%d]", i)
		if !strings.HasPrefix(r.Observer, "xds:") || len(r.Observer) > 256 || strings.ContainsFunc(r.Observer, func(c rune) bool { return c <= ' ' || c > '~' }) {
			return invalid(f+".observer", `must start with "xds:" and be at most 256 printable characters without spaces, got %q`, r.Observer)
		}
		if err := r.OutcomeReport.Validate(); err != nil {
			var fe *FieldError
			if errors.As(err, &fe) {
				return invalid(f+"."+fe.Field, "%s", fe.Rule)
			}
			return err
		}
	}
	return nil
}
