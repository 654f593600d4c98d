package publish

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/cairn-sd/cairn/internal/pace"
	"github.com/cairn-sd/cairn/status"
)

// Node publishes one server's status table (see the package comment).
type Node struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	// served[slot] is when the instance in the slot was last published
	// eligible (unix ns); 0 when never, or when the slot changed hands.
	served []atomic.Int64
	// built is when the last table was published (unix ns, 0 before).
	built atomic.Int64
	// nudge asks the loop to publish the withdrawals and the revision
	// now (WaitPublished).
	nudge chan struct{}
	// restored is set while the published table is the one loaded from
	// disk and the replica has not caught up; restoredSynced is when that
	// table was last known current.
	restored       atomic.Bool
	restoredSynced time.Time

	// Owned by the loop.
	phase Phase // see Enter
	cat   Catalog
	// w writes the status table: the catalog's layout (slots, names,
	// the readers' Directory) and each build. laidOut: Refresh has laid
	// out a catalog.
	w          *status.Writer
	laidOut    bool
	slotInc    []uint64 // incarnation last written to each slot
	localities map[Locality]*Locality
	pacer      *pace.Pacer
	// peerGen is the generation of the other regions' instances the
	// layout holds, followed the services Peers was last told of
	// (sorted).
	peerGen  uint64
	followed []string
	// restoredShifts is what the signal last shifted of the kept table
	// (signalRestored), so that the same is not published again.
	restoredShifts string
}

// Round is the work a loop's round does between the catalog's refresh
// and the table's build: the health loop's (probe targets, and on the
// leader the evaluation and its commits). It runs on the loop's
// goroutine, so it may read the Catalog and call Refresh, Enter and
// PublishPending; it must not keep the Catalog's slices past its return.
type Round func(ctx context.Context, now time.Time)

// New validates cfg and returns a Node; Run starts its loop. With a kept
// table (Config.Restore), New publishes it.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.Table.Capacity()
	n := &Node{
		cfg:     cfg,
		log:     cfg.Logger.With("component", "publish"),
		m:       newMetrics(cfg.Registerer),
		served:  make([]atomic.Int64, c),
		slotInc: make([]uint64, c),
		nudge:   make(chan struct{}, 1),
		pacer:   pace.New(cfg.Slice, pace.DefaultPause, cfg.Now),
	}
	n.w = status.NewWriter(cfg.Table, status.WriterConfig{Step: n.pacer.Step, Dropped: func(k string, err error) {
		n.m.unslotted.Inc()
		n.log.Warn("status table full: instance not published", "instance", k, "err", err)
	}})
	if s := cfg.Restore; s != nil && s.Revision == 0 {
		// Built before the store had applied anything (the node stopped
		// within its first save interval): it knows of no service, and
		// served, it would tell every DNS and xDS client that none
		// exists. Nothing is served until the store catches up.
		n.log.Warn("not serving the table kept on disk: it was built before the store had applied anything")
	} else if s != nil {
		var dropped int
		if _, err := cfg.Table.Build(func(b *status.Builder) error { dropped = s.Fill(b); return nil }); err != nil {
			return nil, fmt.Errorf("publish: publishing the table kept on disk: %w", err)
		}
		if dropped > 0 {
			n.log.Warn("the table kept on disk has more slots than this table: some instances are not served until the store catches up",
				"dropped", dropped)
		}
		n.restored.Store(true)
		n.restoredSynced = s.Synced
		n.built.Store(s.Saved.UnixNano())
		n.log.Info("serving the table kept on disk, stale, until the store catches up",
			"revision", s.Revision, "instances", len(s.Entries), "synced", s.Synced)
	}
	return n, nil
}

// Run runs the loop until ctx is done: a round every Interval (Tick,
// with round, which may be nil), and between rounds the withdrawals the
// store applies, published at once (publishWithdrawals), and the
// evacuations it starts, ends and moves on (publishShift). It builds a
// first table at once, so that the servers reading the table have one
// to read.
func (n *Node) Run(ctx context.Context, round Round) error {
	t := time.NewTicker(n.cfg.Interval)
	defer t.Stop()
	var peersChanged, signalled <-chan struct{} // nil: never
	if n.cfg.Peers != nil {
		peersChanged = n.cfg.Peers.Changed()
	}
	if n.cfg.Signal != nil {
		signalled = n.cfg.Signal.Changed()
	}
	for {
		n.Tick(ctx, round)
		for next := false; !next; {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				next = true
			case <-n.cfg.Store.Withdrawn():
				n.publishWithdrawals(ctx)
			case <-n.nudge:
				n.publishWithdrawals(ctx)
			case <-n.cfg.Store.Shifted():
				n.publishShift()
			case <-peersChanged:
				n.publishOutside()
			case <-signalled:
				n.publishOutside()
			}
		}
	}
}

