package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompare reads runs with and without hostile streams and gives the
// ratio of the medians of honest withdrawal p99, and its verdict.
func TestCompare(t *testing.T) {
	dir := t.TempDir()
	var files []string
	write := func(name string, p99 float64, hostile bool) {
		r := report{Withdrawals: kindStats{P99ms: p99, Changes: 10, T99Within5s: 10}}
		if hostile {
			r.Hostile = &hostileReport{Streams: 500, Refusals: []refusalReport{{Code: "ResourceExhausted", Count: 3}}}
		}
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, name)
		if err := os.WriteFile(f, append([]byte("| a table row |\n"), b...), 0o644); err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	write("0-1", 100, false)
	write("500-1", 105, true)
	write("0-2", 90, false)
	write("500-2", 200, true)
	write("0-3", 120, false)
	write("500-3", 104, true)
	var out strings.Builder
	if err := compare(&out, files); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"÷ without: 1.05** (medians; per round 1.05, 2.22, 0.87). SPEC §9 (≤ 1.10): holds.",
		"| 3 (3 ResourceExhausted) |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if err := compare(&out, files[:1]); err == nil {
		t.Error("runs without hostile streams only: want an error")
	}
}
