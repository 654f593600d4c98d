// Package result is what a scenario records and how it reports it: a
// table of figures beside their budgets, timelines, notes, the size it
// ran at and the commit it ran from, printed and written as JSON to
// CAIRN_SCENARIO_OUT for docs/scenarios/REPORT.md
// (integration/scenarios/report). Both the simulated region's
// experiments (integration/scenarios) and the store's faults
// (integration) record theirs here.
package result

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"text/tabwriter"
	"time"
)

// EnvOut names a directory each scenario writes its Result to, as
// <name>.json, for the report (go run ./integration/scenarios/report).
const EnvOut = "CAIRN_SCENARIO_OUT"

// Row is one figure of a scenario beside its budget.
type Row struct {
	Figure string `json:"figure"`
	Budget string `json:"budget"`
	Value  string `json:"value"`
	Pass   bool   `json:"pass"`
}

// Point is one sample of a timeline: seconds since the scenario's start,
// and a value. A NaN value (no data: an error rate with nothing sent) is
// written as null and read back as NaN; the report draws it as a gap.
type Point struct {
	T float64 `json:"t"`
	V float64 `json:"v"`
}

type jsonPoint struct {
	T float64  `json:"t"`
	V *float64 `json:"v"`
}

// MarshalJSON writes a NaN value as null (JSON has no NaN).
func (p Point) MarshalJSON() ([]byte, error) {
	j := jsonPoint{T: p.T}
	if !math.IsNaN(p.V) {
		j.V = &p.V
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads a null value as NaN.
func (p *Point) UnmarshalJSON(b []byte) error {
	var j jsonPoint
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	p.T, p.V = j.T, math.NaN()
	if j.V != nil {
		p.V = *j.V
	}
	return nil
}

// Series is one line of a timeline, as one population saw it.
type Series struct {
	Name   string  `json:"name"`
	Points []Point `json:"points"`
}

// Timeline is one chart of the report.
type Timeline struct {
	Title  string   `json:"title"`
	YLabel string   `json:"y_label"`
	Series []Series `json:"series"`
	// Marks are labelled instants (the fault, the heal), in seconds.
	Marks []Mark `json:"marks,omitempty"`
}

// Mark is a labelled instant of a timeline.
type Mark struct {
	T     float64 `json:"t"`
	Label string  `json:"label"`
}

// Result is what a scenario records: its table, its timelines, the size
// it ran at and the source it ran from.
type Result struct {
	Name  string `json:"name"`
	Title string `json:"title"`
	Size  string `json:"size"`
	// Commit is HEAD when the scenario ran ("" without git), and Dirty
	// whether the tree had changes then, outside docs/scenarios/ (where
	// the results and the report are written).
	Commit    string     `json:"commit,omitempty"`
	Dirty     bool       `json:"dirty,omitempty"`
	Started   time.Time  `json:"started"`
	Duration  float64    `json:"duration_s"`
	Rows      []Row      `json:"rows"`
	Timelines []Timeline `json:"timelines,omitempty"`
	Notes     []string   `json:"notes,omitempty"`
}

// New starts the record of a scenario named name (a file name: lower
// case, dashes) with a one-line title, run at size ("short", "full").
func New(name, title, size string) *Result {
	r := &Result{Name: name, Title: title, Size: size, Started: time.Now()}
	r.Commit, r.Dirty = gitState()
	return r
}

// gitState returns HEAD and whether the work tree has changes outside
// docs/scenarios/ (untracked files included), or "" when git or the
// repository is unavailable.
func gitState() (string, bool) {
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", false
	}
	dir := strings.TrimSpace(string(top))
	head, err := exec.Command("git", "-C", dir, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", false
	}
	st, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--", ".", ":(exclude)docs/scenarios").Output()
	return strings.TrimSpace(string(head)), err != nil || len(strings.TrimSpace(string(st))) > 0
}

// Add records a figure: its name, its budget and its value as the table
// shows them, and whether it is within the budget.
func (r *Result) Add(figure, budget, value string, pass bool) {
	r.Rows = append(r.Rows, Row{Figure: figure, Budget: budget, Value: value, Pass: pass})
}

// Note adds a line of context below the table.
func (r *Result) Note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// Table renders the rows as an aligned text table.
func (r *Result) Table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s (%s size)\n", r.Title, r.Size)
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "figure\tbudget\tvalue\tresult")
	for _, row := range r.Rows {
		verdict := "pass"
		if !row.Pass {
			verdict = "FAIL"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", row.Figure, row.Budget, row.Value, verdict)
	}
	w.Flush()
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  %s\n", n)
	}
	return b.String()
}

// Report ends a scenario: it prints the table (to stdout, so that it
// shows without -v too), writes the Result to EnvOut when that is set,
// and fails t for every row over its budget.
func (r *Result) Report(t testing.TB) {
	t.Helper()
	r.Duration = time.Since(r.Started).Seconds()
	fmt.Println(r.Table())
	if dir := os.Getenv(EnvOut); dir != "" {
		b, err := json.MarshalIndent(r, "", " ")
		if err == nil {
			err = os.MkdirAll(dir, 0o755)
		}
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, r.Name+".json"), b, 0o644)
		}
		if err != nil {
			t.Errorf("writing the result of %s: %v", r.Name, err)
		}
	}
	for _, row := range r.Rows {
		if !row.Pass {
			t.Errorf("%s: %s is %s; budget %s", r.Name, row.Figure, row.Value, row.Budget)
		}
	}
}
