package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Budget is a service's disruption budget, policy.max_unavailable: how
// many of its instances may be unavailable at once before a voluntary
// disruption (a drain, the deregistration of an available instance) is
// refused. It is a count ("2") or a percentage of the service's
// instances that are not terminated ("25%", rounded up), kept as that
// text; "" is unset, which means DefaultMaxUnavailable. JSON writes a
// count as a number and a percentage as a string and reads either, YAML
// likewise; Service.Validate checks the text.
type Budget string

// maxBudgetCount bounds a count, so that no arithmetic on it overflows.
const maxBudgetCount = 1_000_000

// OrDefault returns b, or DefaultMaxUnavailable when b is unset.
func (b Budget) OrDefault() Budget {
	if b == "" {
		return DefaultMaxUnavailable
	}
	return b
}

// parse returns the count or the percentage b holds.
func (b Budget) parse() (n int, percent bool, err error) {
	s, percent := strings.CutSuffix(string(b), "%")
	bad := fmt.Errorf("%q must be a count of instances such as 2 (0-%d) or a percentage such as \"25%%\" (0%%-100%%)", string(b), maxBudgetCount)
	if s == "" || strings.Trim(s, "0123456789") != "" || len(s) > 7 {
		return 0, false, bad
	}
	n, _ = strconv.Atoi(s) // digits only, at most 7 of them
	if percent && n > 100 || n > maxBudgetCount {
		return 0, false, bad
	}
	return n, percent, nil
}

// Limit is how many of base instances may be unavailable at once under
// b (unset: the default): the count, or the percentage of base rounded
// up. An invalid b (never stored: Validate refuses it) allows none.
func (b Budget) Limit(base int) int {
	n, percent, err := b.OrDefault().parse()
	switch {
	case err != nil:
		return 0
	case percent:
		return (n*base + 99) / 100
	}
	return n
}

// String is the budget as written ("2", "25%"); unset, the default's.
func (b Budget) String() string { return string(b.OrDefault()) }

// MarshalJSON writes a count as a number and anything else as a string.
func (b Budget) MarshalJSON() ([]byte, error) {
	if n, percent, err := b.parse(); err == nil && !percent {
		return strconv.AppendInt(nil, int64(n), 10), nil
	}
	return json.Marshal(string(b))
}

// UnmarshalJSON reads a number or a string as the budget's text; null
// leaves it unset. Validate judges the text, so that the error names the
// field and the rule.
func (b *Budget) UnmarshalJSON(data []byte) error {
	data = bytes.TrimSpace(data)
	switch {
	case string(data) == "null":
		return nil
	case len(data) > 0 && data[0] == '"':
		var s string
		if err := json.Unmarshal(data, &s); err != nil {
			return err
		}
		*b = Budget(s)
		return nil
	case len(data) > 0 && (data[0] == '-' || data[0] >= '0' && data[0] <= '9'):
		*b = Budget(data)
		return nil
	}
	return &json.UnmarshalTypeError{Value: string(data), Type: reflect.TypeFor[Budget]()}
}

// MarshalYAML writes a count as a number and anything else as a string.
func (b Budget) MarshalYAML() (any, error) {
	if n, percent, err := b.parse(); err == nil && !percent {
		return n, nil
	}
	return string(b), nil
}

// UnmarshalYAML reads a scalar as the budget's text (null: unset).
func (b *Budget) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: max_unavailable wants a count such as 2 or a percentage such as \"25%%\"", n.Line)
	}
	if n.Tag == "!!null" {
		return nil
	}
	*b = Budget(n.Value)
	return nil
}

// check returns the rule b breaks, if any; unset is the default.
func (b Budget) check() error {
	if b == "" {
		return nil
	}
	_, _, err := b.parse()
	return err
}

// DisruptionBudget is a service's disruption budget as it stands, in
// GET /v1/services/{ns}/{svc}: what the next voluntary disruption is
// judged against.
type DisruptionBudget struct {
	// MaxUnavailable is the policy's max_unavailable, or the default when
	// the definition sets none (Default).
	MaxUnavailable Budget `json:"max_unavailable"`
	Default        bool   `json:"default,omitempty"`
	// Instances is the base of a percentage: the service's instances
	// that are not terminated.
	Instances int `json:"instances"`
	// Limit is how many of them may be unavailable at once.
	Limit int `json:"limit"`
	// InUse is how many are, len(Unavailable).
	InUse int `json:"in_use"`
	// Unavailable lists them by instance id, each with why.
	Unavailable []Unavailable `json:"unavailable"`
}

// Unavailable is one instance that holds part of a disruption budget.
type Unavailable struct {
	InstanceID  string `json:"instance_id"`
	Incarnation uint64 `json:"incarnation"`
	// Why is its lifecycle (starting, draining) or, for a ready instance
	// withdrawn on evidence, its committed verdict (unhealthy,
	// quarantined, …).
	Why string `json:"why"`
}

// Holders names what holds the budget, for a message: "i1 (draining),
// i2 (unhealthy)", at most five of them and a count of the rest.
func (d DisruptionBudget) Holders() string {
	if len(d.Unavailable) == 0 {
		return "no instance"
	}
	var parts []string
	for i, u := range d.Unavailable {
		if i == 5 {
			parts = append(parts, fmt.Sprintf("%d more", len(d.Unavailable)-i))
			break
		}
		parts = append(parts, u.InstanceID+" ("+u.Why+")")
	}
	return strings.Join(parts, ", ")
}

// Describe is the budget in words: "max_unavailable 2 of 10 instances"
// or "max_unavailable 25% (3 of 12 instances)".
func (d DisruptionBudget) Describe() string {
	s := "max_unavailable " + d.MaxUnavailable.String()
	if d.Default {
		s += " (the default)"
	}
	if strings.HasSuffix(string(d.MaxUnavailable.OrDefault()), "%") {
		return fmt.Sprintf("%s = %d of %d instances", s, d.Limit, d.Instances)
	}
	return fmt.Sprintf("%s of %d instances", s, d.Instances)
}
