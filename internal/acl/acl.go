// Package acl authenticates bearer tokens and decides what each scope may
// do (SPEC §8). It never stores or logs a secret: tokens are kept as their
// SHA-256 digests and named by a short, non-reversible identity.
//
// A leaf: it imports no cairn package. An Authorizer is immutable and
// safe for concurrent use; With returns a new one for a new token set.
package acl

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"slices"

	"go.yaml.in/yaml/v3"
)

// Scope is what a token is for.
type Scope string

// The scopes of SPEC §8.
const (
	Admin     Scope = "admin"
	Registrar Scope = "registrar"
	Instance  Scope = "instance"
	Prober    Scope = "prober"
	Reader    Scope = "reader"
)

// Sentinel errors; the API maps them to 401 and 403.
var (
	ErrNoToken      = errors.New("acl: no token")
	ErrUnknownToken = errors.New("acl: unknown token")
	ErrDenied       = errors.New("acl: not permitted")
)

// Token is one entry of the ACL file.
type Token struct {
	Secret     string   `yaml:"secret"`
	Scope      Scope    `yaml:"scope"`
	Namespaces []string `yaml:"namespaces,omitempty"`
	// Namespace, Service and Instance bind an instance token to one
	// instance.
	Namespace string `yaml:"namespace,omitempty"`
	Service   string `yaml:"service,omitempty"`
	Instance  string `yaml:"instance,omitempty"`
	// Node binds a prober token to one server: the node id (--node-id)
	// whose probe results it carries. Only a prober token names a node,
	// and a prober token without one may not send probe results.
	Node string `yaml:"node,omitempty"`
	// Digest is the hex SHA-256 of the secret, for a token whose secret is
	// not known here (one stored in the cluster); Secret is then empty.
	Digest string `yaml:"-"`
}

// DigestOf returns the hex SHA-256 digest under which a secret is stored.
func DigestOf(secret string) string {
	d := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(d[:])
}

// AccessorOf returns the public name of the token with the given hex
// digest: derived from it, so every node names a token alike, but not the
// digest itself.
func AccessorOf(digest string) string {
	a := sha256.Sum256([]byte("cairn-accessor:" + digest))
	return "t" + hex.EncodeToString(a[:6])
}

// File is the ACL file's layout.
type File struct {
	Tokens []Token `yaml:"tokens"`
}

// Identity is an authenticated caller: what its token allows, and a name
// fit for logs and the audit trail.
type Identity struct {
	// Name is the scope and the token's accessor ("reader:t0123abcd…",
	// AccessorOf its digest): enough to tell tokens apart, useless to
	// forge one.
	Name       string
	Scope      Scope
	Namespaces []string
	Namespace  string
	Service    string
	Instance   string
	// Node is the server a prober token speaks for (Token.Node).
	Node string
}

// AnonymousName is the name of every caller when ACLs are off.
const AnonymousName = "anonymous"

// anonymous is the identity of every caller when ACLs are off.
var anonymous = Identity{Name: AnonymousName, Scope: Admin}

type entry struct {
	digest [sha256.Size]byte
	id     Identity
}

// Config configures an Authorizer.
type Config struct {
	// Enabled turns checking on; when false every caller is an anonymous
	// admin (the --dev default, logged loudly by the caller).
	Enabled bool
	// Tokens are the accepted tokens.
	Tokens []Token
}

// Authorizer authenticates tokens. It is immutable and safe for
// concurrent use.
type Authorizer struct {
	enabled bool
	entries []entry
}

// New validates cfg and returns its Authorizer.
func New(cfg Config) (*Authorizer, error) {
	a := &Authorizer{enabled: cfg.Enabled}
	seen := map[[sha256.Size]byte]bool{}
	for i, t := range cfg.Tokens {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("acl: tokens[%d]: %w", i, err)
		}
		var d [sha256.Size]byte
		if t.Secret != "" {
			d = sha256.Sum256([]byte(t.Secret))
		} else if _, err := hex.Decode(d[:], []byte(t.Digest)); err != nil {
			return nil, fmt.Errorf("acl: tokens[%d]: digest: %w", i, err)
		}
		if seen[d] {
			return nil, fmt.Errorf("acl: tokens[%d]: secret: the same secret is listed twice", i)
		}
		seen[d] = true
		a.entries = append(a.entries, entry{digest: d, id: Identity{
			Name:  string(t.Scope) + ":" + AccessorOf(hex.EncodeToString(d[:])),
			Scope: t.Scope, Namespaces: slices.Clone(t.Namespaces),
			Namespace: t.Namespace, Service: t.Service, Instance: t.Instance, Node: t.Node,
		}})
	}
	return a, nil
}

