package main

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cairn-sd/cairn/integration/scenarios"
	"github.com/cairn-sd/cairn/internal/pngplot"
)

func sample() scenarios.Result {
	return scenarios.Result{
		Name: "replica-fault", Title: "One replica failed hard, one slow", Size: "short",
		Started: time.Date(2026, 12, 5, 16, 0, 0, 0, time.UTC), Duration: 42,
		Rows: []scenarios.Row{
			{Figure: "dns-direct: fault → 99% stop", Budget: "≤ 10s", Value: "2.0s", Pass: true},
			{Figure: "envoy | slow: fault → 99% stop", Budget: "≤ 10s", Value: "not converged", Pass: false},
		},
		Notes: []string{"the slow replica is caught by timeouts (issue 32)"},
		Timelines: []scenarios.Timeline{
			{Title: "caller error rate", YLabel: "error rate", Series: []scenarios.Series{
				{Name: "dns-direct", Points: []scenarios.Point{{T: 0, V: 0}, {T: 1, V: 0.3}, {T: 2, V: 0.05}, {T: 3, V: 0}}},
				{Name: "grpc-xds", Points: []scenarios.Point{{T: 0, V: 0}, {T: 1, V: math.NaN()}, {T: 2, V: 0.01}}},
			}, Marks: []scenarios.Mark{{T: 1.1, Label: "fault"}, {T: 30, Label: "heal"}}},
			{Title: "empty", YLabel: "share"},
		},
	}
}

