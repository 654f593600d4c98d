package cmd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCLIDisruptionBudget: drain past the budget exits 1 with the
// server's 429 naming the budget; endpoints shows the budget in use;
// --force goes through and events show the override.
func TestCLIDisruptionBudget(t *testing.T) {
	url := testServer(t)
	def := filepath.Join(t.TempDir(), "svc.yaml")
	if err := os.WriteFile(def, []byte("namespace: shop\nname: pay\nports: [{name: http, number: 8080}]\npolicy: {drain_window: 1h, max_unavailable: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := run(t, "--addr", url, "apply", "-f", def); code != 0 {
		t.Fatalf("apply: %d %q %q", code, out, errs)
	}
	for i, id := range []string{"p-1", "p-2"} {
		addr := []string{"10.0.0.1", "10.0.0.2"}[i]
		if code, out, errs := run(t, "--addr", url, "register", "--instance", id, "--address", addr, "--port", "http=8080", "shop/pay"); code != 0 {
			t.Fatalf("register %s: %d %q %q", id, code, out, errs)
		}
	}
	drain := func(id, inc string, more ...string) (int, string, string) {
		return run(t, append(append([]string{"--addr", url, "drain", "--instance", id, "--incarnation", inc}, more...), "shop/pay")...)
	}
	if code, out, errs := drain("p-1", "1"); code != 0 {
		t.Fatalf("drain p-1: %d %q %q", code, out, errs)
	}
	code, out, errs := drain("p-2", "2")
	if code != exitError || out != "" || !strings.Contains(errs, "drain of shop/pay/p-2 refused: disruption budget max_unavailable 1 of 2 instances is used by p-1 (draining); --force overrides") ||
		!strings.Contains(errs, "429 disruption_budget") {
		t.Fatalf("drain past the budget: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	code, out, errs = run(t, "--addr", url, "endpoints", "shop/pay")
	if code != 0 || !strings.Contains(out, "disruption budget: max_unavailable 1 of 2 instances, 1 in use: p-1 (draining)\n") {
		t.Fatalf("endpoints: %d %q %q", code, out, errs)
	}
	if code, out, errs := drain("p-2", "2", "--force"); code != 0 || !strings.Contains(out, "lifecycle: draining") {
		t.Fatalf("drain --force: %d %q %q", code, out, errs)
	}
	code, out, errs = run(t, "--addr", url, "events", "shop/pay")
	if code != 0 || !strings.Contains(out, "budget_overridden") || !strings.Contains(out, "forced past disruption budget") {
		t.Fatalf("events: %d %q %q", code, out, errs)
	}
}
