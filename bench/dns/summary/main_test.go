package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// oldHeader is the header of the harness before p99.9 and the churn
// styles; newHeader has both (a subset of run.sh's columns: the summary
// finds columns by name).
const (
	oldHeader = "time\ttag\tround\tmode\tflip_pct\tserver\tversion\tqps\tforeign_pct\tp50_ms\tp99_ms\tlat_foreign_pct\tresp_bytes\tflip_change_pct\tstatus"
	newHeader = "time\ttag\tround\tmode\tflip_pct\tserver\tversion\tqps\tforeign_pct\tp50_ms\tp99_ms\tp999_ms\tmax_ms\tlat_foreign_pct\tresp_bytes\tflip_style\tflip_interval\tflip_change_pct\tflip_dns_a_min\tflip_dns_a_max\tflip_dns_off_pct\tstatus"
)

// TestReadsEveryHarnessVersion reads a file whose old rows lack the new
// columns and whose new rows follow an appended header: old flip rows are
// the first driver's (today), old latency rows have no p99.9, and every
// figure comes from its own column.
func TestReadsEveryHarnessVersion(t *testing.T) {
	lines := []string{
		oldHeader,
		"t1\tx\t1\tmain\t-\tcairn\tv1\t100000\t0\t0.1\t5\t0\t400\t-\tok",
		"t2\tx\t1\tflip\t0\tcairn\tv1\t90000\t0\t0.1\t2\t0\t231\t0.0\tok",
		"t3\tx\t1\tflip\t50\tcairn\tv1\t80000\t0\t0.1\t4\t0\t335\t40.0\tok",
		newHeader,
		"t4\tx\t2\tmain\t-\tcairn\tv2\t120000\t0\t0.1\t7\t9\t12\t0\t400\t-\t-\t-\t-\t-\t-\tok",
		"t5\tx\t2\tflip\t0\tcairn\tv2\t95000\t0\t0.1\t2\t3\t4\t0\t231\tsteady\t500ms\t0.0\t4\t4\t0.0\tok",
		"t6\tx\t2\tflip\t50\tcairn\tv2\t94000\t0\t0.1\t2.1\t3\t4\t0\t231\tsteady\t500ms\t49.5\t4\t4\t0.0\tok",
		"t7\tx\t2\tflip\t50\tcairn\tv2\t70000\t0\t0.1\t4\t5\t6\t0\t360\ttoday\t1s\t40.0\t3\t8\t60.0\tok",
	}
	rows := rowsOf(t, lines)
	s := summarize(rows, 25)

	cairn, ok := s.find("cairn")
	if !ok {
		t.Fatal("no cairn figures")
	}
	if cairn.qps != 110000 || cairn.p99 != 6 || cairn.p999 != 9 || cairn.pMax != 12 {
		t.Errorf("cairn: qps %g p99 %g p99.9 %g max %g; want 110000, 6, 9 (the new row's only), 12", cairn.qps, cairn.p99, cairn.p999, cairn.pMax)
	}

	type key struct{ style, pct string }
	got := map[key]figures{}
	for _, f := range s.flips {
		got[key{f.style, f.name}] = f
	}
	if len(got) != 4 {
		t.Fatalf("flip groups %v, want today 0 and 50, steady 0 and 50", got)
	}
	today := got[key{"today", "50"}]
	if today.runs != 2 || today.qps != 75000 || today.dnsMin != 3 || today.dnsMax != 8 {
		t.Errorf("today 50%%: %d runs, qps %g, A records %g-%g; want 2, 75000, 3-8", today.runs, today.qps, today.dnsMin, today.dnsMax)
	}
	if f := got[key{"today", "0"}]; !math.IsNaN(f.p999) || !math.IsNaN(f.dnsMin) {
		t.Errorf("today 0%% (old rows only): p99.9 %g, A records min %g; want both missing", f.p999, f.dnsMin)
	}
	if f := got[key{"steady", "50"}]; f.flipInterval != "500ms" || f.flipChange != 49.5 {
		t.Errorf("steady 50%%: interval %q, changes %g; want 500ms, 49.5", f.flipInterval, f.flipChange)
	}
	if s.flips[0].style != "steady" {
		t.Errorf("first churn table is %q, want steady", s.flips[0].style)
	}

	var out bytes.Buffer
	s.write(&out)
	for _, want := range []string{"steady-eligible health churn", "the driver as first written", "| 50% | 1 | 94,000", "3-8 (60.0%)", "Answer sizes did not hold still at 50%"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
}

// TestProtectionCost: with cairn and cairn-rrl rows, the summary sets
// them side by side with the ratios; without cairn-rrl it does not.
func TestProtectionCost(t *testing.T) {
	lines := []string{
		newHeader,
		"t1\tx\t1\tmain\t-\tcairn\tv2\t200000\t0\t0.1\t0.4\t0.8\t2\t0\t300\t-\t-\t-\t-\t-\t-\tok",
		"t2\tx\t1\tmain\t-\tcairn-rrl\tv2\t180000\t0\t0.1\t0.5\t0.9\t2\t0\t328\t-\t-\t-\t-\t-\t-\tok",
		"t3\tx\t1\tmain\t-\tknot\tk\t400000\t0\t0.05\t0.2\t0.3\t1\t0\t300\t-\t-\t-\t-\t-\t-\tok",
	}
	rows := rowsOf(t, lines)
	var out bytes.Buffer
	summarize(rows, 25).write(&out)
	for _, want := range []string{
		"| cairn, RRL+cookies | 1 | 180,000 (180,000-180,000)",
		"| | cairn | cairn, RRL+cookies | ratio |",
		"| QPS median | 200,000 | 180,000 | 0.900 |",
		"| p99 at fixed rate, ms | 0.400 | 0.500 | 1.250 |",
		"| avg response, B | 300 | 328 | 1.093 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the summary lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	summarize(rows[:1], 25).write(&out)
	if strings.Contains(out.String(), "RRL+cookies") {
		t.Errorf("a cost table without cairn-rrl rows:\n%s", out.String())
	}
}

// rowsOf writes lines as a results file and reads it back.
func rowsOf(t *testing.T, lines []string) []row {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dns-x.tsv")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rows, err := readTSV(path)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestRollout: MODE=rollout rows are grouped by server and phase, apart
// from the main table, and the ratios are to cairn's steady p99 and
// Knot's.
func TestRollout(t *testing.T) {
	h := "time\ttag\tround\tmode\tflip_pct\tserver\tversion\tqps\tforeign_pct\tp50_ms\tp99_ms\tp999_ms\tmax_ms\tlat_foreign_pct\tserver_busy_pct\tphase\tstatus"
	lines := []string{h,
		"t1\tr\t1\trollout\t-\tcairn\tv\t-\t1\t0.07\t0.40\t1\t2\t1\t30\trollout\tok",
		"t2\tr\t1\trollout\t-\tcairn\tv\t-\t1\t0.06\t0.20\t0.5\t1\t1\t30\tsteady\tok",
		"t3\tr\t1\trollout\t-\tknot\tv\t-\t1\t0.05\t0.25\t0.4\t1\t1\t20\tsteady\tok",
		"t4\tr\t2\trollout\t-\tcairn\tv\t-\t1\t0.07\t0.60\t1\t2\t1\t30\trollout\tok",
		"t5\tr\t2\trollout\t-\tcairn\tv\t-\t1\t0.06\t0.20\t0.5\t1\t1\t30\tsteady\tok",
	}
	s := summarize(rowsOf(t, lines), 25)
	if len(s.servers) != 0 || len(s.rollouts) != 3 {
		t.Fatalf("%d main groups, %d rollout groups; want 0 and 3", len(s.servers), len(s.rollouts))
	}
	if f := s.rollouts[0]; f.name != "cairn/rollout" || f.p99 != 0.5 || f.latRuns != 2 {
		t.Errorf("first group %s: p99 %g over %d runs; want cairn/rollout, 0.5 over 2", f.name, f.p99, f.latRuns)
	}
	var b bytes.Buffer
	s.write(&b)
	if out := b.String(); !strings.Contains(out, "| 0.500 (0.400-0.600) |") || !strings.Contains(out, "| 2.50 | 2.00 |") {
		t.Errorf("the rollout table lacks cairn's rollout p99 and its ratios 2.50 (to steady) and 2.00 (to Knot):\n%s", out)
	}
}