// writeResult writes r as the scenarios do (Result.Report).
func writeResult(t *testing.T, dir string, r scenarios.Result) {
	t.Helper()
	b, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, r.Name+".json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGenerate(t *testing.T) {
	in, out := t.TempDir(), filepath.Join(t.TempDir(), "scenarios")
	r := sample()
	r.Commit = "aaaa1111"
	writeResult(t, in, r)
	other := scenarios.Result{Name: "control-plane-off", Title: "Control plane off", Size: "full", Commit: "bbbb2222", Dirty: true,
		Rows: []scenarios.Row{{Figure: "caller error rate", Budget: "unchanged", Value: "0.0%", Pass: true}}}
	writeResult(t, in, other)
	// A scenario that got nowhere, its title and note spanning lines.
	writeResult(t, in, scenarios.Result{Name: "zz-empty", Title: "Never\nmeasured", Size: "short", Commit: "aaaa1111",
		Notes: []string{"first line\n## not a heading"}})
	// A PNG of an earlier report, of a timeline gone since, and one the
	// generator did not write.
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"replica-fault-3.png", "logo.png"} {
		if err := os.WriteFile(filepath.Join(out, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m := machine{CPU: "Test CPU @ 2.0GHz", CPUs: 2, MemGiB: 7.6, Kernel: "6.1.0", GoVer: "go1.25.0", GoArch: "linux/amd64"}
	if err := generate(in, out, commit{Hash: "0123abcd", Dirty: true}, m); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(out, "REPORT.md"))
	if err != nil {
		t.Fatal(err)
	}
	rep := string(b)
	for _, want := range []string{
		"`0123abcd` (**dirty tree**", "Test CPU @ 2.0GHz, 2 CPUs, 7.6 GiB memory, Linux 6.1.0, go1.25.0 linux/amd64",
		"figures: 3, 2 over budget (1 of them a scenario that recorded none)",
		"**Results from mixed commits**: `bbbb2222` (**dirty tree**) (1), `aaaa1111` (2)",
		"`control-plane-off`, full size, `bbbb2222` (**dirty tree**), started",
		"`replica-fault`, short size, `aaaa1111`, started",
		"## Never measured\n", "- first line ## not a heading\n",
		"| [Never measured](#scenario-zz-empty) | short | 0 | **FAIL** (0) |",
		"| dns-direct: fault → 99% stop | ≤ 10s | 2.0s | pass |",
		`| envoy \| slow: fault → 99% stop | ≤ 10s | not converged | **FAIL** |`,
		"| caller error rate | unchanged | 0.0% | pass |",
		"- the slow replica is caught by timeouts (issue 32)",
		"![caller error rate](replica-fault-1.png)", "![empty](replica-fault-2.png)",
		"| [One replica failed hard, one slow](#scenario-replica-fault) | short | 2 | **FAIL** (1) |",
	} {
		if !strings.Contains(rep, want) {
			t.Errorf("REPORT.md lacks %q:\n%s", want, rep)
		}
	}
	if strings.Index(rep, "## Control plane off") > strings.Index(rep, "## One replica") {
		t.Error("scenarios are not in name order")
	}
	if _, err := os.Stat(filepath.Join(out, "replica-fault-3.png")); !os.IsNotExist(err) {
		t.Errorf("a stale PNG of the report's own was left: %v", err)
	}
	if _, err := os.Stat(filepath.Join(out, "logo.png")); err != nil {
		t.Errorf("a PNG the report did not write was removed: %v", err)
	}
	for _, name := range []string{"replica-fault-1.png", "replica-fault-2.png"} {
		f, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(bytes.NewReader(f))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if b := img.Bounds(); b.Dx() != plotW || b.Dy() != plotH {
			t.Errorf("%s is %v, want %dx%d", name, b, plotW, plotH)
		}
	}
}

// TestPlotTimeline: each series is drawn in its colour inside the plot
// area, and a NaN point (no data) leaves a gap: no line joins the points
// on either side of it.
func TestPlotTimeline(t *testing.T) {
	c := plotTimeline(sample().Timelines[0])
	for i := range 2 {
		found := false
		for y := areaTop; y < areaBottom && !found; y++ {
			for x := areaLeft + 1; x < areaRight && !found; x++ {
				if c.RGBAAt(x, y) == pngplot.Palette(i) {
					found = true
				}
			}
		}
		if !found {
			t.Errorf("series %d not drawn", i)
		}
	}
	if c.RGBAAt(areaLeft+1, areaTop+1) == pngplot.Palette(0) {
		t.Error("drawn outside the data")
	}

	// A flat line at 1 from 0 to 4 s, with no data at 2 s: x and y
	// both run from 0 to a round 4 and 1, as plotTimeline scales them.
	ax := pngplot.Axes{Area: image.Rect(areaLeft, areaTop, areaRight, areaBottom), XMin: 0, XMax: 4, YMin: 0, YMax: 1}
	drawnAt := func(ps []scenarios.Point, v float64) bool {
		c := plotTimeline(scenarios.Timeline{Title: "gap", Series: []scenarios.Series{{Name: "s", Points: ps}}})
		x, y := ax.X(v), ax.Y(1)
		for dy := -1; dy <= 2; dy++ {
			if c.RGBAAt(x, y+dy) == pngplot.Palette(0) {
				return true
			}
		}
		return false
	}
	whole := []scenarios.Point{{T: 0, V: 1}, {T: 1, V: 1}, {T: 2, V: 1}, {T: 3, V: 1}, {T: 4, V: 1}}
	if !drawnAt(whole, 2) || !drawnAt(whole, 1.5) {
		t.Fatal("a series without gaps is not drawn through 1.5 and 2 s: the test does not find the line")
	}
	gap := []scenarios.Point{{T: 0, V: 1}, {T: 1, V: 1}, {T: 2, V: math.NaN()}, {T: 3, V: 1}, {T: 4, V: 1}}
	for _, at := range []float64{1.5, 2, 2.5} {
		if drawnAt(gap, at) {
			t.Errorf("a line drawn at %v s, across the NaN at 2 s", at)
		}
	}
	if !drawnAt(gap, 0.5) || !drawnAt(gap, 3.5) {
		t.Error("the segments beside the gap are not drawn")
	}
}

func TestReadResultsErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := readResults(dir); err == nil || !strings.Contains(err.Error(), "no <name>.json") {
		t.Errorf("an empty directory: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{"name": "Bad Name"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readResults(dir); err == nil || !strings.Contains(err.Error(), `name "Bad Name"`) {
		t.Errorf("a bad name: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bad.json"), []byte(`{`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readResults(dir); err == nil || !strings.Contains(err.Error(), "bad.json") {
		t.Errorf("bad JSON: %v", err)
	}
}

func TestMachineParsing(t *testing.T) {
	cpu := "processor\t: 0\nmodel name\t: Some  CPU @ 3GHz\n\nprocessor\t: 1\nmodel name\t: Some  CPU @ 3GHz\n"
	if model, n := parseCPUInfo([]byte(cpu), 9); model != "Some CPU @ 3GHz" || n != 2 {
		t.Errorf("cpuinfo: %q %d", model, n)
	}
	if got := parseMemTotal([]byte("MemTotal:        8048576 kB\nMemFree: 1 kB\n")); math.Abs(got-7.676) > 0.01 {
		t.Errorf("meminfo: %v GiB", got)
	}
}
