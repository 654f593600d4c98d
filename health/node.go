package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/internal/pace"
	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// Node runs health evaluation on one server (see the package comment).
type Node struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	// mu guards the evidence and liveness, written by the API's handlers
	// and the batch consumer, read by the loop.
	mu       sync.Mutex
	evidence map[string]*instEvidence
	heard    map[string]time.Time // observer → when its last batch reached this leader
	live     []string             // the members targets are assigned over
	leading  time.Time            // when this node last became the evaluating leader
	// aside is, per service, the (observer, zone) pairs whose timeouts
	// the last round set aside: an event marks each change.
	aside map[wire.ServiceKey]map[asideKey]bool

	// members is the ids of the cluster's members, sorted (immutable
	// once published).
	members atomic.Pointer[[]string]
	// zones maps each member to its "region/zone" (immutable once
	// published): a target's observers are chosen in different zones.
	zones atomic.Pointer[map[string]string]
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
	phase Phase // see enter
	cat   catalog
	// w writes the status table: the catalog's layout (slots, names,
	// the readers' Directory) and each build. laidOut: refresh has laid
	// out a catalog.
	w          *status.Writer
	laidOut    bool
	slotInc    []uint64 // incarnation last written to each slot
	states     map[wire.ServiceKey]*eval.State
	targets    []probe.Target
	localities map[locality]*locality // see locality

	// The round's working memory, reused so that a round allocates
	// nothing per instance (see evaluate).
	pacer       *pace.Pacer
	ev          eval.Evaluator
	spareStates map[wire.ServiceKey]*eval.State
	samplesBy   map[string][]eval.Sample
	stored      map[string]*store.Verdict
	trans       map[string]eval.Transition
	insBuf      []eval.Instance
	reportBuf   []eval.Report
	sampleBuf   []eval.Sample
	pruneKeys   []string
	latest      []obs
}

// New validates cfg and returns a Node; Run starts it.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	c := cfg.Table.Capacity()
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "health"),
		m:        newMetrics(cfg.Registerer),
		evidence: map[string]*instEvidence{},
		heard:    map[string]time.Time{},
		served:   make([]atomic.Int64, c),
		slotInc:  make([]uint64, c),
		nudge:    make(chan struct{}, 1),
		pacer:    pace.New(cfg.Slice, pace.DefaultPause, cfg.Now),
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
			return nil, fmt.Errorf("health: publishing the table kept on disk: %w", err)
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
	none := []string{}
	n.members.Store(&none)
	noZones := map[string]string{}
	n.zones.Store(&noZones)
	return n, nil
}

// Run evaluates and publishes every Interval, and runs the prober if
// there is one, until ctx is done. It builds a first table at once, so
// that the servers reading the table have one to read.
func (n *Node) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	if p := n.cfg.Prober; p != nil {
		wg.Add(2)
		go func() {
			defer wg.Done()
			if err := p.Run(ctx); err != nil && ctx.Err() == nil {
				n.log.Error("prober stopped", "err", err)
			}
		}()
		go func() {
			defer wg.Done()
			for b := range p.Batches() {
				n.handleBatch(ctx, b)
			}
		}()
	}
	defer wg.Wait()
	t := time.NewTicker(n.cfg.Interval)
	defer t.Stop()
	for {
		n.Tick(ctx)
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
			}
		}
	}
}

// Tick runs one round: targets, evaluation (on the leader), commit, and
// the table. Run calls it every Interval; tests may call it directly
// (never concurrently with Run).
func (n *Node) Tick(ctx context.Context) {
	now := n.cfg.Now()
	if !n.cfg.Store.CaughtUp() {
		// The replica may hold only its latest raft snapshot, or
		// nothing yet (a restarted node replays its log once it hears
		// from a leader): a table built from it would deny services
		// that exist, to DNS and xDS clients alike. Keep the table from
		// disk, if there is one, else publish nothing (DNS answers Not
		// Ready, xDS refuses streams) until it has caught up. CaughtUp
		// latches: a replica that falls behind later is served stale.
		return
	}
	if n.restored.Load() {
		n.restored.Store(false)
		n.log.Info("store caught up: serving tables built from it")
	}
	defer n.enter(PhaseIdle)
	n.enter(PhaseRefresh)
	n.refresh()
	n.round(ctx, now)
}

