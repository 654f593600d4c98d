// Package agent is cairn's client-side agent (SPEC §5): it subscribes to
// the views of the services its callers ask for over delta xDS, serves
// them through a status table of its own (which cmd hands to a
// dnsserver on a local address), and keeps them on disk so that it
// routes from its last-known-good views through a control-plane outage
// and across its own restarts.
//
// What it owns:
//   - the subscription: the names of Config.Services (pinned), and those
//     callers ask about (Unheld), capped at MaxViews; names a server
//     says do not exist are remembered for AbsentTTL;
//   - per service, the last view accepted (a lower revision never
//     replaces a higher one, whichever server sent it) and what it
//     serves of it: the client-side shrink cap holds back withdrawals
//     past the service's cap, as the servers do;
//   - freshness: when its views were last known current (a stream open
//     and answered, or a server's own stale age), which the DNS server
//     reads through the table's build time;
//   - the file at Config.Path (status/tablefile's format), read at New
//     before any server answers, its previous copy read when it is torn.
//
// Files: agent.go (the Agent, loading, callers' names), config.go,
// session.go (Run and one xDS stream), views.go (a view, its shrink cap,
// the table it fills), file.go (the kept file), fresh.go (staleness),
// status.go and http.go (what it reports), metrics.go.
//
// Imports: the status table, its file format, and the view encoding the
// xDS server shares with it (internal/agentview). Never the store, the
// health loop, the evaluator or the servers' own packages
// (cmd/deps_test.go): it knows the servers only by what they send.
//
// Threading: Run owns two goroutines, the stream loop (one session at a
// time, servers tried in turn with backoff) and the file writer (keep),
// and returns when both have stopped. Every field behind Agent.mu is
// read and written with it held; methods named *Locked expect it held.
// The table is published under mu, so the views, the serial and the
// table move together; the DNS server reads the published table without
// locking.
package agent
