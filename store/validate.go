package store

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/cairn-sd/cairn/dnsname"
)

// FieldError is invalid input: it names the field and the rule broken.
// It wraps ErrInvalid.
type FieldError struct {
	Field string
	Rule  string
}

func (e *FieldError) Error() string { return e.Field + ": " + e.Rule }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *FieldError) Unwrap() error { return ErrInvalid }

func invalid(field, format string, args ...any) error {
	return &FieldError{Field: field, Rule: fmt.Sprintf(format, args...)}
}

// CheckLabel reports whether s is a DNS label as SPEC §1 defines it (the
// rule is package dnsname's), naming field when it is not.
func CheckLabel(field, s string) error {
	if err := dnsname.CheckLabel(s); err != nil {
		return &FieldError{Field: field, Rule: err.Error()}
	}
	return nil
}

// Defaults of SPEC §2 and §6.1; docs/api.md lists them with their reasons.
const (
	DefaultDNSTTL             = 5 * time.Second
	DefaultARecordLimit       = 8
	DefaultMinHealthyFraction = 0.5
	DefaultWithdrawAfter      = 3
	DefaultAdmitAfter         = 5
	DefaultAdmitMin           = 10 * time.Second
	DefaultSlowStart          = 30 * time.Second
	DefaultDrainWindow        = 30 * time.Second
	DefaultLeaseTTL           = 30 * time.Second
	DefaultShrinkCap          = 0.33
	DefaultMaxEjectionPercent = 10
	DefaultFlapLimit          = 4
	DefaultOutcomeQuorum      = 2
	DefaultCorrelatedFailure  = 0.5
	DefaultCheckInterval      = 2 * time.Second
	DefaultCheckTimeout       = 1 * time.Second
	DefaultWeight             = 100

	// MinLeaseTTL is five lease checkpoints, so that a follower's view of
	// a renewed lease (replicated once a checkpoint) never looks expired;
	// MaxLeaseTTL keeps a dead instance from lingering for days.
	MinLeaseTTL = 5 * time.Second
	MaxLeaseTTL = 24 * time.Hour
)

// WithDefaults returns s with every unset field at its default.
func (s Service) WithDefaults() Service {
	p := &s.Policy
	setD := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	setD(&p.DNSTTL, DefaultDNSTTL)
	if p.AdmitMin == nil {
		v := Duration(DefaultAdmitMin)
		p.AdmitMin = &v
	}
	if p.SlowStart == nil {
		v := Duration(DefaultSlowStart)
		p.SlowStart = &v
	}
	if p.FlapLimit == nil {
		v := DefaultFlapLimit
		p.FlapLimit = &v
	}
	setD(&p.DrainWindow, DefaultDrainWindow)
	setD(&p.LeaseTTL, DefaultLeaseTTL)
	if p.ARecordLimit == 0 {
		p.ARecordLimit = DefaultARecordLimit
	}
	if p.MinHealthyFraction == nil {
		v := DefaultMinHealthyFraction
		p.MinHealthyFraction = &v
	}
	if p.WithdrawAfter == 0 {
		p.WithdrawAfter = DefaultWithdrawAfter
	}
	if p.AdmitAfter == 0 {
		p.AdmitAfter = DefaultAdmitAfter
	}
	if p.ShrinkCap == 0 {
		p.ShrinkCap = DefaultShrinkCap
	}
	if p.MaxEjectionPercent == nil {
		v := DefaultMaxEjectionPercent
		p.MaxEjectionPercent = &v
	}
	if p.OutcomeQuorum == 0 {
		p.OutcomeQuorum = DefaultOutcomeQuorum
	}
	if p.CorrelatedFailureFraction == 0 {
		p.CorrelatedFailureFraction = DefaultCorrelatedFailure
	}
	s.Ports = append([]Port(nil), s.Ports...)
	for i := range s.Ports {
		if s.Ports[i].Protocol == "" {
			s.Ports[i].Protocol = "tcp"
		}
	}
	if s.Check != nil {
		c := *s.Check
		if c.Port == "" && len(s.Ports) > 0 {
			c.Port = s.Ports[0].Name
		}
		if c.Type == "http" && c.Path == "" {
			c.Path = "/"
		}
		setD(&c.Interval, DefaultCheckInterval)
		setD(&c.Timeout, DefaultCheckTimeout)
		s.Check = &c
	}
	if len(s.Capability.Dependencies) == 0 {
		// One spelling of "none", so that a definition compares equal to
		// itself after a snapshot (which restores an empty list as nil).
		s.Capability.Dependencies = nil
	}
	if s.Capability.Readiness == "" {
		if s.Check != nil {
			s.Capability.Readiness = "probe"
		} else {
			s.Capability.Readiness = "none"
		}
	}
	return s
}

