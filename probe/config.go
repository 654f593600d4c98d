package probe

import (
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Prober. The zero value of every field but Observer
// means "use the default".
type Config struct {
	// Observer is this node's id. Every Result and Batch carries it, so
	// that the evaluator can discard results about targets not assigned
	// to it (see Assigned). Required.
	Observer string
	// Workers is the size of the worker pool: the most checks in flight at
	// once (but see CoverTimeouts). A probe that comes due while every
	// worker is busy is skipped and counted, never queued. Defaults to 64.
	Workers int
	// CoverTimeouts lets the probes in flight grow past Workers, up to
	// Workers + ⌈Σ Timeout/Interval⌉ over the targets: what the targets
	// need when none of them answers and every probe holds its worker
	// for its whole timeout. A pool sized for targets that answer in
	// milliseconds is otherwise taken whole by the probes of one zone cut
	// off (each hanging for its timeout), and the probes of every other
	// zone are skipped until their instances go unknown (field-notes H6:
	// a partitioned prober must not go blind). The probes past Workers
	// run each on a goroutine of its own; the servers set it.
	CoverTimeouts bool
	// Capacity is the most targets this node probes, and the length of
	// every Batch's Results: a batch is sized to what the node can probe,
	// not to what it probes now, so that the evaluator's work is constant
	// (Route 53's constant-work pattern, SPEC §0.6). SetTargets refuses
	// more. Defaults to 10000.
	Capacity int
	// BatchInterval is how often a Batch is published. Defaults to 1s.
	BatchInterval time.Duration
	// ConnCache is the most targets whose HTTP connection or gRPC channel
	// is kept open between probes; beyond it a probe dials afresh and
	// closes. Negative keeps none. Defaults to 1024, well under a
	// process's usual file descriptor limit.
	ConnCache int

	// Now stamps results and batches and drives the schedule's arithmetic
	// (its waits use the runtime's timers, so a test that needs fake time
	// runs under testing/synctest). Defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the probe metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Rand draws first-probe offsets and jitter. Run's goroutine is its
	// only user; do not share it. Defaults to a randomly seeded PCG.
	Rand *rand.Rand
}

// Defaults for Config (see the fields).
const (
	DefaultWorkers       = 64
	DefaultCapacity      = 10000
	DefaultBatchInterval = time.Second
	DefaultConnCache     = 1024
)

func (c *Config) setDefaults() {
	if c.Workers == 0 {
		c.Workers = DefaultWorkers
	}
	if c.Capacity == 0 {
		c.Capacity = DefaultCapacity
	}
	if c.BatchInterval == 0 {
		c.BatchInterval = DefaultBatchInterval
	}
	if c.ConnCache == 0 {
		c.ConnCache = DefaultConnCache
	}
	if c.ConnCache < 0 {
		c.ConnCache = 0
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Rand == nil {
		c.Rand = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	}
}

// Validate reports the first missing or inconsistent field.
func (c *Config) Validate() error {
	switch {
	case c.Observer == "":
		return errors.New("probe: Observer is required")
	case c.Workers < 0:
		return errors.New("probe: Workers must not be negative")
	case c.Capacity < 0:
		return errors.New("probe: Capacity must not be negative")
	case c.BatchInterval < 0:
		return errors.New("probe: BatchInterval must not be negative")
	}
	return nil
}
