package cmd

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Project rules about imports (STYLE §3.1): data flows one way, only the
// store knows raft, and production code never imports testing helpers.
// Each rule carries its reason.
var importRules = []struct {
	pkg    string // module-relative package ("" = every package)
	banned string // import path prefix
	why    string
	except []string // import paths the rule lets through
}{
	{"", "github.com/hashicorp/raft", "only store imports raft", nil},
	{"", "k8s.io/", "only kube-sync knows Kubernetes (package kubesync, wired by cmd; its tests' harness)", nil},
	{"", "testing", "no testing package in production code", nil},
	{"", "github.com/cairn-sd/cairn/store/storetest", "test helpers stay in tests", nil},
	{"", "github.com/cairn-sd/cairn/status/statustest", "test helpers stay in tests", nil},
	{"", "github.com/cairn-sd/cairn/internal/golden", "test helpers stay in tests", nil},
	{"internal/", "github.com/cairn-sd/cairn/", "a helper under internal/ serves the pipeline and never reaches into a stage of it (but the label rule, safe file writes, the wire types and the table a view is made of)",
		[]string{"github.com/cairn-sd/cairn/internal/dnsname", "github.com/cairn-sd/cairn/internal/durable", "github.com/cairn-sd/cairn/internal/certs", "github.com/cairn-sd/cairn/wire", "github.com/cairn-sd/cairn/status"}},
	{"internal/acl", "github.com/cairn-sd/cairn/", "acl is a leaf", nil},
	{"internal/addrpolicy", "github.com/cairn-sd/cairn/", "addrpolicy is a leaf", nil},
	{"probe", "github.com/cairn-sd/cairn/", "probe is a leaf: it checks targets and knows nothing of the store", nil},
	{"status", "github.com/cairn-sd/cairn/", "status is a leaf both servers read (its own test also keeps it to the standard library)", nil},
	{"eval", "github.com/cairn-sd/cairn/api", "data flows one way: eval feeds the servers, never the reverse", nil},
	{"eval", "github.com/cairn-sd/cairn/client", "data flows one way: eval feeds the servers, never the reverse", nil},
	{"eval", "github.com/cairn-sd/cairn/cmd", "only cmd wires", nil},
	{"eval", "github.com/cairn-sd/cairn/", "eval is pure: of cairn it knows status's vocabulary, wire's policy defaults (their one home, which clients show) and the committed verdict (wire.Health) it maps its state to and from",
		[]string{"github.com/cairn-sd/cairn/status", "github.com/cairn-sd/cairn/wire"}},
	{"zones", "github.com/cairn-sd/cairn/", "zones is zone data and lookup rules: it knows nothing of the store (only the label rule)",
		[]string{"github.com/cairn-sd/cairn/internal/dnsname"}},
	{"internal/dnsname", "github.com/cairn-sd/cairn/", "dnsname is a leaf: the label rule every package checks names with", nil},
	{"internal/nodeid", "github.com/cairn-sd/cairn/", "nodeid keeps a server's identity on disk: it needs only the label rule and durable writes",
		[]string{"github.com/cairn-sd/cairn/internal/dnsname", "github.com/cairn-sd/cairn/internal/durable", "github.com/cairn-sd/cairn/wire"}},
	{"internal/pace", "github.com/cairn-sd/cairn/", "pace is a leaf: it times work and knows nothing of what the work is", nil},
	{"internal/backoff", "github.com/cairn-sd/cairn/", "backoff is a leaf: it times retries and knows nothing of what is retried", nil},
	{"internal/gcpace", "github.com/cairn-sd/cairn/", "gcpace is a leaf: it paces the collector and knows nothing of what the heap holds", nil},
	{"internal/durable", "github.com/cairn-sd/cairn/", "durable is a leaf: it replaces files safely for the server and the client alike and knows nothing of what they hold", nil},
	{"store", "github.com/cairn-sd/cairn/", "store sits at the start of the flow and imports no other cairn package (but leaves: pace, dnsname, the wire types it stores and status's vocabulary they use)",
		[]string{"github.com/cairn-sd/cairn/internal/pace", "github.com/cairn-sd/cairn/internal/dnsname", "github.com/cairn-sd/cairn/wire", "github.com/cairn-sd/cairn/status"}},
	{"wire", "github.com/cairn-sd/cairn/", "wire is what clients link: the API's types and rules, with no server code behind them (only the label rule, and status, a standard-library leaf, for the one vocabulary of verdicts, lifecycles and flags)",
		[]string{"github.com/cairn-sd/cairn/internal/dnsname", "github.com/cairn-sd/cairn/status"}},
	{"docs", "github.com/cairn-sd/cairn/", "docs is a leaf: it embeds the documents the API serves and knows no cairn package", nil},
	{"failover", "github.com/cairn-sd/cairn/", "the out-of-band signal is read beside the pipeline, not from it: it knows only the wire types (and the label rule through them)",
		[]string{"github.com/cairn-sd/cairn/wire"}},
	{"kubesync", "github.com/cairn-sd/cairn/", "kube-sync is a registrar like any other: it writes through the API's client and knows only the wire types (and status's lifecycles in them)",
		[]string{"github.com/cairn-sd/cairn/client", "github.com/cairn-sd/cairn/wire", "github.com/cairn-sd/cairn/status"}},
	{"history", "github.com/cairn-sd/cairn/", "history follows the published table, as the servers do: of cairn it knows only the table (and safe file writes for its file)",
		[]string{"github.com/cairn-sd/cairn/status", "github.com/cairn-sd/cairn/internal/durable"}},
	{"api", "github.com/cairn-sd/cairn/replay", "the API asks the replayer through Config.Replay: it never links the servers' answer code", nil},
	{"api", "github.com/cairn-sd/cairn/cmd", "only cmd wires", nil},
	{"api", "github.com/cairn-sd/cairn/internal/ui", "cmd hands the dashboard's handler to the API (Config.UI): the API serves it, knows nothing of it", nil},
	{"internal/ui", "github.com/cairn-sd/cairn/", "ui is the dashboard's static files: its pages speak the JSON API from the browser, so it imports no cairn package", nil},
	{"internal/certs", "github.com/cairn-sd/cairn/", "certs is a leaf: every listener and client reads its certificates from it, so it knows none of them", nil},
	{"internal/pki", "github.com/cairn-sd/cairn/", "pki makes certificates for the CLI; it needs only the servers' name from certs",
		[]string{"github.com/cairn-sd/cairn/internal/certs"}},
	{"client", "github.com/cairn-sd/cairn/", "client links no server code: it speaks the API with wire's types (client's TestLean checks its whole graph)",
		[]string{"github.com/cairn-sd/cairn/wire", "github.com/cairn-sd/cairn/internal/backoff"}},
}

