// Command report writes docs/scenarios/REPORT.md from the results the
// scenarios recorded (integration/scenarios, CAIRN_SCENARIO_OUT): the
// commit each ran from (results from mixed commits flagged), the machine,
// each scenario's table and notes, and a PNG per timeline, drawn with
// internal/pngplot.
//
//	go run ./integration/scenarios/report -in docs/scenarios/results -out docs/scenarios
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/cairn-sd/cairn/integration/scenarios"
)

func main() {
	in := flag.String("in", "docs/scenarios/results", "directory of the scenarios' <name>.json results")
	out := flag.String("out", "docs/scenarios", "directory REPORT.md and the timelines' PNGs are written to")
	flag.Parse()
	if err := generate(*in, *out, gitCommit(), readMachine()); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// validName is what a result's name must be: it names files.
var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)

// readResults reads every <name>.json of dir, sorted by name.
func readResults(dir string) ([]scenarios.Result, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("-in %s: no <name>.json results", dir)
	}
	var out []scenarios.Result
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var r scenarios.Result
		if err := json.Unmarshal(b, &r); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if r.Name == "" {
			r.Name = strings.TrimSuffix(filepath.Base(f), ".json")
		}
		if !validName.MatchString(r.Name) {
			return nil, fmt.Errorf("%s: name %q must be lower case letters, digits and dashes (it names the PNGs)", f, r.Name)
		}
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b scenarios.Result) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// generate writes REPORT.md and the PNGs to outDir from the results in
// inDir.
func generate(inDir, outDir string, c commit, m machine) error {
	rs, err := readResults(inDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return err
	}
	if err := removeStalePNGs(outDir); err != nil {
		return err
	}
	var b strings.Builder
	writeHeader(&b, inDir, c, m, rs)
	for _, r := range rs {
		var pngs []string
		for i, tl := range r.Timelines {
			name := fmt.Sprintf("%s-%d.png", r.Name, i+1)
			img, err := plotTimeline(tl).PNG()
			if err != nil {
				return fmt.Errorf("%s: timeline %d: %w", r.Name, i+1, err)
			}
			if err := os.WriteFile(filepath.Join(outDir, name), img, 0o644); err != nil {
				return err
			}
			pngs = append(pngs, name)
		}
		writeScenario(&b, r, pngs)
	}
	return os.WriteFile(filepath.Join(outDir, "REPORT.md"), []byte(b.String()), 0o644)
}

// ownPNG is the name of a PNG the generator writes: <name>-<n>.png.
var ownPNG = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}-[0-9]+\.png$`)

// removeStalePNGs removes the PNGs of an earlier report from dir, so
// that a timeline or a scenario gone since leaves none behind.
func removeStalePNGs(dir string) error {
	es, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.Type().IsRegular() && ownPNG.MatchString(e.Name()) {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// sourceOf says which commit a result ran from.
func sourceOf(r scenarios.Result) string {
	switch {
	case r.Commit == "":
		return "unknown commit"
	case r.Dirty:
		return "`" + r.Commit + "` (**dirty tree**)"
	}
	return "`" + r.Commit + "`"
}

func writeHeader(b *strings.Builder, inDir string, c commit, m machine, rs []scenarios.Result) {
	rows, failed, empty := 0, 0, 0
	sources := map[string]int{}
	var order []string
	for _, r := range rs {
		if len(r.Rows) == 0 {
			empty++
		}
		for _, row := range r.Rows {
			rows++
			if !row.Pass {
				failed++
			}
		}
		src := sourceOf(r)
		if sources[src] == 0 {
			order = append(order, src)
		}
		sources[src]++
	}
	fmt.Fprintf(b, "# Scenario report\n\n")
	fmt.Fprintf(b, "Written by `go run ./integration/scenarios/report` from the results in `%s`"+
		" (`make scenarios`). Do not edit by hand.\n\n", filepath.ToSlash(inDir))
	dirty := "clean tree"
	if c.Dirty {
		dirty = "**dirty tree**: uncommitted changes"
	}
	fmt.Fprintf(b, "- Report written at commit `%s` (%s)\n", c.Hash, dirty)
	if len(order) == 1 {
		fmt.Fprintf(b, "- Results from %s\n", order[0])
	} else {
		var parts []string
		for _, src := range order {
			parts = append(parts, fmt.Sprintf("%s (%d)", src, sources[src]))
		}
		fmt.Fprintf(b, "- **Results from mixed commits**: %s; each scenario names its own\n", strings.Join(parts, ", "))
	}
	fmt.Fprintf(b, "- Machine: %s\n", m)
	fmt.Fprintf(b, "- Scenarios: %d; figures: %d, %d over budget", len(rs), rows, failed+empty)
	if empty > 0 {
		fmt.Fprintf(b, " (%d of them a scenario that recorded none)", empty)
	}
	b.WriteString("\n\n")
	fmt.Fprintf(b, "| scenario | size | figures | result |\n| --- | --- | --- | --- |\n")
	for _, r := range rs {
		bad := 0
		for _, row := range r.Rows {
			if !row.Pass {
				bad++
			}
		}
		verdict := "pass"
		if bad > 0 || len(r.Rows) == 0 {
			verdict = fmt.Sprintf("**FAIL** (%d)", bad)
		}
		fmt.Fprintf(b, "| [%s](#%s) | %s | %d | %s |\n", cell(r.Title), anchor(r.Name), cell(r.Size), len(r.Rows), verdict)
	}
	b.WriteString("\n")
}

func writeScenario(b *strings.Builder, r scenarios.Result, pngs []string) {
	fmt.Fprintf(b, "<a id=\"%s\"></a>\n## %s\n\n", anchor(r.Name), line(r.Title))
	fmt.Fprintf(b, "`%s`, %s size, %s, started %s, ran %.0f s.\n\n", r.Name, line(r.Size), sourceOf(r),
		r.Started.UTC().Format("2006-01-02 15:04:05 MST"), r.Duration)
	if len(r.Rows) == 0 {
		b.WriteString("No figures recorded: the scenario did not get as far as measuring.\n\n")
	} else {
		b.WriteString("| figure | budget | value | result |\n| --- | --- | --- | --- |\n")
		for _, row := range r.Rows {
			verdict := "pass"
			if !row.Pass {
				verdict = "**FAIL**"
			}
			fmt.Fprintf(b, "| %s | %s | %s | %s |\n", cell(row.Figure), cell(row.Budget), cell(row.Value), verdict)
		}
		b.WriteString("\n")
	}
	for _, n := range r.Notes {
		fmt.Fprintf(b, "- %s\n", line(n))
	}
	if len(r.Notes) > 0 {
		b.WriteString("\n")
	}
	for i, p := range pngs {
		fmt.Fprintf(b, "![%s](%s)\n\n", cell(r.Timelines[i].Title), p)
	}
}

// cell makes s safe in a Markdown table cell.
func cell(s string) string {
	return strings.ReplaceAll(line(s), "|", `\|`)
}

// line makes s one line of Markdown: a newline in a title or a note
// would end its heading or list item.
func line(s string) string {
	return strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s)
}

func anchor(name string) string { return "scenario-" + name }
