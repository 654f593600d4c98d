package wire

import (
	"encoding/json"
	"fmt"
	"reflect"
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
