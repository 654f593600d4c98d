// Package history keeps what this node published, service by service,
// for a bounded time: each status table that changed a service's
// entries is recorded as a step (the entries that changed, the
// directory's instances for new ones, the table's version, store
// revision and build time), and the node's freshness by the serve-stale
// rule as a timeline of its own. From them it rebuilds a service's part
// of the table at any time or store revision it still holds (Point),
// which the DNS and xDS servers' own answer code reads to say what a
// caller in a given place was told (package replay).
//
// # Constant work
//
// A step is one table's changes to one namespace's services, each change
// naming its service: a slow start that raises the weights of 2,500
// services in one table is one step, not 2,500.
//
// Recording follows the published tables as the xDS hub does: one pass
// over the table's slots per table, comparing each 32-byte entry with
// the one recorded before, whatever changed. It costs the same whether
// no entry changed or all did, does not grow with queries, and runs in
// its own goroutine, holding a table only as long as a snapshot build
// does. Nothing on the DNS or xDS paths calls it.
//
// # Bounds
//
// A step is kept while it is younger than Config.Window or among its
// namespace's newest Config.Changes steps. Config.Bytes bounds the
// memory the steps hold over every namespace: past it, the namespace
// that holds the most loses its oldest step (ties: the name that sorts
// last), the rule the audit trail follows, so that a churning tenant
// pushes out its own history before another's. A step keeps its
// changes encoded against each slot's state before (delta.go): a slow
// start's weight step takes a few bytes, a new instance its whole
// entry. A step let go is folded into its service's
// services' bases, the state their remaining steps start from: a
// service that has not changed for a week still replays back to its
// last change.
//
// Imports: the status table (and its file form, tablefile, whose Fill
// builds a replayed table), safe file writes; never the store, the
// health loop or the servers.
package history
