// Package xdsserver serves cairn's view of every service over xDS (SPEC
// §4), for Envoy and for gRPC clients that dial xds:///: aggregated
// state-of-the-world (sotw.go) and delta (delta.go) streams, one loop per
// stream (loop.go), and a hub (views.go) that follows the published
// tables, rebuilds only the services that changed, per subscriber place,
// and wakes only the streams watching a changed resource (resources.go
// builds them, content.go fingerprints, encodes and compares them,
// version.go names their versions). Every stream passes the same gate as
// it opens (loop.go): the table is loaded, the reconnect cap
// (admission.go) and, on a server whose store view is stale, the rule
// that lets subscribers go to a fresh server (stale.go). Load reports
// come over LRS (lrs.go).
//
// Like the DNS server it reads only the published status table (package
// status), never the store or the health loop, and its answers follow
// the same rules: an endpoint in rotation is HEALTHY (UNKNOWN while its
// verdict is unknown), a draining one DRAINING, a withdrawn one is left
// out of the assignment — never marked UNHEALTHY, which would send an
// Envoy whose endpoints are mostly unhealthy into panic mode, routing to
// them all. Priorities are SPEC §3's tiers as seen from the subscriber's
// node locality, the same tiers the DNS server prefers for a caller in
// that place.
//
// The resources: per service port a Cluster and a
// ClusterLoadAssignment named "<svc>.<ns>:<port>", and API listeners
// "<svc>.<ns>:<port>" and "<svc>.<ns>" (the default port) that route to
// the cluster, in the shapes grpc-go's xDS client accepts (it refuses a
// whole assignment for one weight of 0 or two endpoints at one address,
// ignores a locality of weight 0, and requires a terminal router filter).
// A version is "<store revision>-<digest>" (version.go): the digest of
// the deterministic encoding, stable across servers and restarts, is a
// resource's identity; the revision of the table it was sent from lets
// a reconnecting client name how new its view is, and a server whose
// table is older sends it nothing older.
//
// Imports: the status table, the view encoding it shares with the agent
// (internal/agentview), the token rules (internal/acl), go-control-plane's
// types and grpc. Never the store, the health loop, the evaluator or
// miekg/dns (cmd/deps_test.go).
//
// Threading: grpc runs each stream on its own goroutine, and serveLoop
// adds one receiver per stream, which ends with it. Run owns the
// server's own goroutines (the hub following the published tables, the
// admission gate, the staleness check, the load reports' hand-off, the
// subscribers file) and waits for them; every hub field is behind hub.mu, held briefly (a refresh of
// one service, a watch, a take), never while sending. A stream reads
// only its own member and the resources the hub handed it, which are
// immutable once built.
package xdsserver