// round is Tick once the catalog is refreshed: targets, evaluation (on
// the leader), commit, and the table.
func (n *Node) round(ctx context.Context, now time.Time) {
	leading := n.cfg.Store.LeaderReady()
	if leading {
		// The withdrawals applied during the refresh, now rather than
		// after the evaluation, the second refresh and the build: some
		// 100 ms at 10,000 instances on a busy host. The leader's round
		// refreshes again before it builds (below), so this may publish.
		n.publishPending(ctx)
	}
	n.enter(PhaseEvaluate)
	n.updateLive(now)
	n.updateTargets()
	if leading {
		n.evaluate(ctx, now)
		// The withdrawals applied during the evaluation's last slice: a
		// service of 10,000 instances is one slice of some 10 ms.
		n.publishPending(ctx)
		// Build from the replica as it is now, not as the round found
		// it: with what the round committed, and with what was applied
		// while it ran. The round publishes withdrawals (publishPending)
		// in tables stamped with the newer revision; a table built from
		// the older catalog would put the withdrawn back into rotation
		// until the next round, and its revision would go backwards.
		// refresh does nothing if nothing changed.
		n.enter(PhaseRefresh)
		n.refresh()
	} else {
		// A new term starts from the committed verdicts, and with every
		// member live for LiveTimeout. Reset both whatever the last
		// round left: a round whose commit failed (as it does when
		// leadership is lost) has already cleared states.
		n.states, n.aside = nil, nil
		n.mu.Lock()
		n.leading = time.Time{}
		n.mu.Unlock()
	}
	n.enter(PhaseBuild)
	n.build(now)
}

// handleBatch passes one of this node's probe batches to the leader.
func (n *Node) handleBatch(ctx context.Context, b *probe.Batch) {
	r := wire.ProbeReport{Observer: b.Observer, Seq: b.Seq, Results: make([]wire.ProbeResult, 0, len(b.Results))}
	for _, res := range b.Results {
		if res.TargetID == "" {
			continue
		}
		r.Results = append(r.Results, wire.ProbeResult{Target: res.TargetID, At: res.At, OK: res.OK, Hard: res.Hard,
			Unreachable: res.Unreachable && !res.OK, Code: res.Code, Error: res.Err})
	}
	if n.cfg.Store.LeaderReady() {
		n.ProbeReport(r)
		return
	}
	if n.cfg.Push == nil {
		n.m.pushes.WithLabelValues("dropped").Inc()
		return
	}
	// An empty report is sent too: it tells the leader this node is live.
	ctx, cancel := context.WithTimeout(ctx, max(n.cfg.Interval, time.Second))
	defer cancel()
	reply, err := n.cfg.Push(ctx, r)
	if err != nil {
		n.m.pushes.WithLabelValues("error").Inc()
		n.log.Debug("pushing probe results to the leader", "err", err)
		return
	}
	n.m.pushes.WithLabelValues("ok").Inc()
	if len(reply.Live) > 0 {
		n.mu.Lock()
		n.live = slices.Clone(reply.Live)
		n.mu.Unlock()
	}
}

// ProbeReport takes an observer's probe results (on the leader): each
// result about a target assigned to that observer becomes evidence; the
// others are discarded and counted. The reply names the live members.
func (n *Node) ProbeReport(r wire.ProbeReport) wire.ProbeReply {
	now := n.cfg.Now()
	all := *n.members.Load()
	zones := *n.zones.Load()
	zoneOf := func(m string) string { return zones[m] }
	pub := n.published()
	defer pub.release()
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.Observer != "" {
		n.heard[r.Observer] = now
	}
	live := n.live
	var reply wire.ProbeReply
	for _, res := range r.Results {
		key, inc, ok := parseTarget(res.Target)
		_, e, known := pub.lookup(key)
		same := known && e.Incarnation == inc
		switch {
		case !ok || r.Observer == "":
			n.m.discarded.WithLabelValues("malformed").Inc()
		case !probe.AssignedZoned(res.Target, r.Observer, live, zoneOf, n.cfg.Replicas) &&
			!probe.AssignedZoned(res.Target, r.Observer, all, zoneOf, n.cfg.Replicas):
			n.m.discarded.WithLabelValues("unassigned").Inc()
		case res.At.After(now.Add(n.cfg.Interval)):
			n.m.discarded.WithLabelValues("future").Inc()
		case !known:
			n.m.discarded.WithLabelValues("unknown_endpoint").Inc()
		case !same:
			n.m.discarded.WithLabelValues("stale_incarnation").Inc()
		case !n.record(key, inc, eval.ClassProbe, obs{observer: r.Observer, at: res.At, ok: res.OK, hard: res.Hard,
			soft: res.Unreachable && !res.OK && !res.Hard, code: res.Code, err: res.Error}):
			n.m.discarded.WithLabelValues("stale_incarnation").Inc()
		default:
			reply.Accepted++
			continue
		}
		reply.Discarded++
	}
	reply.Live = slices.Clone(live)
	return reply
}

