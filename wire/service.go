package wire

import (
	"fmt"
	"time"
)

// ServiceKey names a service: the namespace is the tenant boundary.
type ServiceKey struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

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
	// ShiftBack is how long a zone takes to return once its evacuation
	// ends (SPEC §6): its share rises in EvacuationSteps steps over it.
	// Unlike the fields above it is not filled in by WithDefaults (a
	// definition applied before it existed reads the same); ShiftBackWindow
	// gives the window.
	ShiftBack *Duration `json:"shift_back,omitempty" yaml:"shift_back"` // default 5m; 0 = at once
	// MaxUnavailable is the disruption budget: a count ("2") or a
	// percentage ("25%") of the instances that may be unavailable before
	// a voluntary disruption is refused. Like ShiftBack it stays unset
	// when left out, and means DefaultMaxUnavailable where it is judged
	// (Budget.Limit), so that definitions stored before it existed read
	// and compare as they did.
	MaxUnavailable Budget `json:"max_unavailable,omitempty" yaml:"max_unavailable,omitempty"` // default 25%
}

// ShiftBackWindow is the policy's shift_back, or its default.
func (p Policy) ShiftBackWindow() time.Duration {
	if p.ShiftBack == nil {
		return DefaultShiftBack
	}
	return p.ShiftBack.D()
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
	// DefaultShrinkWindow is the shrink cap's window; no service sets
	// it (SPEC §2: "1/3 per 10 s").
	DefaultShrinkWindow       = 10 * time.Second
	DefaultMaxEjectionPercent = 10
	DefaultFlapLimit          = 4
	DefaultOutcomeQuorum      = 2
	DefaultCorrelatedFailure  = 0.5
	DefaultCheckInterval      = 2 * time.Second
	DefaultCheckTimeout       = 1 * time.Second
	DefaultWeight             = 100
	DefaultShiftBack          = 5 * time.Minute
	// MaxShiftBack bounds a return: an evacuated zone back within a day.
	MaxShiftBack = 24 * time.Hour
	// DefaultMaxUnavailable is the disruption budget of a service that
	// sets none: a quarter, rounded up, so that at least one instance of
	// any service may be drained (docs/decisions.md "Disruption budgets").
	DefaultMaxUnavailable Budget = "25%"

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
	if p.ShiftBack != nil && (*p.ShiftBack < 0 || p.ShiftBack.D() > MaxShiftBack) {
		return invalid("policy.shift_back", "%s is outside [0, %s]", *p.ShiftBack, Duration(MaxShiftBack))
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
	if err := p.MaxUnavailable.check(); err != nil {
		return invalid("policy.max_unavailable", "%v", err)
	}
	return nil
}

func checkLeaseTTL(field string, d Duration) error {
	if d.D() < MinLeaseTTL || d.D() > MaxLeaseTTL {
		return invalid(field, "%s is out of range %s-%s", d, MinLeaseTTL, MaxLeaseTTL)
	}
	return nil
}
