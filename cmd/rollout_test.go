package cmd

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cairn-sd/cairn/wire"
)

// TestCLIRollout: register --ramp records the ramp, and rollout status
// shows it in a table and as JSON; a bad --ramp is a usage error naming
// the flag and the rule.
func TestCLIRollout(t *testing.T) {
	url := testServer(t)
	def := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(def, []byte("namespace: shop\nname: cart\nports: [{name: http, number: 8080}]\npolicy: {slow_start: 2s}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, "--addr", url, "apply", "-f", def); code != 0 {
		t.Fatalf("apply: %d %q %q", code, out, errs)
	}
	reg := []string{"--addr", url, "-o", "json", "register", "--instance", "i-1", "--address", "10.0.0.1", "--port", "http=8080", "--ramp", "20s", "shop/cart"}
	code, out, errs := run(t, reg...)
	var in wire.Registered
	if code != 0 || json.Unmarshal([]byte(out), &in) != nil || in.Ramp.String() != "20s" {
		t.Fatalf("register --ramp 20s: %d %q %q", code, out, errs)
	}
	code, out, errs = run(t, "--addr", url, "-o", "json", "rollout", "status", "shop/cart")
	var ro wire.Rollout
	if code != 0 || json.Unmarshal([]byte(out), &ro) != nil || ro.Summary.Latest != 1 || len(ro.Instances) != 1 ||
		ro.Instances[0].SlowStart.String() != "20s" || !ro.Instances[0].Latest {
		t.Fatalf("rollout status json: %d %q %q", code, out, errs)
	}
	code, out, errs = run(t, "--addr", url, "rollout", "status", "shop/cart")
	if code != 0 || !strings.Contains(out, "PHASE") || !strings.Contains(out, "i-1") || !strings.Contains(out, "20s") ||
		!strings.Contains(out, "1 of 1 instances") {
		t.Fatalf("rollout status: %d %q %q", code, out, errs)
	}
	for ramp, rule := range map[string]string{"-5s": "--ramp: -5s is negative", "2h": "--ramp: 2h0m0s is longer than the 1h0m0s", "1500ms": "--ramp: 1.5s is not a whole number of seconds"} {
		code, _, errs := run(t, "--addr", url, "register", "--instance", "i-2", "--address", "10.0.0.2", "--port", "http=8080", "--ramp", ramp, "shop/cart")
		if code != exitUsage || !strings.Contains(errs, rule) {
			t.Errorf("--ramp %s: exit %d, stderr %q; want exit %d and %q", ramp, code, errs, exitUsage, rule)
		}
	}
	if code, _, errs := run(t, "--addr", url, "rollout", "status"); code != exitUsage || !strings.Contains(errs, "NS/SVC") {
		t.Errorf("rollout status without NS/SVC: exit %d, stderr %q", code, errs)
	}
}