// graphRules hold for a package's whole dependency graph (go list's
// Deps), not only its direct imports: a server must not link the store
// or the health loop even through a package it imports.
//
// The DNS server reads only what the health loop published: the status
// table (and its zone). Were it to import the store, the health loop or
// the evaluator, a query could see state that no published table holds,
// and an answer would no longer be a function of one table version; its
// tests would also need raft and bolt. The xDS server is held to the
// same rule, and to speaking no DNS. The agent sits after both: it
// knows the servers only by what they send (agentview), never the store,
// the health loop, the evaluator or the servers' own packages.
// (raft needs no row: importRules keeps it to the store, which is banned
// here.)
var graphRules = []struct {
	pkg    string // module-relative package
	banned string // import path, with everything below it
	why    string
}{
	{"dnsserver", "github.com/cairn-sd/cairn/store", "the DNS server reads only the published status table, never the store"},
	{"dnsserver", "github.com/cairn-sd/cairn/health", "the DNS server reads only the published status table, never the health loop"},
	{"dnsserver", "github.com/cairn-sd/cairn/eval", "the DNS server reads only the published status table, never the evaluator"},
	{"xdsserver", "github.com/cairn-sd/cairn/store", "the xDS server reads only the published status table, never the store"},
	{"xdsserver", "github.com/cairn-sd/cairn/health", "the xDS server reads only the published status table, never the health loop"},
	{"xdsserver", "github.com/cairn-sd/cairn/eval", "the xDS server reads only the published status table, never the evaluator"},
	{"xdsserver", "github.com/miekg/dns", "the xDS server speaks no DNS"},
	{"agent", "github.com/cairn-sd/cairn/store", "the agent knows the store only by the views the servers send"},
	{"agent", "github.com/cairn-sd/cairn/health", "the agent knows health only by the views the servers send"},
	{"agent", "github.com/cairn-sd/cairn/eval", "the agent knows health only by the views the servers send"},
	{"agent", "github.com/cairn-sd/cairn/xdsserver", "the agent is a client of the xDS server, not a part of it"},
	{"agent", "github.com/cairn-sd/cairn/dnsserver", "cmd wires the agent's table to a DNS server; the agent only fills the table"},
	{"status/tablefile", "github.com/cairn-sd/cairn/store", "the kept table is the published table on disk, never the store"},
	{"status/tablefile", "github.com/cairn-sd/cairn/health", "the kept table is the published table on disk; the health loop hands it over"},
	{"publish", "github.com/cairn-sd/cairn/health", "data flows one way: health writes verdicts to the store, publish reads them from it; it never asks the evaluator"},
	{"publish", "github.com/cairn-sd/cairn/api", "publish serves readers through its methods; the API calls it, never the reverse"},
	{"publish", "github.com/cairn-sd/cairn/xdsserver", "publish writes the table the servers read; it knows none of them"},
	{"publish", "github.com/cairn-sd/cairn/dnsserver", "publish writes the table the servers read; it knows none of them"},
	{"dnsserver", "github.com/cairn-sd/cairn/publish", "the DNS server reads only the published status table, never its publisher (cmd hands it the freshness as functions)"},
	{"xdsserver", "github.com/cairn-sd/cairn/publish", "the xDS server reads only the published status table, never its publisher (cmd hands it the freshness as functions)"},
	{"agent", "github.com/cairn-sd/cairn/publish", "the agent publishes its own table from views, through status.Writer; the server's publisher is no part of it"},
	// cairn-agent is `cairn agent` without the server: what it links is
	// what an agent maps into memory (docs/decisions.md, "A lean agent
	// binary"). Its command (agentcmd) and what it shares with the
	// server's (daemon) are held to the same rules.
	{"cmd/cairn-agent", "github.com/cairn-sd/cairn/store", "cairn-agent links only what the agent runs: not the store"},
	{"cmd/cairn-agent", "github.com/hashicorp/raft", "cairn-agent links only what the agent runs: not raft"},
	{"cmd/cairn-agent", "github.com/cairn-sd/cairn/xdsserver", "cairn-agent links only what the agent runs: not the xDS server"},
	{"cmd/cairn-agent", "github.com/cairn-sd/cairn/api", "cairn-agent links only what the agent runs: not the HTTP API"},
	{"cmd/cairn-agent", "github.com/cairn-sd/cairn/internal/ui", "cairn-agent links only what the agent runs: not the dashboard"},
	{"cmd/cairn-agent", "github.com/cairn-sd/cairn/health", "cairn-agent links only what the agent runs: not the health loop"},
	{"cmd/cairn-agent", "github.com/cairn-sd/cairn/publish", "cairn-agent links only what the agent runs: not the server's publisher"},
	{"cmd/cairn-agent", "github.com/cairn-sd/cairn/probe", "cairn-agent links only what the agent runs: not the probes"},
	{"cmd/cairn-agent", "github.com/cairn-sd/cairn/client", "cairn-agent links only what the agent runs: not the API's client"},
	{"cmd/cairn-agent", "k8s.io/client-go", "cairn-agent links only what the agent runs: not kube-sync's Kubernetes client"},
	{"cmd/cairn-agent", "github.com/envoyproxy/go-control-plane/pkg", "cairn-agent links only what the agent runs: of go-control-plane, the messages it reads, not its server, cache or resource helpers (which link every xDS type)"},
	{"cmd/internal/agentcmd", "github.com/cairn-sd/cairn/store", "agentcmd is cairn-agent's command: it links no server"},
	{"cmd/internal/agentcmd", "github.com/cairn-sd/cairn/xdsserver", "agentcmd is cairn-agent's command: it links no server"},
	{"cmd/internal/daemon", "github.com/cairn-sd/cairn/store", "daemon is shared with cairn-agent: it links no server"},
	{"cmd/internal/daemon", "github.com/cairn-sd/cairn/xdsserver", "daemon is shared with cairn-agent: it links no server"},
	{"replay", "github.com/cairn-sd/cairn/store", "a replay reads the history of the published tables, never the store (its audit trail comes in as a function)"},
	{"replay", "github.com/cairn-sd/cairn/health", "a replay reads the history of the published tables, never the health loop"},
	{"history", "github.com/cairn-sd/cairn/store", "the history is of the published tables, never the store"},
	{"internal/agentview", "github.com/cairn-sd/cairn/store", "a view is made from the published status table, never the store"},
	{"internal/agentview", "github.com/cairn-sd/cairn/health", "a view is made from the published status table, never the health loop"},
	{"peer", "github.com/cairn-sd/cairn/store", "another region's views enter the table, never the store: a region never writes another's state"},
	{"peer", "github.com/cairn-sd/cairn/health", "another region's instances are judged by their own region, never by this one's health loop"},
	{"peer", "github.com/cairn-sd/cairn/publish", "the publisher reads the peers (publish.Peers), not the reverse"},
	{"publish", "github.com/cairn-sd/cairn/peer", "the publisher takes other regions' instances through publish.Peers; cmd wires package peer to it"},
}

