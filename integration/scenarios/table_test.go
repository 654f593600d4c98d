package scenarios

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestResultReport: the table names every row with its verdict, and the
// result written for the report reads back with its rows.
func TestResultReport(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvOut, dir)
	t.Setenv(EnvSize, "") // the short size, whatever this run's
	r := NewResult("example", "An example")
	r.Add("withdrawal p99", "< 5 s", "1.2 s", true)
	r.Note("one run")
	tab := r.Table()
	for _, want := range []string{"An example (short size)", "withdrawal p99", "< 5 s", "1.2 s", "pass", "one run"} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	r.Report(t)
	b, err := os.ReadFile(filepath.Join(dir, "example.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got Result
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Rows) != 1 || got.Rows[0].Value != "1.2 s" || !got.Rows[0].Pass {
		t.Errorf("result read back: %+v", got)
	}
	// Run from a git checkout, the result names its commit.
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil && got.Commit != strings.TrimSpace(string(head)) {
		t.Errorf("commit %q, want HEAD %s", got.Commit, head)
	}
}

// TestPointNaN: a point with no data (NaN) goes through JSON as null and
// comes back NaN.
func TestPointNaN(t *testing.T) {
	b, err := json.Marshal([]Point{{T: 1, V: math.NaN()}, {T: 2, V: 0.5}})
	if err != nil {
		t.Fatal(err)
	}
	if string(b) != `[{"t":1,"v":null},{"t":2,"v":0.5}]` {
		t.Errorf("JSON %s", b)
	}
	var ps []Point
	if err := json.Unmarshal(b, &ps); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || !math.IsNaN(ps[0].V) || ps[1].V != 0.5 {
		t.Errorf("read back %+v", ps)
	}
}