// Validate checks a definition that has its defaults applied. The first
// broken rule is returned as a *FieldError.
func (s Service) Validate() error {
	if err := CheckLabel("namespace", s.Namespace); err != nil {
		return err
	}
	if err := CheckLabel("name", s.Name); err != nil {
		return err
	}
	if len(s.Ports) == 0 {
		return invalid("ports", "at least one port is required")
	}
	seen := map[string]bool{}
	for i, p := range s.Ports {
		f := fmt.Sprintf("ports[%d]", i)
		if err := CheckLabel(f+".name", p.Name); err != nil {
			return err
		}
		if seen[p.Name] {
			return invalid(f+".name", "%q is declared twice", p.Name)
		}
		seen[p.Name] = true
		if p.Number < 1 || p.Number > 65535 {
			return invalid(f+".number", "%d is out of range 1-65535", p.Number)
		}
		if p.Protocol != "tcp" && p.Protocol != "udp" {
			return invalid(f+".protocol", "%q must be tcp or udp", p.Protocol)
		}
	}
	switch s.Capability.Readiness {
	case "probe", "self", "none":
	default:
		return invalid("capability.readiness", "%q must be probe, self or none", s.Capability.Readiness)
	}
	deps := map[string]bool{}
	for i, d := range s.Capability.Dependencies {
		f := fmt.Sprintf("capability.dependencies[%d].name", i)
		if err := CheckLabel(f, d.Name); err != nil {
			return err
		}
		if deps[d.Name] {
			return invalid(f, "%q is declared twice", d.Name)
		}
		deps[d.Name] = true
	}
	if s.Capability.Readiness == "probe" && s.Check == nil {
		return invalid("check", "capability.readiness is probe, so a check is required")
	}
	if c := s.Check; c != nil {
		switch c.Type {
		case "tcp", "http", "grpc":
		default:
			return invalid("check.type", "%q must be tcp, http or grpc", c.Type)
		}
		if _, ok := s.Port(c.Port); !ok {
			return invalid("check.port", "%q is not one of the service's ports", c.Port)
		}
		if c.Type == "http" && (len(c.Path) == 0 || c.Path[0] != '/') {
			return invalid("check.path", "%q must start with '/'", c.Path)
		}
		if c.Type != "http" && c.Path != "" {
			return invalid("check.path", "only an http check has a path")
		}
		if c.Interval.D() < 100*time.Millisecond {
			return invalid("check.interval", "%s is shorter than the minimum 100ms", c.Interval)
		}
		if c.Timeout.D() <= 0 || c.Timeout >= c.Interval {
			return invalid("check.timeout", "%s must be positive and shorter than the interval %s", c.Timeout, c.Interval)
		}
	}
	p := s.Policy
	if p.DNSTTL.D() < 0 || p.DNSTTL.D() > 24*time.Hour || p.DNSTTL.D()%time.Second != 0 {
		return invalid("policy.dns_ttl", "%s must be whole seconds between 0s and 24h", p.DNSTTL)
	}
	if p.ARecordLimit < 1 || p.ARecordLimit > 64 {
		return invalid("policy.a_record_limit", "%d is out of range 1-64", p.ARecordLimit)
	}
	// Negated ranges, so that NaN (YAML's .nan) is out of range too.
	if f := *p.MinHealthyFraction; !(f >= 0 && f <= 1) {
		return invalid("policy.min_healthy_fraction", "%g is out of range 0-1", f)
	}
	if p.WithdrawAfter < 1 || p.WithdrawAfter > 100 {
		return invalid("policy.withdraw_after", "%d is out of range 1-100", p.WithdrawAfter)
	}
	if p.AdmitAfter <= p.WithdrawAfter || p.AdmitAfter > 1000 {
		return invalid("policy.admit_after", "%d must be greater than withdraw_after (%d) and at most 1000: re-admission is slower than withdrawal", p.AdmitAfter, p.WithdrawAfter)
	}
	if p.AdmitMin.D() < 0 {
		return invalid("policy.admit_min", "%s is negative", *p.AdmitMin)
	}
	if p.SlowStart.D() < 0 {
		return invalid("policy.slow_start", "%s is negative", *p.SlowStart)
	}
	if f := *p.FlapLimit; f < 0 || f > 1000 {
		return invalid("policy.flap_limit", "%d is out of range 0-1000", f)
	}
	if p.DrainWindow.D() < 0 {
		return invalid("policy.drain_window", "%s is negative", p.DrainWindow)
	}
	if err := checkLeaseTTL("policy.lease_ttl", p.LeaseTTL); err != nil {
		return err
	}
	if !(p.ShrinkCap > 0 && p.ShrinkCap <= 1) {
		return invalid("policy.shrink_cap", "%g is out of range (0, 1]", p.ShrinkCap)
	}
	if e := *p.MaxEjectionPercent; e < 0 || e > 100 {
		return invalid("policy.max_ejection_percent", "%d is out of range 0-100", e)
	}
	if q := p.OutcomeQuorum; q < 1 || q > 16 {
		return invalid("policy.outcome_quorum", "%d is out of range 1-16 (at most 16 callers are remembered per instance)", q)
	}
	if f := p.CorrelatedFailureFraction; !(f > 0 && f <= 1) {
		return invalid("policy.correlated_failure_fraction", "%g is out of range (0, 1]", f)
	}
	return nil
}

func checkLeaseTTL(field string, d Duration) error {
	if d.D() < MinLeaseTTL || d.D() > MaxLeaseTTL {
		return invalid(field, "%s is out of range %s-%s", d, MinLeaseTTL, MaxLeaseTTL)
	}
	return nil
}

// normalize fills r's defaults from svc and checks it against svc. It does
// not judge addresses against a policy (the API does that), only their
// syntax and canonical form.
func (r *Registration) normalize(svc Service) error {
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
	switch r.Lifecycle {
	case "":
		r.Lifecycle = Ready
	case Starting, Ready:
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

func (r Report) validate(svc Service) error {
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

// Sentinel errors. Callers branch on them with errors.Is.
var (
	// ErrInvalid is input that breaks a rule; the error names the field.
	ErrInvalid = errors.New("store: invalid input")
	// ErrNotFound is an unknown service or instance.
	ErrNotFound = errors.New("store: not found")
	// ErrFenced is a mutation carrying an incarnation other than the
	// instance's current one; nothing was changed.
	ErrFenced = errors.New("store: fenced")
	// ErrNotLeader means this node cannot accept writes now.
	ErrNotLeader = errors.New("store: not leader")
	// ErrNoLeader means no leader is known: the cluster has lost quorum
	// or is electing.
	ErrNoLeader = errors.New("store: no leader")
	// ErrClosed is returned after Close.
	ErrClosed = errors.New("store: closed")
)
