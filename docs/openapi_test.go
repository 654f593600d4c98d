package docs

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestOpenAPIJSON checks that the document converts, says it is
// OpenAPI 3.1, and that every $ref in it names something it holds.
func TestOpenAPIJSON(t *testing.T) {
	b, err := OpenAPIJSON()
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	if v, _ := doc["openapi"].(string); !strings.HasPrefix(v, "3.1.") {
		t.Errorf("openapi = %q, want 3.1.x", v)
	}
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if _, err := resolve(doc, ref); err != nil {
					t.Errorf("%s: $ref %q: %v", path, ref, err)
				}
			}
			for k, c := range v {
				walk(path+"/"+k, c)
			}
		case []any:
			for _, c := range v {
				walk(path+"/[]", c)
			}
		}
	}
	walk("", doc)
}

// resolve follows a local JSON pointer ("#/components/schemas/Error").
func resolve(doc map[string]any, ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, errNotLocal
	}
	var cur any = doc
	for _, part := range strings.Split(ref[2:], "/") {
		part = strings.NewReplacer("~1", "/", "~0", "~").Replace(part)
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, errMissing
		}
		if cur, ok = m[part]; !ok {
			return nil, errMissing
		}
	}
	return cur, nil
}

type refError string

func (e refError) Error() string { return string(e) }

const (
	errNotLocal = refError("not a local reference")
	errMissing  = refError("names nothing in the document")
)

// TestOpenAPIYAMLIsACopy checks that a caller cannot change the
// embedded document.
func TestOpenAPIYAMLIsACopy(t *testing.T) {
	a := OpenAPIYAML()
	a[0] = 'X'
	if OpenAPIYAML()[0] == 'X' {
		t.Fatal("OpenAPIYAML returned the embedded bytes themselves")
	}
}
