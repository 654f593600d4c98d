package probe

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is the latest outcome of one target's check, as one observer saw
// it.
type Result struct {
	// TargetID is the Target's ID; empty marks an unused Batch slot.
	TargetID string
	// Observer is the id of the node that ran the check (Config.Observer).
	// The evaluator discards, and counts, a result whose observer the
	// target is not assigned to (see Assigned).
	Observer string
	// At is when the check finished, by Config.Now.
	At time.Time
	Outcome
}

// Batch is what the prober publishes every BatchInterval: the latest
// result of every target it probes, in a slice whose length is always
// Config.Capacity, so that consuming it costs the same whatever changed.
//
// A target keeps its slot (its index in Results) while it stays in the
// target set; a target that has not been probed yet, and every unused
// slot, has an empty TargetID: for the evaluator, silence. A Batch is
// never modified after it is published: the consumer owns it, until it
// hands it back with Recycle. Making one copies Capacity results of about
// 100 bytes, into a recycled batch when there is one: otherwise 1 MB of
// garbage a second at the defaults, which sets the collector's pace.
type Batch struct {
	Observer string
	// Seq numbers batches from 1; a gap means the consumer missed the
	// batches in it (each was replaced by a newer one).
	Seq uint64
	// At is when the batch was made, by Config.Now.
	At      time.Time
	Results []Result
}

// ErrCapacity is wrapped by SetTargets' error for a target set larger than
// Config.Capacity.
var ErrCapacity = errors.New("probe: more targets than Capacity")

// Prober checks a set of targets on jittered schedules with a bounded
// worker pool and publishes their latest results in fixed-size batches.
//
// SetTargets and Batches may be called from any goroutine, before or
// during Run. Run is called once.
type Prober struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics
	// check runs one probe; tests replace it before Run.
	check func(ctx context.Context, t Target, c *conn) (o Outcome, broken bool)

	batches chan *Batch   // 1-buffered, latest wins
	spare   chan *Batch   // 2-buffered: batches handed back (Recycle), or replaced before anyone took them
	update  chan struct{} // 1-buffered: pending holds a new target set
	ran     atomic.Bool

	mu      sync.Mutex
	pending []Target // guarded by mu; the latest set not yet taken by Run
	changed bool     // guarded by mu; pending is new
}

// New validates cfg, applies its defaults and returns a Prober that probes
// nothing until SetTargets and Run.
func New(cfg Config) (*Prober, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Prober{
		cfg:     cfg,
		log:     cfg.Logger.With("observer", cfg.Observer),
		metrics: m,
		check:   runCheck,
		batches: make(chan *Batch, 1),
		spare:   make(chan *Batch, 2),
		update:  make(chan struct{}, 1),
	}, nil
}

// Observer returns Config.Observer.
func (p *Prober) Observer() string { return p.cfg.Observer }

// Batches returns the channel batches are published on. It holds at most
// one batch: when the consumer has not taken the previous one, the newer
// batch replaces it and cairn_probe_batches_dropped_total counts the
// stale one, so a slow consumer never holds up probing. The channel is
// closed when Run returns.
func (p *Prober) Batches() <-chan *Batch { return p.batches }

// SetTargets replaces the set of targets to probe; the latest call wins.
// A target whose ID is already in the set keeps its schedule (and its
// batch slot); a new one is first probed at a random offset within its
// Interval; a removed one is no longer probed, its slot is emptied and its
// connection closed. The caller passes only the targets assigned to this
// node (see Assign).
//
// It refuses, changing nothing, a set with an invalid target, a duplicate
// ID, or more targets than Config.Capacity (ErrCapacity). It does not
// wait for Run to apply the set.
func (p *Prober) SetTargets(ts []Target) error {
	if len(ts) > p.cfg.Capacity {
		return fmt.Errorf("setting %d targets on a node of Capacity %d: %w", len(ts), p.cfg.Capacity, ErrCapacity)
	}
	seen := make(map[string]struct{}, len(ts))
	for _, t := range ts {
		if err := t.Validate(); err != nil {
			return err
		}
		if _, dup := seen[t.ID]; dup {
			return &TargetError{ID: t.ID, Field: "ID", Reason: "appears twice in the target set"}
		}
		seen[t.ID] = struct{}{}
	}
	p.mu.Lock()
	p.pending, p.changed = slices.Clone(ts), true
	p.mu.Unlock()
	select {
	case p.update <- struct{}{}:
	default: // Run has a wake-up pending already; it will take this set.
	}
	return nil
}

