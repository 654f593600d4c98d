package status

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestImportsOnlyStandardLibrary holds the package to being a leaf
// (STYLE §3.1): the DNS and xDS servers both read it, and it must not
// bring the store, raft or either server's libraries into the other's
// dependency graph.
func TestImportsOnlyStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		if !p.Standard && p.ImportPath != "github.com/cairn-sd/cairn/status" {
			t.Errorf("status depends on %s; it may import only the standard library", p.ImportPath)
		}
	}
	if n < 3 {
		t.Fatalf("go list listed %d packages", n)
	}
}
