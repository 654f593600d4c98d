package publish

import (
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/internal/pace"
	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/tablefile"
	"github.com/cairn-sd/cairn/store"
)

// Config configures a Node.
type Config struct {
	// Store is this node's store replica. Required.
	Store *store.Store
	// Table is the status table this node publishes. Required.
	Table *status.Publisher
	// Interval is the table's cadence: a table is built every Interval
	// whatever changed. Defaults to 1s.
	Interval time.Duration
	// Restore is the table this node published before it last stopped
	// (tablefile.Load), or nil. New publishes it at once, and the node
	// serves it, stale, until its store replica has caught up with a
	// leader: a replica restarted without quorum holds only its latest
	// raft snapshot, and a table built from it would drop names the node
	// served before (SPEC §7).
	Restore *tablefile.Snapshot
	// Slice is how long the loop works (refreshing the catalog, building
	// the table) before it pauses, so that a server on one core keeps
	// answering queries: see package pace. Defaults to pace.DefaultSlice;
	// negative turns pacing off. It is timed with Now.
	Slice time.Duration
	// Peers, if set, gives the other regions' instances of the services
	// the store holds (package peer), laid out in the table after the
	// store's own. nil: none.
	Peers Peers
	// Signal, if set, gives the failovers of the out-of-band signal
	// (package failover): applied to the table at each build as the
	// store's are, without the store. nil: none.
	Signal Signal
	// OnPhase, if set, is called on the loop's goroutine each time the
	// loop enters another phase of its round (see Phase), before the
	// phase's work: for benches and tests that time what happens in
	// each. It must return at once. nil: nothing is called.
	OnPhase func(Phase)

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// DefaultInterval is Config.Interval's default.
const DefaultInterval = time.Second

func (c *Config) setDefaults() {
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Slice == 0 {
		c.Slice = pace.DefaultSlice
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	switch {
	case c.Store == nil:
		return errors.New("publish: Store is required")
	case c.Table == nil:
		return errors.New("publish: Table is required")
	case c.Interval < 10*time.Millisecond:
		return errors.New("publish: Interval must be at least 10ms")
	}
	return nil
}