// With returns an Authorizer that also accepts toks, skipping those whose
// secret a is already configured with (a's grant wins).
func (a *Authorizer) With(toks []Token) (*Authorizer, error) {
	have := map[[sha256.Size]byte]bool{}
	for _, e := range a.entries {
		have[e.digest] = true
	}
	extra := &Authorizer{enabled: a.enabled}
	var keep []Token
	for _, t := range toks {
		d := t.Digest
		if t.Secret != "" {
			d = DigestOf(t.Secret)
		}
		var b [sha256.Size]byte
		if _, err := hex.Decode(b[:], []byte(d)); err == nil && have[b] {
			continue
		}
		keep = append(keep, t)
	}
	more, err := New(Config{Enabled: a.enabled, Tokens: keep})
	if err != nil {
		return nil, err
	}
	extra.entries = append(slices.Clone(a.entries), more.entries...)
	return extra, nil
}

// Validate checks a token: its secret (or digest) and that its scope and
// bounds fit together. The error names the field.
func (t Token) Validate() error {
	switch {
	case t.Secret == "" && len(t.Digest) == 64:
	case len(t.Secret) < 16:
		return errors.New("secret: must be at least 16 characters")
	}
	switch t.Scope {
	case Admin, Prober:
		if len(t.Namespaces) > 0 || t.Namespace != "" || t.Service != "" || t.Instance != "" {
			return fmt.Errorf("scope: %s is not limited to namespaces or an instance", t.Scope)
		}
	case Registrar, Reader:
		if len(t.Namespaces) == 0 {
			return fmt.Errorf("namespaces: a %s token needs at least one namespace", t.Scope)
		}
		if t.Namespace != "" || t.Service != "" || t.Instance != "" {
			return fmt.Errorf("namespaces: a %s token lists namespaces, not an instance", t.Scope)
		}
	case Instance:
		if t.Namespace == "" || t.Service == "" || t.Instance == "" {
			return errors.New("instance: an instance token needs namespace, service and instance")
		}
		if len(t.Namespaces) > 0 {
			return errors.New("namespaces: an instance token is bound to one instance, not namespaces")
		}
	default:
		return fmt.Errorf("scope: %q must be admin, registrar, instance, prober or reader", t.Scope)
	}
	if t.Node != "" {
		if t.Scope != Prober {
			return fmt.Errorf("node: only a prober token names a node; a %s token may not", t.Scope)
		}
		if err := checkNode(t.Node); err != nil {
			return err
		}
	}
	return nil
}

// checkNode checks a node id as --node-id is checked: a DNS label.
func checkNode(s string) error {
	if len(s) > 63 {
		return fmt.Errorf("node: %q is %d characters; a node id is a DNS label of at most 63", s, len(s))
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return fmt.Errorf("node: %q is not a node id: only lower-case a-z, 0-9 and '-' are allowed", s)
		}
	}
	if s[0] == '-' || s[len(s)-1] == '-' {
		return fmt.Errorf("node: %q is not a node id: it may not start or end with '-'", s)
	}
	return nil
}

// LoadFile reads an ACL file (YAML; unknown keys are refused) and checks
// each token (Validate); the error names the file, the token and the
// field.
func LoadFile(path string) ([]Token, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("acl: opening %q: %w", path, err)
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var file File
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("acl: reading %q: %w", path, err)
	}
	for i, t := range file.Tokens {
		if err := t.Validate(); err != nil {
			return nil, fmt.Errorf("acl: %q: tokens[%d]: %w", path, i, err)
		}
	}
	return file.Tokens, nil
}

// Enabled reports whether tokens are checked.
func (a *Authorizer) Enabled() bool { return a.enabled }

