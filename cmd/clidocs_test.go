package cmd

import (
	"os"
	"strings"
	"testing"
)

// TestCLIDocs: docs/cli.md is what the command definitions render now
// (CLIMarkdown), so that the reference never drifts from --help.
func TestCLIDocs(t *testing.T) {
	want, err := CLIMarkdown()
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile("../docs/cli.md")
	if err != nil {
		t.Fatalf("%v: run `make docs`", err)
	}
	if string(got) == want {
		return
	}
	g, w := strings.Split(string(got), "\n"), strings.Split(want, "\n")
	for i := range max(len(g), len(w)) {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			t.Fatalf("docs/cli.md is not what the CLI generates: run `make docs`.\nline %d is\n\t%q\nand the CLI gives\n\t%q", i+1, gl, wl)
		}
	}
}
