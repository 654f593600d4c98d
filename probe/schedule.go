package probe

import (
	"container/heap"
	"math"
	"slices"
	"time"
)

// entry is one target's schedule. The scheduler (Run's goroutine) owns
// every field; a worker sees only the job made from it.
type entry struct {
	t     Target
	due   time.Time // when the next probe is due
	index int       // in the scheduler's heap
	slot  int       // in scheduler.latest and in every Batch
	// gen counts changes of what is probed (kind, address, path,
	// service): a probe started before one is discarded.
	gen  uint64
	busy bool  // a probe is in flight
	gone bool  // removed from the target set
	conn *conn // cached connection; nil when none
}

// job is one probe handed to the worker pool.
type job struct {
	e    *entry // identifies the schedule only: workers never touch it
	gen  uint64
	t    Target
	conn *conn // nil: the worker makes a one-shot connection
	// extra: run past the pool (Config.CoverTimeouts), on a goroutine
	// of its own.
	extra bool
}

// done is a finished probe, handed back to the scheduler.
type done struct {
	e      *entry
	gen    uint64
	conn   *conn // the job's conn
	o      Outcome
	broken bool // conn should not be reused
	at     time.Time
	extra  bool // the job's
}

// scheduler holds the state of Run: the schedules in a heap ordered by due
// time, the latest result per batch slot, and the cached connections. It
// is used by Run's goroutine alone.
type scheduler struct {
	p       *Prober
	jobs    chan<- job
	entries map[string]*entry
	queue   dueHeap
	latest  []Result // len Capacity; indexed by entry.slot
	free    []int    // unused slots, a stack
	busy    int      // probes in flight
	pooled  int      // of which on the worker pool
	conns   int      // cached connections open
	seq     uint64   // last Batch.Seq
	// limit is the most probes in flight: Workers, and with
	// CoverTimeouts what the targets' timeouts need (apply).
	limit int
	// spawn runs a job past the pool, on a goroutine of its own.
	spawn func(job)
}

func newScheduler(p *Prober, jobs chan<- job) *scheduler {
	s := &scheduler{
		p:       p,
		jobs:    jobs,
		entries: map[string]*entry{},
		latest:  make([]Result, p.cfg.Capacity),
		free:    make([]int, p.cfg.Capacity),
		limit:   p.cfg.Workers,
	}
	for i := range s.free {
		s.free[i] = p.cfg.Capacity - 1 - i // pop slot 0 first
	}
	return s
}

// apply makes ts, already validated by SetTargets, the target set.
func (s *scheduler) apply(ts []Target) {
	now := s.p.cfg.Now()
	want := make(map[string]struct{}, len(ts))
	for _, t := range ts {
		want[t.ID] = struct{}{}
	}
	// Remove first, so that a full set of new targets finds free slots.
	removed, added := 0, 0
	for id, e := range s.entries {
		if _, ok := want[id]; !ok {
			s.remove(e)
			removed++
		}
	}
	for _, t := range ts {
		if e, ok := s.entries[t.ID]; ok {
			s.update(e, t, now)
			continue
		}
		s.add(t, now)
		added++
	}
	s.p.metrics.targets.Set(float64(len(s.entries)))
	s.limit = s.p.cfg.Workers
	if s.p.cfg.CoverTimeouts {
		need := 0.0
		for _, e := range s.entries {
			need += float64(e.t.Timeout) / float64(e.t.Interval)
		}
		s.limit += int(math.Ceil(need))
	}
	if added > 0 || removed > 0 {
		s.p.log.Info("probe targets changed", "targets", len(s.entries), "added", added, "removed", removed)
	}
}

func (s *scheduler) add(t Target, now time.Time) {
	slot := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	// The first probe at a random offset within the interval spreads the
	// probes of targets added together across it.
	e := &entry{t: t, due: now.Add(s.offset(t.Interval)), slot: slot}
	s.entries[t.ID] = e
	heap.Push(&s.queue, e)
}

func (s *scheduler) remove(e *entry) {
	heap.Remove(&s.queue, e.index)
	delete(s.entries, e.t.ID)
	s.latest[e.slot] = Result{}
	s.free = append(s.free, e.slot)
	e.gone = true
	if !e.busy { // else finish closes it
		s.dropConn(e)
	}
}

// update applies a new version of a target already in the set. The
// schedule is kept; only a shortened Interval that leaves the next probe
// more than a new interval away moves it (to a random offset within the
// new interval).
func (s *scheduler) update(e *entry, t Target, now time.Time) {
	old := e.t
	e.t = t
	if t.Kind != old.Kind || t.Addr != old.Addr || t.Path != old.Path || t.Service != old.Service {
		// The last result, and a probe in flight, are about something
		// else now.
		e.gen++
		s.latest[e.slot] = Result{}
	}
	if t.Kind != old.Kind || t.Addr != old.Addr || t.Interval != old.Interval || t.Timeout != old.Timeout {
		// The connection goes elsewhere or has the old timeouts.
		if e.busy {
			e.conn = nil // finish closes the job's conn, no longer e's
		} else {
			s.dropConn(e)
		}
	}
	if t.Interval < old.Interval && e.due.After(now.Add(t.Interval)) {
		e.due = now.Add(s.offset(t.Interval))
		heap.Fix(&s.queue, e.index)
	}
}

