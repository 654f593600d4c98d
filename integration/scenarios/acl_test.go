package scenarios

import (
	"strings"
	"testing"
)

// The region's ACL file: the admin token and one distinct reader of the
// region's namespace per caller; a negative Config.Callers is refused,
// naming the field.
func TestRegionACL(t *testing.T) {
	y := aclYAML(3)
	if !strings.Contains(y, "{secret: "+AdminToken+", scope: admin}") {
		t.Errorf("no admin token in\n%s", y)
	}
	r := &Region{Config: Config{Callers: 3}}
	seen := map[string]bool{}
	for i := range 3 {
		tok := r.CallerToken(i)
		if seen[tok] || !strings.Contains(y, "{secret: "+tok+", scope: reader, namespaces: ["+Namespace+"]}") {
			t.Errorf("caller token %d (%s) repeated or not a reader of %s in\n%s", i, tok, Namespace, y)
		}
		seen[tok] = true
	}
	cfg := ShortConfig()
	cfg.Callers = -1
	if _, err := NewRegion(cfg); err == nil || !strings.Contains(err.Error(), "Config.Callers") {
		t.Errorf("NewRegion with Callers -1: %v, want an error naming Config.Callers", err)
	}
}
