// Package status holds this node's status table: what the evaluator
// concluded about every instance, as an immutable, versioned snapshot
// that the DNS and xDS servers read at query time without locking.
//
// It owns five things:
//
//   - Entry: one instance's verdict, eligibility, published weight, base
//     weight, locality, lifecycle and flags, in 32 pointer-free bytes.
//   - Table: Size entries (the same number whether one slot is used
//     or all of them; Size is Capacity on a server, and follows the
//     most instances held on an agent, doubling from Initial), the
//     names that entries refer to by id (services, localities), and an
//     index of each service's slots. A published table never changes
//     while a reader holds it.
//   - Publisher: a small pool of tables allocated once, Build to rewrite
//     one and swap it in with an atomic pointer, Acquire and Release for
//     readers, Changed to wait for a newer version, and Stats.
//   - Slots: the writer's stable assignment of instance keys to slots.
//   - Writer: the one writer of a Publisher's tables, for the server
//     (fed by its store replica) and the agent (fed by its views) alike:
//     it keeps the slots, the names, the Directory and each slot's
//     entry from a plain description of services and instances, and
//     publishes a table of them at every Build.
//
// It is also the one home of the vocabulary the table speaks: Verdict and
// Lifecycle, with their text form in the SPEC's words (MarshalText,
// ParseVerdict, ParseLifecycle), and Flags. wire, the store and the
// agent's views use these types rather than strings of their own.
//
// # Constant work
//
// The evaluator rebuilds the table on a fixed cadence (every second)
// whatever changed, and every build writes every slot. A zone losing
// power changes what the entries say, not how many are written, so the
// cost of a rebuild, and of publishing it, is the same at 0% and at 100%
// change (SPEC §0.6; the Route 53 pattern). A reader's work is equally
// fixed: a DNS answer examines every member of the service, whatever
// their verdicts (SPEC §3).
//
// # Writer
//
// Each node builds its own table: a server from its local store replica
// and its own evidence, an agent from the views it holds. The writer
// lays out the services and instances when they change, and builds
// every second whatever changed:
//
//	w := status.NewWriter(pub, status.WriterConfig{})
//	w.Begin(rev, services) // []status.ServiceInfo, referred to by index
//	for _, in := range instances {
//		w.Add(in.service, status.Instance{ID: in.id, Incarnation: in.inc, …})
//	}
//	w.End()
//	ver, err := w.Build(func(slot int, ref status.Ref, e *status.Entry) {
//		e.Weight = … // what moved since the layout: verdicts, slow start
//	})
//
// # Readers
//
// A DNS query or an xDS snapshot build holds one table for its duration:
//
//	t := pub.Acquire()
//	if t == nil {
//		// no table yet: not ready (SERVFAIL, or wait on pub.Changed(0))
//	}
//	defer t.Release()
//	svc, ok := t.Services().ID("payments/checkout")
//	for _, slot := range t.Members(svc) {
//		e := t.Entry(int(slot))
//		// … e.Flags.Has(status.Eligible), e.Weight, t.Locality(e.Zone) …
//	}
//
// # What it must not do
//
// Import anything but the standard library: it is the leaf both servers
// read, and it keeps the store, raft, miekg/dns and go-control-plane out
// of each other's dependency graphs (statustest, which builds tables for
// tests through the Writer, is for tests only). Decide health (that is the
// evaluator's job), read the store, start goroutines, or make a reader
// lock, block or allocate to read the current table.
package status
