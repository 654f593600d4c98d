package zones

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies holds zones to being a leaf (STYLE §3.1): it may use
// the standard library, miekg/dns and cairn's leaf dnsname (the label
// rule), and no other package of cairn, so that the DNS server can depend
// on it without pulling in the store.
func TestDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-json", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	sawDNS := false
	for dec.More() {
		var p struct {
			ImportPath string
			Standard   bool
			Module     *struct{ Path string }
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		switch {
		case p.ImportPath == "testing":
			t.Errorf("zones imports testing in production code")
		case p.Standard || p.ImportPath == "github.com/cairn-sd/cairn/zones" || p.ImportPath == "github.com/cairn-sd/cairn/internal/dnsname":
		case p.Module != nil && p.Module.Path == "github.com/cairn-sd/cairn":
			t.Errorf("zones depends on %s; it may import no other cairn package", p.ImportPath)
		case p.ImportPath == "github.com/miekg/dns":
			sawDNS = true
		}
	}
	if !sawDNS {
		t.Error("go list did not list github.com/miekg/dns; is the test reading the right package?")
	}
}
