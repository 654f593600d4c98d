package store

import (
	"cmp"
	"slices"
	"strings"
	"time"

	"github.com/cairn-sd/cairn/wire"
)

func cloneInstance(in wire.Instance) wire.Instance {
	out := in
	out.Addresses = append([]string(nil), in.Addresses...)
	out.RetiredRegistrationIDs = slices.Clone(in.RetiredRegistrationIDs)
	out.Ports = make(map[string]int, len(in.Ports))
	for k, v := range in.Ports {
		out.Ports[k] = v
	}
	if in.Report != nil {
		r := *in.Report
		r.Dependencies = make(map[string]wire.DependencyState, len(in.Report.Dependencies))
		for k, v := range in.Report.Dependencies {
			r.Dependencies[k] = v
		}
		out.Report = &r
	}
	out.Health = cloneHealth(in.Health)
	return out
}

// sameAs reports whether r (normalised; ttlDefault says whether it left
// lease_ttl to the policy) asks for exactly what in already holds, so that
// a retried registration returns the committed record.
func sameAs(r wire.Registration, in *record, ttlDefault bool) bool {
	sameTTL := r.LeaseTTL == in.leaseTTL || ttlDefault && in.ttlDefault
	if r.ID != in.id || r.RegistrationID != in.registrationID() || r.Region != in.origin.region || r.Zone != in.origin.zone ||
		r.Weight != int(in.weight) || !sameTTL || r.Ramp != in.ramp() ||
		len(r.Addresses) != len(in.addresses) || len(r.Ports) != len(in.ports) {
		return false
	}
	for i := range r.Addresses {
		if r.Addresses[i] != in.addresses[i] {
			return false
		}
	}
	for k, v := range r.Ports {
		if p, ok := in.ports[k]; !ok || p != v {
			return false
		}
	}
	return true
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
	if err := wire.CheckLabel("accessor", t.Accessor); err != nil {
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
		if err := wire.CheckLabel("node", t.Node); err != nil {
			return err
		}
	}
	return nil
}

// listRecords copies the records of x, of service svc or (nil) all,
// under the FSM's lock, in no order. The copies share their slices, maps
// and pointers with the records: the FSM never modifies those in place
// once a record holds them (a change replaces them), so sharing them is
// safe for as long as the reader does not modify them either. A copy is
// 160 bytes; the views the API needs are made from them once the lock is
// released (see record.view).
func listRecords(x *index, svc *wire.ServiceKey) []record {
	if svc != nil {
		m := x.svcs[*svc]
		out := make([]record, 0, len(m))
		for _, in := range m {
			out = append(out, *in)
		}
		return out
	}
	out := make([]record, 0, x.len())
	for in := range x.all {
		out = append(out, *in)
	}
	return out
}

// sortRecords sorts by key; it needs no lock, so callers release the
// FSM's first (a sort of 100,000 instances takes tens of milliseconds,
// which Apply would otherwise wait out).
func sortRecords(out []record) {
	slices.SortFunc(out, func(a, b record) int { return compareKeys(a.key(), b.key()) })
}

// views returns the views of recs, in their order. Their Healths are
// made in one slice rather than one allocation each: a listing of every
// instance would otherwise make 100,000 small objects for the collector
// to trace.
func views(recs []record) []wire.Instance {
	n := 0
	for i := range recs {
		if recs[i].verdict != nil {
			n++
		}
	}
	hs := make([]wire.Health, 0, n)
	out := make([]wire.Instance, len(recs))
	for i := range recs {
		r := &recs[i]
		out[i] = r.bare()
		if r.verdict != nil {
			hs = append(hs, r.verdict.Health())
			out[i].Health = &hs[len(hs)-1]
		}
	}
	return out
}

// compareKeys orders keys as their strings ("ns/svc/id") compare, without
// making the strings: a sort of n instances would otherwise make
// 2 n log n of them.
func compareKeys(a, b wire.InstanceKey) int {
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
