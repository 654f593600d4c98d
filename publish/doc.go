// Package publish runs every server's own work between its store
// replica and the servers that answer from it: it builds the status
// table that DNS, xDS and the API read, on every node, leader or not.
//
// It owns:
//   - the Catalog, the one mirror of the store replica: services with
//     their policies and their live instances, re-read only when the
//     store's revision moved, written over the previous one, with no
//     allocation per instance that was there before;
//   - the table: every Interval the Catalog is laid out in a
//     status.Writer (slots, names, the readers' Directory) and a table
//     built from it with every slot written (constant work, SPEC §0.6):
//     the committed verdicts, with weights recomputed at build time (the
//     evaluator's pure eval.Weight) so that slow start keeps rising
//     between commits;
//   - withdrawals on commit: what the store applies that takes an
//     instance out of rotation is published at once, as a copy of the
//     current table with those entries withdrawn, not at the next build
//     (SPEC §2), and WaitPublished, which a drain waits on;
//   - evacuations on commit: an entry that starts, ends or moves on an
//     evacuation has the table rebuilt from the replica at once, between
//     rounds, not at the next one (issue 30: within a second);
//   - the kept table (status/tablefile), published at start and served,
//     stale, until the replica has caught up with a leader (SPEC §7);
//   - what readers ask of the table: Serving (readiness), Synced and
//     Restored (freshness), TableVersion, Status of one instance, and
//     Published for a lookup of many.
//
// The leader's evaluation (package health) runs inside the loop's round
// (Round), between the Catalog's refresh and the build, and reads the
// Catalog there; publish never calls health otherwise, and never
// imports it. Data flows one way: store → health → store → publish →
// status → servers.
//
// Imports: store, status (with tablefile), eval (its policy and its pure
// weight), wire, internal/pace; never health, api, dnsserver or
// xdsserver (cmd/deps_test.go).
//
// Threading: one goroutine, Run's loop, owns the Catalog, the writer and
// the slots; a Round runs on it, and the methods documented as the
// loop's (Catalog, Refresh, Enter, PublishPending, Slot,
// CurrentIncarnation, Directory) may be called only from it. The
// readers' methods (Serving, Synced, Restored, TableVersion, Status,
// Published, ServedAt, WaitPublished) are safe from any goroutine: they
// read the status.Publisher and atomics, and never lock the loop.
package publish