// Outcomes takes a caller's outcome report (on the leader). observer is
// the caller's authenticated identity, or "xds:" and it for a load
// report: both are the same caller (wire.Caller), whose latest windows
// count once in the quorum. Endpoints that are unknown, of
// another incarnation, or that were not published eligible within the
// OutcomeHorizon (the caller cannot have been served them) are discarded
// and counted. r must be valid (Validate).
func (n *Node) Outcomes(observer string, r wire.OutcomeReport) wire.OutcomeReply {
	now := n.cfg.Now()
	reply := wire.OutcomeReply{Discarded: map[string]int{}}
	discard := func(why string) {
		reply.Discarded[why]++
		n.m.discarded.WithLabelValues(why).Inc()
	}
	caller := wire.Caller(observer)
	pub := n.published()
	defer pub.release()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range r.Endpoints {
		key := e.Key().String()
		slot, ent, ok := pub.lookup(key)
		switch {
		case !ok:
			discard("unknown_endpoint")
			continue
		case ent.Incarnation != e.Incarnation:
			discard("stale_incarnation")
			continue
		}
		if s := n.served[slot].Load(); s == 0 || now.Sub(time.Unix(0, s)) > n.cfg.OutcomeHorizon {
			discard("not_served")
			continue
		}
		if e.Success+e.Failure+e.Timeout == 0 {
			discard("no_calls")
			continue
		}
		n.record(key, e.Incarnation, eval.ClassOutcome, obs{observer: caller, at: now,
			succ: e.Success, fail: e.Failure, tmo: e.Timeout})
		reply.Accepted++
	}
	if len(reply.Discarded) == 0 {
		reply.Discarded = nil
	}
	return reply
}

// liveSet returns the members targets are assigned over.
func (n *Node) liveSet() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.live
}

func subset(a, b []string) bool {
	for _, x := range a {
		if !slices.Contains(b, x) {
			return false
		}
	}
	return true
}

// updateLive recomputes the live set on the leader: itself and every
// member whose results reached it within LiveTimeout, or every member
// while it has led for less than LiveTimeout. On a follower the set comes
// from the leader's replies; until the first, it is every member.
func (n *Node) updateLive(now time.Time) {
	all := *n.members.Load()
	self := n.cfg.Store.NodeID()
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.cfg.Store.LeaderReady() {
		if len(n.live) == 0 || !subset(n.live, all) {
			n.live = all
		}
		return
	}
	if n.leading.IsZero() {
		n.leading = now
	}
	if now.Sub(n.leading) < n.cfg.LiveTimeout {
		n.live = all
		n.m.liveMembers.Set(float64(len(all)))
		return
	}
	live := make([]string, 0, len(all))
	for _, id := range all {
		if id == self || now.Sub(n.heard[id]) <= n.cfg.LiveTimeout {
			live = append(live, id)
		}
	}
	if !slices.Equal(live, n.live) {
		n.log.Info("probe assignment changed", "live", live, "members", all)
	}
	n.live = live
	n.m.liveMembers.Set(float64(len(live)))
}

// Status returns one incarnation's entry in the current status table, as
// every reader of the table sees it; false when the table does not hold
// it (yet).
func (n *Node) Status(key string, inc uint64) (status.Entry, bool) {
	pub := n.published()
	defer pub.release()
	if _, e, ok := pub.lookup(key); ok && e.Incarnation == inc {
		return e, true
	}
	return status.Entry{}, false
}

// TableVersion is the version of the status table this node publishes
// (status.Table.Version); 0 before the first build and while it serves
// the table kept on disk. A reader that derives something from the
// table's entries can keep it until this moves.
func (n *Node) TableVersion() uint64 {
	pub := n.published()
	defer pub.release()
	if pub.t == nil {
		return 0
	}
	return pub.t.Version()
}

// publication is one look at what this node publishes: the current table,
// nil before the first build and while the table is the one kept on disk
// (its slots are not this node's yet). Release it.
type publication struct {
	t *status.Table
}

// published takes the current table. A key is looked up in the table's
// own Directory, so the slot and the entry found are of one build.
func (n *Node) published() publication {
	if n.restored.Load() {
		return publication{}
	}
	return publication{t: n.cfg.Table.Acquire()}
}

func (p publication) release() {
	if p.t != nil {
		p.t.Release()
	}
}

// lookup returns key's slot and entry, whatever its incarnation; false
// when the table does not hold key. The table's Directory indexes its
// instances by name (status.Directory.SlotOfKey); the loop no longer
// publishes a key → slot map of its own beside it, which was a map entry
// an instance and a new map whenever an instance came or went.
func (p publication) lookup(key string) (int, status.Entry, bool) {
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

// zoneOf returns a member's "region/zone" as the membership records it.
func (n *Node) zoneOf(member string) string { return (*n.zones.Load())[member] }

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

// Leading reports whether this node evaluates (it holds the evidence).
func (n *Node) Leading() bool { return n.cfg.Store.LeaderReady() }