// allowed lists the packages a rule does not apply to.
var allowed = map[string][]string{
	"github.com/hashicorp/raft": {"store", "store/storetest"},
	"k8s.io/":                   {"kubesync", "cmd", "integration", "integration/kube"},
	"testing":                   {"store/storetest", "integration", "integration/scenarios", "integration/scenarios/result"},
	"github.com/cairn-sd/cairn/store/storetest":   {},
	"github.com/cairn-sd/cairn/status/statustest": {},
	"github.com/cairn-sd/cairn/internal/golden":   {},
}

// leanAgentLinks is every cairn package cairn-agent may link: an
// allowlist, so that a package added to the agent's path (the embedded
// docs, the PKI, the evaluator...) is a decision, not an accident. The
// graph rules above say why the server's parts are out.
var leanAgentLinks = []string{
	"agent", "cmd/cairn-agent", "cmd/internal/agentcmd", "cmd/internal/daemon",
	"dnsserver", "internal/agentview", "internal/backoff", "internal/certs",
	"internal/dnsname", "internal/durable", "internal/gcpace", "internal/nodeid",
	"internal/pace", "status", "status/tablefile", "wire", "zones",
}

func TestImportRules(t *testing.T) {
	out, err := exec.Command("go", "list", "-json", "github.com/cairn-sd/cairn/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/cairn-sd/cairn"
	dec := json.NewDecoder(strings.NewReader(string(out)))
	n := 0
	seen := map[string]bool{}
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
			Deps       []string
		}
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		n++
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, mod), "/")
		seen[rel] = true
		for _, r := range graphRules {
			if r.pkg != rel {
				continue
			}
			for _, dep := range p.Deps {
				if dep == r.banned || strings.HasPrefix(dep, r.banned+"/") {
					t.Errorf("%s depends on %s: %s", p.ImportPath, dep, r.why)
				}
			}
		}
		if rel == "cmd/cairn-agent" {
			for _, dep := range p.Deps {
				if d, ok := strings.CutPrefix(dep, mod+"/"); ok && !slices.Contains(leanAgentLinks, d) {
					t.Errorf("cairn-agent depends on %s, which is not in leanAgentLinks: the lean agent links only what the agent runs (docs/decisions.md, \"A lean agent binary\")", dep)
				}
			}
		}
		for _, r := range importRules {
			if r.pkg != "" && r.pkg != rel && !(strings.HasSuffix(r.pkg, "/") && strings.HasPrefix(rel, r.pkg)) {
				continue
			}
			if slices.Contains(allowed[r.banned], rel) {
				continue
			}
			for _, imp := range p.Imports {
				if slices.Contains(r.except, imp) {
					continue
				}
				if imp == r.banned || strings.HasPrefix(imp, r.banned) && (strings.HasSuffix(r.banned, "/") || strings.HasPrefix(imp, r.banned+"/")) {
					t.Errorf("%s imports %s: %s", p.ImportPath, imp, r.why)
				}
			}
		}
	}
	if n < 5 {
		t.Fatalf("go list found only %d packages", n)
	}
	// A rule about a package that moved or was renamed would pass unseen.
	for _, r := range graphRules {
		if !seen[r.pkg] {
			t.Errorf("graph rule for %s: no such package", r.pkg)
		}
	}
}