// Authenticate returns the identity of secret. Every entry is compared in
// constant time, and all of them are compared whatever matches, so the time
// taken says nothing about the secret.
func (a *Authorizer) Authenticate(secret string) (Identity, error) {
	if !a.enabled {
		return anonymous, nil
	}
	if secret == "" {
		return Identity{}, ErrNoToken
	}
	d := sha256.Sum256([]byte(secret))
	found := -1
	for i := range a.entries {
		if subtle.ConstantTimeCompare(d[:], a.entries[i].digest[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return Identity{}, ErrUnknownToken
	}
	return a.entries[found].id, nil
}

// Action is something a caller asks to do.
type Action int

// Actions the API checks.
const (
	// Read service definitions, endpoints and events of a namespace.
	Read Action = iota
	// Apply service definitions in a namespace.
	Apply
	// Register an instance.
	Register
	// Renew, Drain and Deregister act on one instance.
	Renew
	Drain
	Deregister
	// Report is a self-report about one instance.
	Report
	// ReadCluster lists members; ManageCluster joins and removes them.
	ReadCluster
	ManageCluster
	// Outcome reports caller-observed outcomes about endpoints of a
	// namespace (POST /v1/outcomes): whoever may resolve it.
	Outcome
	// ProbeResults sends a server's probe results to the leader: an
	// admin, or a prober token that names its node (see ProbeObserver).
	ProbeResults
	// ForwardOutcomes sends to the leader the outcomes a server's xDS
	// subscribers reported over LRS, each under the observer the server
	// authenticated: an admin, or a prober token that names its node.
	ForwardOutcomes
	// Evacuate starts and ends evacuations (SPEC §6): of a whole zone, an
	// admin's; of one service, its namespace's registrar may too.
	Evacuate
)

// Allows reports whether id may do act on the namespace, service and
// instance named (empty where they do not apply).
func (id Identity) Allows(act Action, ns, svc, inst string) bool {
	switch id.Scope {
	case Admin:
		return true
	case Registrar:
		switch act {
		// Report: a registrar that registers on an instance's behalf
		// (kube-sync: an orchestrator's readiness) tells its readiness
		// too; an instance token may only speak of itself.
		case Read, Apply, Register, Renew, Drain, Deregister, Report, Outcome, Evacuate:
			return slices.Contains(id.Namespaces, ns)
		case ReadCluster:
			return true
		}
	case Reader:
		switch act {
		case Read, Outcome:
			return slices.Contains(id.Namespaces, ns)
		case ReadCluster:
			return true
		}
	case Prober:
		// Not Outcome: outcomes are what a caller saw, and a server's
		// token posing as a caller would be one more voice for the
		// outcome quorum that no caller owns (docs/decisions.md).
		switch act {
		case Read, ReadCluster:
			return true
		case ProbeResults, ForwardOutcomes:
			return id.Node != ""
		}
	case Instance:
		self := ns == id.Namespace && svc == id.Service && inst == id.Instance
		switch act {
		case Renew, Drain, Report:
			return self
		case Read:
			return ns == id.Namespace && svc == id.Service
		}
	}
	return false
}

// ProbeObserver returns the observer id may send probe results as, given
// the observer its report names ("" when none). A prober token speaks
// for its node only: a report naming no observer is its node's, and one
// naming another is refused, so one stolen prober token speaks for one
// server (SPEC §8). An admin may report as any observer (the anonymous
// admin of ACLs off included); the name it gives is returned as given.
// A refusal wraps ErrDenied and says which rule refused.
func (id Identity) ProbeObserver(observer string) (string, error) {
	switch {
	case id.Scope == Admin:
		return observer, nil
	case id.Scope != Prober:
		return "", fmt.Errorf("%s token may not send probe results: %w", id.Scope, ErrDenied)
	case id.Node == "":
		return "", fmt.Errorf("prober token names no node, so it may not send probe results (give it node: the --node-id of the server that uses it): %w", ErrDenied)
	case observer != "" && observer != id.Node:
		return "", fmt.Errorf("prober token of node %s may not report as %s: %w", id.Node, observer, ErrDenied)
	}
	return id.Node, nil
}
