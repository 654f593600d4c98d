// Package health runs health evaluation on one server: the small loop
// around the pure evaluator (package eval), SPEC §2.
//
// Every node:
//   - turns the services' active checks into probe targets, keeps those
//     assigned to it (rendezvous hashing over the live members, two
//     observers per target) in its prober, and hands the prober's
//     fixed-size batches to the leader (in process on the leader, over
//     the API from a follower);
//   - rebuilds its status table every Interval from its own store
//     replica: the committed verdicts, with weights recomputed at build
//     time so that slow start keeps rising between commits.
//
// The leader, in addition, keeps the evidence (probe results by
// observer, caller outcomes; self-reports are in the store), runs
// eval.Evaluate for every service every Interval, and commits the
// verdicts that changed to the store in batches, with the audit record of
// each transition. A new leader starts from those committed verdicts, so
// a failover never sends a withdrawn instance back into rotation; the
// evidence itself is computed state, kept in memory only (SPEC §0.2).
//
// Data flows one way: store → (leader) eval → store → status table on
// every node → the DNS and xDS servers, which read only the table.
package health
