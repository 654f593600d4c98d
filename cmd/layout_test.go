package cmd

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// rootLayout is the root of the tree, which shows the pipeline: every
// directory there is a stage of the flow, an edge where callers meet it,
// or a home for what is not production code. A helper with one job that
// the pipeline leans on goes under internal/, so that a reader sees the
// stages first; a new root directory must say here which it is.
var rootLayout = map[string]string{
	"store":       "stage 1: the replicated desired state (raft, snapshots, leases)",
	"probe":       "stage 2: active checks, results for the evaluator",
	"eval":        "stage 3: the pure evaluator: evidence and policy in, verdicts out",
	"health":      "stage 4: the leader's work: evidence intake, probe targets, correlated failures, evaluation rounds, commits",
	"publish":     "stage 4: every node's work: the store's mirror, the table writer, withdrawals on commit, the kept table restored",
	"peer":        "stage 1: other regions' views, followed over their xDS, read-only, beside the store",
	"failover":    "stage 1: the operator's out-of-band failover signal (a file or a URL), read beside the store",
	"status":      "stage 5: the one immutable table both servers read, and its file on disk",
	"zones":       "stage 5: zone data and lookup rules beside the table",
	"dnsserver":   "stage 6: answers DNS from the table",
	"xdsserver":   "stage 6: answers xDS from the table",
	"agent":       "stage 7: the client-side agent, fed by the xDS server",
	"history":     "stage 6: follows the published tables, and keeps what each service's entries were, for replay",
	"replay":      "stage 6: what a caller was told at a time of the past: the history's table through the servers' answer code",
	"kubesync":    "edge: registrations reconciled from Kubernetes EndpointSlices, written through the API as a registrar (cairn kube-sync)",
	"wire":        "edge: the API's types and rules, linked by clients",
	"api":         "edge: the HTTP API and its handlers",
	"client":      "edge: the Go client of the API, used by the CLI",
	"cmd":         "edge: flags to Configs, wiring, lifecycle",
	"internal":    "helpers with one job each (retry timing, label rule, file safety, certificates, tokens, the dashboard's files)",
	"docs":        "documents, and the leaf package that embeds what the API serves",
	"integration": "tests with real processes",
	"bench":       "benchmarks and their tools",
	"deploy":      "what runs the binary elsewhere; no Go package imports it",
	"scripts":     "scripts the Makefile and CI call",
	"bin":         "build output, not committed",
}

// TestRootLayout: the root holds the pipeline's stages and edges only.
func TestRootLayout(t *testing.T) {
	ents, err := os.ReadDir("..")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range ents {
		if !e.IsDir() || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		seen[e.Name()] = true
		if _, ok := rootLayout[e.Name()]; !ok {
			t.Errorf("root directory %s has no role in rootLayout: a helper goes under internal/, a stage says which", e.Name())
		}
	}
	for d := range rootLayout {
		if !seen[d] && d != "bin" {
			t.Errorf("rootLayout names %s, which is not in the tree", d)
		}
	}
}

// maxFileLines is how long a non-test Go file may grow: past it, a file
// holds more than one job (STYLE §6), and is split along the seams its
// functions already show.
const maxFileLines = 600

// TestFileLength: no non-test Go file the repository tracks is longer
// than maxFileLines.
func TestFileLength(t *testing.T) {
	out, err := exec.Command("git", "-C", "..", "ls-files", "*.go").Output()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("git ls-files: %v", err)
		}
		t.Skipf("git ls-files: %v (not a git checkout)", err)
	}
	n := 0
	for f := range strings.FieldsSeq(string(out)) {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile("../" + f)
		if err != nil {
			t.Fatal(err)
		}
		n++
		lines := bytes.Count(b, []byte("\n"))
		if lines > maxFileLines {
			t.Errorf("%s has %d lines; a non-test file holds one job, at most %d lines: split it by job", f, lines, maxFileLines)
		}
	}
	if n < 50 {
		t.Fatalf("found only %d Go files", n)
	}
}
