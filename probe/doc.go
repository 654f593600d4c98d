// Package probe runs this node's active health checks and reports what it
// saw, attributed to itself.
//
// It owns three things:
//
//   - The checks (SPEC §2): a TCP connect, an HTTP GET that passes on 2xx
//     or 3xx, and a gRPC grpc.health.v1.Health/Check that passes on
//     SERVING. A refused connection is a hard failure (Outcome.Hard), which
//     the evaluator acts on at once. Check, CheckTCP, CheckHTTP and
//     CheckGRPC run one check.
//   - The Prober: jittered schedules for up to Config.Capacity targets in
//     one heap, a worker pool of Config.Workers goroutines (a probe that
//     comes due while every worker is busy is skipped and counted, never
//     queued), a per-probe timeout, and a bounded cache of HTTP
//     connections and gRPC channels, closed when their target goes. Every
//     Config.BatchInterval it publishes a Batch holding the latest Result
//     of every target, always Capacity slots long: the consumer's work is
//     the same whether one target changed or all of them did (SPEC §0.6,
//     Route 53's constant-work pattern). A slow consumer never blocks
//     probing: the newer batch replaces the one it has not taken.
//   - Assignment: Assign and Assigned (and their zoned forms, which
//     prefer observers in another zone than the target's), pure
//     functions that spread targets over the live members by rendezvous
//     hashing, two observers per target where there are two or more
//     members.
//
// Package health wires it: from the store's check specs and the live
// members it computes the targets AssignedZoned gives this node and
// passes them to SetTargets whenever either changes; cmd runs Run under
// the node's errgroup; health reads Batches and, for each Result, drops
// and counts it unless the observer was assigned that target (SPEC
// §0.7: a prober reports only about its assigned targets).
//
// Threading: Run owns the scheduler and the worker pool, and closes
// Batches when it returns. SetTargets may be called from any goroutine
// (the latest set wins; Run applies it); Check and the Assign functions
// are safe anywhere.
//
// What it must not do: decide health (one result is evidence; thresholds,
// hysteresis and silence belong to the evaluator), import another cairn
// package (it is a leaf), start a goroutine per target or per tick, queue
// without bound, follow a redirect, keep cookies or send credentials
// (SPEC §8), or go through a proxy.
package probe
