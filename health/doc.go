// Package health runs health evaluation on one server: the leader's work
// around the pure evaluator (package eval), SPEC §2. Publishing the
// status table is package publish's; health never writes a table.
//
// It owns:
//   - probe targets: the services' active checks turned into targets,
//     those assigned to this node (rendezvous hashing over the live
//     members, two observers per target) set in its prober, and the
//     prober's fixed-size batches handed to the leader (in process on
//     the leader, over the API from a follower: Forwarder);
//   - on the leader, evidence intake (probe results by observer, caller
//     outcomes; self-reports are in the store), the correlated failures
//     set aside (a prober that reaches too little of a zone), an
//     eval.Evaluate of every service every round, and the commit of the
//     verdicts that changed to the store in batches, with the audit
//     record of each transition. A new leader starts from those
//     committed verdicts, so a failover never sends a withdrawn instance
//     back into rotation; the evidence itself is computed state, kept in
//     memory only (SPEC §0.2).
//
// Data flows one way: store → (leader) health → store → publish → status
// table on every node → the DNS and xDS servers. health reads the store
// through publish's Catalog, the one mirror of the replica, and writes
// only to the store.
//
// Imports: store, eval, probe, publish (its Catalog, Round and Phase),
// status (the vocabulary), wire, client (a follower's Forwarder speaks
// to the leader's API) and internal/pace; never a server (api,
// dnsserver, xdsserver), and publish never imports health
// (cmd/deps_test.go).
//
// Threading: Node.Run runs the prober and its batch consumer, and the
// publisher's loop with the Node's round in it (publish.Round): the
// round reads the Catalog on the loop's goroutine, and only there. The
// evidence and the live members are guarded by a mutex: ProbeReport and
// Outcomes (the API's handlers) write them from any goroutine, the round
// reads them in short holds. Members are published by atomic pointer.
package health