// takePending returns the latest set given to SetTargets, if Run has not
// taken it yet.
func (p *Prober) takePending() ([]Target, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ts, ok := p.pending, p.changed
	p.pending, p.changed = nil, false
	return ts, ok
}

// Run probes the targets and publishes batches until ctx is done, then
// waits for the probes in flight to end (ctx cancels them), closes every
// connection and the Batches channel, and returns nil. It starts
// Config.Workers goroutines and one scheduler (this goroutine); none per
// target. It returns an error if called twice.
func (p *Prober) Run(ctx context.Context) error {
	if !p.ran.CompareAndSwap(false, true) {
		return errors.New("probe: Run called twice")
	}
	defer close(p.batches)

	// Both channels hold Workers entries and the scheduler never has
	// more than Workers probes in flight, so no send on them blocks.
	jobs := make(chan job, p.cfg.Workers)
	dones := make(chan done, p.cfg.Workers)
	var wg sync.WaitGroup
	for range p.cfg.Workers {
		wg.Go(func() {
			for j := range jobs {
				dones <- p.work(ctx, j)
			}
		})
	}

	s := newScheduler(p, jobs)
	// A probe past the pool (Config.CoverTimeouts) runs on a goroutine
	// of its own; only this goroutine starts them, so none starts once
	// the deferred Wait below runs.
	s.spawn = func(j job) { wg.Go(func() { dones <- p.work(ctx, j) }) }
	defer func() {
		close(jobs)
		// The probes past the pool may wait to hand over their results
		// (dones holds Workers): take them while everything ends.
		ended := make(chan struct{})
		go func() { wg.Wait(); close(ended) }()
		for waiting := true; waiting; {
			select {
			case d := <-dones:
				s.finish(d)
			case <-ended:
				waiting = false
			}
		}
		for len(dones) > 0 {
			s.finish(<-dones)
		}
		s.closeAll()
	}()

	timer := time.NewTimer(0)
	defer timer.Stop()
	tick := time.NewTicker(p.cfg.BatchInterval)
	defer tick.Stop()
	if ts, ok := p.takePending(); ok {
		s.apply(ts)
	}
	for {
		s.arm(timer)
		select {
		case <-ctx.Done():
			return nil
		case <-p.update:
			if ts, ok := p.takePending(); ok {
				s.apply(ts)
			}
		case <-timer.C:
			s.dispatchDue()
		case d := <-dones:
			s.finish(d)
		case <-tick.C:
			p.publish(s.batch(p.spare))
		}
	}
}

// work runs one probe within its target's Timeout. A probe cut short by
// Run's end is not counted in the metrics: it says nothing of the target.
func (p *Prober) work(ctx context.Context, j job) done {
	d := done{e: j.e, gen: j.gen, conn: j.conn, extra: j.extra}
	c := j.conn
	if c == nil && j.t.Kind != TCP {
		// Past ConnCache: a connection for this probe alone.
		var err error
		if c, err = newConn(j.t, false); err != nil {
			d.o = Outcome{Err: "setting up the check: " + errText(err)}
		} else {
			defer c.close()
		}
	}
	if c != nil || j.t.Kind == TCP {
		pctx, cancel := context.WithTimeout(ctx, j.t.Timeout)
		d.o, d.broken = p.check(pctx, j.t, c)
		cancel()
	}
	d.at = p.cfg.Now()
	if ctx.Err() == nil {
		p.metrics.observe(j.t.Kind, d.o)
	}
	return d
}

// publish offers b to the consumer, replacing a batch it has not taken.
func (p *Prober) publish(b *Batch) {
	select {
	case p.batches <- b:
		return
	default:
	}
	// Run is the only sender, so once the stale batch is gone the
	// buffer has room (unless the consumer took it meanwhile, which
	// leaves room too).
	select {
	case old := <-p.batches:
		p.metrics.dropped.Inc()
		p.Recycle(old)
	default:
	}
	p.batches <- b
}

// Recycle hands a batch taken from Batches back to the prober, which
// writes a later batch into it. The caller must not touch b, or any
// slice of it, afterwards. Recycling is optional: a batch not handed back
// is garbage like any other.
func (p *Prober) Recycle(b *Batch) {
	if b == nil || len(b.Results) != p.cfg.Capacity {
		return
	}
	select {
	case p.spare <- b:
	default: // enough spares
	}
}
