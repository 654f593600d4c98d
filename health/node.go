package health

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cairn-sd/cairn/eval"
	"github.com/cairn-sd/cairn/internal/pace"
	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/publish"
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

	// pub publishes the table; its loop runs the round. Its catalog is
	// the store as this node's loop reads it.
	pub *publish.Node

	// Owned by the loop.
	membersRev uint64 // the catalog revision members were read at
	states     map[wire.ServiceKey]*eval.State
	targets    []probe.Target

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

// New validates cfg and returns a Node; Run starts it, and the
// publisher's loop with it.
func New(cfg Config) (*Node, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger.With("component", "health"),
		m:        newMetrics(cfg.Registerer),
		evidence: map[string]*instEvidence{},
		heard:    map[string]time.Time{},
		pacer:    pace.New(cfg.Slice, pace.DefaultPause, cfg.Now),
	}
	n.pub = cfg.Publish
	none := []string{}
	n.members.Store(&none)
	noZones := map[string]string{}
	n.zones.Store(&noZones)
	return n, nil
}

// Run runs the publisher's loop (publish.Node.Run) with this node's
// round in it, and the prober if there is one, until ctx is done. The
// loop builds a first table at once, so that the servers reading the
// table have one to read. Config.Publish is run by no one else.
func (n *Node) Run(ctx context.Context) error {
	// Whatever ends the loop ends the prober too, a panic included:
	// waiting for a prober still running would hang the panic (the node
	// serving its last table, stale, and saying nothing) instead of
	// letting it crash the process.
	ctx, cancel := context.WithCancel(ctx)
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
				p.Recycle(b) // handleBatch keeps nothing of it
			}
		}()
	}
	defer wg.Wait()
	defer cancel() // before the Wait
	return n.pub.Run(ctx, n.round)
}

// Tick runs one round of the publisher's loop with this node's work in
// it: targets, evaluation (on the leader), commit, and the table. Run
// runs the loop; tests may call Tick directly (never concurrently with
// Run).
func (n *Node) Tick(ctx context.Context) { n.pub.Tick(ctx, n.round) }

// round is this node's part of the loop's round (a publish.Round),
// between the catalog's refresh and the table's build: targets and, on
// the leader, evaluation and commit.
func (n *Node) round(ctx context.Context, now time.Time) {
	n.updateMembers()
	leading := n.cfg.Store.LeaderReady()
	if leading {
		// The withdrawals applied during the refresh, now rather than
		// after the evaluation, the second refresh and the build: some
		// 100 ms at 10,000 instances on a busy host. The leader's round
		// refreshes again before it builds (below), so this may publish.
		n.pub.PublishPending(ctx)
	}
	n.pub.Enter(publish.PhaseEvaluate)
	n.updateLive(now)
	n.updateTargets()
	if leading {
		n.evaluate(ctx, now)
		// The withdrawals applied during the evaluation's last slice: a
		// service of 10,000 instances is one slice of some 10 ms.
		n.pub.PublishPending(ctx)
		// Build from the replica as it is now, not as the round found
		// it: with what the round committed, and with what was applied
		// while it ran. The round publishes withdrawals (PublishPending)
		// in tables stamped with the newer revision; a table built from
		// the older catalog would put the withdrawn back into rotation
		// until the next round, and its revision would go backwards.
		// Refresh does nothing if nothing changed.
		n.pub.Enter(publish.PhaseRefresh)
		n.pub.Refresh()
		n.updateMembers()
	} else {
		// A new term starts from the committed verdicts, and with every
		// member live for LiveTimeout. Reset both whatever the last
		// round left: a round whose commit failed (as it does when
		// leadership is lost) has already cleared states.
		n.states, n.aside = nil, nil
		// The leader's gauges are the leader's: a node that is not
		// leading (a deposed leader too) exports 0, so that an alert
		// on their max over the servers follows whoever leads.
		n.m.disregarded.Set(0)
		n.m.setAside.Set(0)
		n.m.liveMembers.Set(0)
		n.mu.Lock()
		n.leading = time.Time{}
		n.mu.Unlock()
	}
}

// updateMembers re-reads the cluster's members when the catalog's
// revision moved: the probe assignment is over them.
func (n *Node) updateMembers() {
	rev := n.pub.Catalog().Rev
	if rev == n.membersRev && n.membersRev != 0 {
		return
	}
	ms, err := n.cfg.Store.Members()
	if err != nil {
		return
	}
	n.membersRev = rev
	ids := make([]string, 0, len(ms))
	zones := make(map[string]string, len(ms))
	for _, m := range ms {
		ids = append(ids, m.NodeID)
		zones[m.NodeID] = m.Region + "/" + m.Zone
	}
	sort.Strings(ids)
	n.members.Store(&ids)
	n.zones.Store(&zones)
}

// handleBatch passes one of this node's probe batches to the leader.
func (n *Node) handleBatch(ctx context.Context, b *probe.Batch) {
	// The report holds the slots in use, not the batch's Capacity: a
	// report sized to the batch made about 1.3 MB of garbage a second at
	// the defaults whatever the node probed, and the collector's pace
	// follows the garbage.
	used := 0
	for i := range b.Results {
		if b.Results[i].TargetID != "" {
			used++
		}
	}
	r := wire.ProbeReport{Observer: b.Observer, Seq: b.Seq, Results: make([]wire.ProbeResult, 0, used)}
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
	ctx, cancel := context.WithTimeout(ctx, max(n.pub.Interval(), time.Second))
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
	pub := n.pub.Published()
	defer pub.Release()
	n.mu.Lock()
	defer n.mu.Unlock()
	if r.Observer != "" {
		n.heard[r.Observer] = now
	}
	live := n.live
	var reply wire.ProbeReply
	for _, res := range r.Results {
		key, inc, ok := parseTarget(res.Target)
		_, e, known := pub.Lookup(key)
		same := known && e.Incarnation == inc
		switch {
		case !ok || r.Observer == "":
			n.m.discarded.WithLabelValues("malformed").Inc()
		case !probe.AssignedZoned(res.Target, r.Observer, live, zoneOf, n.cfg.Replicas) &&
			!probe.AssignedZoned(res.Target, r.Observer, all, zoneOf, n.cfg.Replicas):
			n.m.discarded.WithLabelValues("unassigned").Inc()
		case res.At.After(now.Add(n.pub.Interval())):
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
	pub := n.pub.Published()
	defer pub.Release()
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, e := range r.Endpoints {
		key := e.Key().String()
		slot, ent, ok := pub.Lookup(key)
		switch {
		case !ok:
			discard("unknown_endpoint")
			continue
		case ent.Incarnation != e.Incarnation:
			discard("stale_incarnation")
			continue
		}
		if s := n.pub.ServedAt(slot); s == 0 || now.Sub(time.Unix(0, s)) > n.cfg.OutcomeHorizon {
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

// zoneOf returns a member's "region/zone" as the membership records it.
func (n *Node) zoneOf(member string) string { return (*n.zones.Load())[member] }

// Leading reports whether this node evaluates (it holds the evidence).
func (n *Node) Leading() bool { return n.cfg.Store.LeaderReady() }
