// Package docs embeds the documents a cairn server serves: the OpenAPI
// description of its HTTP API (openapi.yaml, beside the prose of
// api.md), which the API answers GET /v1/openapi.json with.
package docs

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"

	"go.yaml.in/yaml/v3"
)

//go:embed openapi.yaml
var openapiYAML []byte

// OpenAPIYAML returns docs/openapi.yaml as written; a copy, so callers
// may keep it.
func OpenAPIYAML() []byte { return bytes.Clone(openapiYAML) }

// OpenAPIJSON returns the OpenAPI document as JSON, its keys in the
// order the YAML has them and its anchors expanded. An error means the
// embedded YAML is broken: a build that should not have passed its tests.
func OpenAPIJSON() ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(openapiYAML, &root); err != nil {
		return nil, fmt.Errorf("docs: openapi.yaml: %w", err)
	}
	var b bytes.Buffer
	if err := writeJSON(&b, &root); err != nil {
		return nil, fmt.Errorf("docs: openapi.yaml: %w", err)
	}
	return b.Bytes(), nil
}

// writeJSON writes n as JSON: mappings as objects in document order
// (keys as written, so "200" stays a string), sequences as arrays,
// scalars by their resolved YAML type.
func writeJSON(b *bytes.Buffer, n *yaml.Node) error {
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) != 1 {
			return fmt.Errorf("line %d: want one document", n.Line)
		}
		return writeJSON(b, n.Content[0])
	case yaml.AliasNode:
		return writeJSON(b, n.Alias)
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode || k.Tag == "!!merge" {
				return fmt.Errorf("line %d: a key must be a plain scalar", k.Line)
			}
			if i > 0 {
				b.WriteByte(',')
			}
			key, _ := json.Marshal(k.Value)
			b.Write(key)
			b.WriteByte(':')
			if err := writeJSON(b, n.Content[i+1]); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	case yaml.SequenceNode:
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := writeJSON(b, c); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case yaml.ScalarNode:
		var v any
		if err := n.Decode(&v); err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		j, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		b.Write(j)
		return nil
	}
	return fmt.Errorf("line %d: unexpected YAML node kind %d", n.Line, n.Kind)
}