// Tick runs one round: the catalog's refresh, round (if not nil), and
// the table. Run calls it every Interval; tests may call it directly
// (never concurrently with Run).
func (n *Node) Tick(ctx context.Context, round Round) {
	now := n.cfg.Now()
	if !n.cfg.Store.CaughtUp() {
		// The replica may hold only its latest raft snapshot, or
		// nothing yet (a restarted node replays its log once it hears
		// from a leader): a table built from it would deny services
		// that exist, to DNS and xDS clients alike. Keep the table from
		// disk, if there is one, else publish nothing (DNS answers Not
		// Ready, xDS refuses streams) until it has caught up. CaughtUp
		// latches: a replica that falls behind later is served stale.
		// The out-of-band failover signal applies to the kept table
		// all the same: it is for exactly such a time.
		n.signalRestored(now)
		return
	}
	if n.restored.Load() {
		n.restored.Store(false)
		n.log.Info("store caught up: serving tables built from it")
	}
	defer n.Enter(PhaseIdle)
	n.Enter(PhaseRefresh)
	n.Refresh()
	if round != nil {
		round(ctx, now)
	}
	n.Enter(PhaseBuild)
	n.build(now)
}

// Catalog returns the loop's catalog. Only the loop's goroutine (a
// Round) may call it and read what it returns.
func (n *Node) Catalog() *Catalog { return &n.cat }

// Slot returns the slot key holds in the loop's layout. Only the loop's
// goroutine may call it.
func (n *Node) Slot(key string) (int, bool) { return n.w.Lookup(key) }

// CurrentIncarnation reports the incarnation of the live instance key
// holds a slot for. Only the loop's goroutine may call it.
func (n *Node) CurrentIncarnation(key string) (uint64, bool) {
	slot, ok := n.w.Lookup(key)
	if !ok {
		return 0, false
	}
	return n.slotInc[slot], true
}

// ServedAt is when the instance in slot was last published eligible
// (unix ns); 0 when never, or since the slot changed hands. It is safe
// for concurrent use.
func (n *Node) ServedAt(slot int) int64 { return n.served[slot].Load() }

// Interval is the table's cadence (Config.Interval).
func (n *Node) Interval() time.Duration { return n.cfg.Interval }

// Status returns one incarnation's entry in the current status table, as
// every reader of the table sees it; false when the table does not hold
// it (yet).
func (n *Node) Status(key string, inc uint64) (status.Entry, bool) {
	pub := n.Published()
	defer pub.Release()
	if _, e, ok := pub.Lookup(key); ok && e.Incarnation == inc {
		return e, true
	}
	return status.Entry{}, false
}

// Publication is one look at what this node publishes: the current table,
// none before the first build and while the table is the one kept on
// disk (its slots are not this node's yet). Release it.
type Publication struct {
	t *status.Table
}

// Published takes the current table. A key is looked up in the table's
// own Directory, so the slot and the entry found are of one build. It
// is safe for concurrent use.
func (n *Node) Published() Publication {
	if n.restored.Load() {
		return Publication{}
	}
	return Publication{t: n.cfg.Table.Acquire()}
}

// Release gives the table back.
func (p Publication) Release() {
	if p.t != nil {
		p.t.Release()
	}
}

// Lookup returns key's slot and entry, whatever its incarnation; false
// when the table does not hold key. The table's Directory indexes its
// instances by name (status.Directory.SlotOfKey); the loop no longer
// publishes a key → slot map of its own beside it, which was a map entry
// an instance and a new map whenever an instance came or went.
func (p Publication) Lookup(key string) (int, status.Entry, bool) {
	if p.t == nil {
		return 0, status.Entry{}, false
	}
	slot, ok := p.t.Directory().SlotOfKey(key)
	if !ok {
		return 0, status.Entry{}, false
	}
	e, ok := p.t.Lookup(int(slot), status.KeyHash(key))
	if !ok {
		return 0, status.Entry{}, false
	}
	return int(slot), e, true
}

// Synced is how current this node's published table is: the older of its
// store replica's last contact with a leader and the last table it
// published. A replica cut off from its leader and a table that can no
// longer be rebuilt both make answers stale (SPEC §7). The zero time
// before the first table.
func (n *Node) Synced() time.Time {
	if n.restored.Load() {
		return n.restoredSynced
	}
	b := n.built.Load()
	if b == 0 {
		return time.Time{}
	}
	built := time.Unix(0, b)
	if c := n.cfg.Store.LastContact(); c.Before(built) {
		return c
	}
	return built
}

// Serving reports whether this node's DNS and xDS servers have a status
// table to answer from: one built from its caught-up store, or the one it
// kept on disk (answered as stale), not older than maxStale (0: any age),
// past which DNS answers SERVFAIL. nil when they do; otherwise why not,
// for /readyz. A table, once published, is never withdrawn: readers keep
// the last one.
func (n *Node) Serving(maxStale time.Duration) error {
	if t := n.cfg.Table.Acquire(); t != nil {
		t.Release() // the DNS server's own test
		if synced := n.Synced(); maxStale > 0 && !synced.IsZero() && n.cfg.Now().Sub(synced) > maxStale {
			return fmt.Errorf("the status table is %s old, past --max-stale %s: DNS answers SERVFAIL",
				n.cfg.Now().Sub(synced).Round(time.Second), maxStale)
		}
		return nil
	}
	if !n.cfg.Store.CaughtUp() {
		return errors.New("no status table yet: the store has not caught up with a leader, and no table is kept on disk")
	}
	return errors.New("no status table yet: the store has caught up and the first table is being built")
}

// Restored reports whether this node serves the table it kept on disk,
// its store not caught up yet since it started.
func (n *Node) Restored() bool { return n.restored.Load() }

// Table returns the publisher the node builds its tables into.
func (n *Node) Table() *status.Publisher { return n.cfg.Table }
