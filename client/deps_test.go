package client

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLean: a program that only calls cairn's API links none of the
// server: no raft, no bolt, no Prometheus, no gRPC. The client's types
// come from package wire; whatever else it imports must not bring these.
func TestLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %d packages: is it reading the right package?", len(deps))
	}
	for _, d := range deps {
		for _, banned := range []string{"github.com/hashicorp/raft", "go.etcd.io/bbolt", "github.com/boltdb/bolt",
			"github.com/prometheus/", "google.golang.org/grpc", "github.com/miekg/dns"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("client depends on %s", d)
			}
		}
		if strings.HasPrefix(d, "github.com/cairn-sd/cairn/") && d != "github.com/cairn-sd/cairn/client" &&
			d != "github.com/cairn-sd/cairn/wire" && d != "github.com/cairn-sd/cairn/internal/dnsname" && d != "github.com/cairn-sd/cairn/internal/backoff" &&
			d != "github.com/cairn-sd/cairn/status" {
			t.Errorf("client depends on %s; it may use only wire (with the label rule and status's vocabulary wire uses) and backoff", d)
		}
	}
}
