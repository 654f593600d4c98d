package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"

	"go.yaml.in/yaml/v3"
)

// ParseServices reads service definitions: YAML (JSON is YAML too), one
// service per document, documents separated by "---". Unknown keys are
// refused with their line. Defaults are not applied here.
func ParseServices(r io.Reader) ([]Service, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("reading service definitions: %w", err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	var out []Service
	for i := 1; ; i++ {
		var s Service
		err := dec.Decode(&s)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, &FieldError{Field: "yaml", Rule: err.Error()})
		}
		if reflect.DeepEqual(s, Service{}) {
			continue // an empty document, such as a trailing "---"
		}
		out = append(out, s)
	}
	if len(out) == 0 {
		return nil, invalid("body", "no service definition found")
	}
	return out, nil
}
