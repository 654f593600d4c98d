// Package status holds this node's status table: what the evaluator
// concluded about every instance, as an immutable, versioned snapshot
// that the DNS and xDS servers read at query time without locking.
//
// It owns four things:
//
//   - Entry: one instance's verdict, eligibility, published weight, base
//     weight, locality, lifecycle and flags, in 32 pointer-free bytes.
//   - Table: Capacity entries (the same number whether one slot is used
//     or all of them), the names that entries refer to by id (services,
//     localities), and an index of each service's slots. A published
//     table never changes while a reader holds it.
//   - Publisher: a small pool of tables allocated once, Build to rewrite
//     one and swap it in with an atomic pointer, Acquire and Release for
//     readers, Changed to wait for a newer version, and Stats.
//   - Slots: the writer's stable assignment of instance keys to slots.
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
// Each node builds its own table from its local store replica and its own
// evidence. The evaluator keeps a Slots of Publisher.Capacity and, every
// second:
//
//	ver, err := pub.Build(func(b *status.Builder) error {
//		b.SetStoreRevision(rev)
//		b.SetServices(services) // the same *Names until services change
//		entries := b.Entries()
//		for slot := range entries {
//			evaluate(&entries[slot], slot) // every slot; status.Entry{} when free
//		}
//		return nil
//	})
//	slots.Recycle()
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
// of each other's dependency graphs. Decide health (that is the
// evaluator's job), read the store, start goroutines, or make a reader
// lock, block or allocate to read the current table.
package status