// dispatchDue starts, or skips, every probe that is due, and schedules
// each target's next one.
func (s *scheduler) dispatchDue() {
	now := s.p.cfg.Now()
	for len(s.queue) > 0 && !s.queue[0].due.After(now) {
		e := s.queue[0]
		s.dispatch(e)
		next := e.due.Add(s.jittered(e.t.Interval))
		if !next.After(now) {
			// Far behind (the process was stopped, say): start afresh
			// rather than catch up in a burst.
			next = now.Add(1 + s.offset(e.t.Interval))
		}
		e.due = next
		heap.Fix(&s.queue, 0)
	}
}

// dispatch hands e's probe to an idle worker, or past the pool up to the
// limit (Config.CoverTimeouts). With the limit reached, or with e's
// previous probe still running, the probe is skipped and counted: there
// is no queue to grow.
func (s *scheduler) dispatch(e *entry) {
	switch {
	case e.busy:
		s.p.metrics.skipped[skipInFlight].Inc()
		return
	case s.busy >= s.limit:
		s.p.metrics.skipped[skipBusy].Inc()
		return
	}
	if e.conn == nil && e.t.Kind != TCP && s.conns < s.p.cfg.ConnCache {
		if c, err := newConn(e.t, true); err == nil {
			e.conn = c
			s.conns++
		}
		// else the worker tries a one-shot connection and reports why
		// that fails.
	}
	j := job{e: e, gen: e.gen, t: e.t, conn: e.conn}
	if s.pooled < s.p.cfg.Workers {
		s.jobs <- j // never blocks: fewer than Workers on the pool
		s.pooled++
	} else {
		j.extra = true
		s.spawn(j)
	}
	e.busy = true
	s.busy++
}

// finish records a finished probe's result, unless its target has gone
// or changed meanwhile, and closes its connection if that is no longer
// wanted.
func (s *scheduler) finish(d done) {
	s.busy--
	if !d.extra {
		s.pooled--
	}
	e := d.e
	e.busy = false
	if d.conn != nil && (e.gone || d.broken || e.conn != d.conn) {
		d.conn.close()
		s.conns--
		if e.conn == d.conn {
			e.conn = nil
		}
	}
	if e.gone || d.gen != e.gen {
		return
	}
	s.latest[e.slot] = Result{TargetID: e.t.ID, Observer: s.p.cfg.Observer, At: d.at, Outcome: d.o}
}

func (s *scheduler) dropConn(e *entry) {
	if e.conn != nil {
		e.conn.close()
		s.conns--
		e.conn = nil
	}
}

// closeAll closes every cached connection; Run calls it once no probe is
// in flight.
func (s *scheduler) closeAll() {
	for _, e := range s.entries {
		s.dropConn(e)
	}
}

// batch copies the latest results into a Batch, a spare one if there is
// one: Capacity results, whatever the number of targets.
func (s *scheduler) batch(spare <-chan *Batch) *Batch {
	s.seq++
	var b *Batch
	select {
	case b = <-spare:
		copy(b.Results, s.latest)
	default:
		b = &Batch{Results: slices.Clone(s.latest)}
	}
	b.Observer, b.Seq, b.At = s.p.cfg.Observer, s.seq, s.p.cfg.Now()
	return b
}

// arm sets t to fire when the earliest probe is due.
func (s *scheduler) arm(t *time.Timer) {
	if len(s.queue) == 0 {
		t.Stop()
		return
	}
	t.Reset(max(s.queue[0].due.Sub(s.p.cfg.Now()), 0))
}

// offset returns a duration in [0, d).
func (s *scheduler) offset(d time.Duration) time.Duration {
	return time.Duration(s.p.cfg.Rand.Int64N(int64(d)))
}

// jittered returns d ± up to 10%, so that targets added together drift
// apart rather than stay in lock-step.
func (s *scheduler) jittered(d time.Duration) time.Duration {
	j := int64(d / 10)
	return d + time.Duration(s.p.cfg.Rand.Int64N(2*j+1)-j)
}

// dueHeap orders entries by due time (container/heap).
type dueHeap []*entry

func (h dueHeap) Len() int { return len(h) }
func (h dueHeap) Less(i, j int) bool {
	if h[i].due.Equal(h[j].due) {
		return h[i].slot < h[j].slot
	}
	return h[i].due.Before(h[j].due)
}
func (h dueHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *dueHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
