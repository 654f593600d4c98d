package health

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/internal/pace"
	"github.com/cairn-sd/cairn/probe"
	"github.com/cairn-sd/cairn/publish"
	"github.com/cairn-sd/cairn/store"
	"github.com/cairn-sd/cairn/wire"
)

// Config configures a Node.
type Config struct {
	// Store is this node's store replica. Required.
	Store *store.Store
	// Publish publishes this node's status table: its loop runs the
	// Node's round, and its catalog is the store the round reads.
	// Required.
	Publish *publish.Node
	// Prober is this node's prober, whose batches the Node consumes and
	// whose targets it sets. nil: the node probes nothing (it may still
	// evaluate, as leader, with the results others send it).
	Prober *probe.Prober
	// Push delivers this node's probe results to the leader when this
	// node is a follower, and returns the leader's reply. nil: a follower
	// drops its results (counted).
	Push func(ctx context.Context, r wire.ProbeReport) (wire.ProbeReply, error)
	// Replicas is how many nodes probe each target. Defaults to 2.
	Replicas int
	// LiveTimeout: a member whose probe results have not reached the
	// leader for this long is left out of the assignment, so its targets
	// move to live nodes. Defaults to 5s.
	LiveTimeout time.Duration
	// OutcomeHorizon: a caller may report on an endpoint that was
	// published within this long; reports about endpoints it was never
	// served are discarded. Defaults to 2m.
	OutcomeHorizon time.Duration
	// MaxOutcomeObservers bounds the callers whose latest outcomes are
	// kept per instance; the oldest is dropped. Defaults to 16.
	MaxOutcomeObservers int
	// Slice is how long the round works (evaluating) before it pauses,
	// so that a server on one core keeps answering queries: see package
	// pace. Defaults to pace.DefaultSlice; negative turns pacing off. It
	// is timed with Now. The publisher's own work is paced by its Config.
	Slice time.Duration

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// The defaults.
const (
	DefaultReplicas            = 2
	DefaultLiveTimeout         = 5 * time.Second
	DefaultOutcomeHorizon      = 2 * time.Minute
	DefaultMaxOutcomeObservers = 16
)

func (c *Config) setDefaults() {
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.LiveTimeout == 0 {
		c.LiveTimeout = DefaultLiveTimeout
	}
	if c.OutcomeHorizon == 0 {
		c.OutcomeHorizon = DefaultOutcomeHorizon
	}
	if c.MaxOutcomeObservers == 0 {
		c.MaxOutcomeObservers = DefaultMaxOutcomeObservers
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
		return errors.New("health: Store is required")
	case c.Publish == nil:
		return errors.New("health: Publish is required")
	case c.Replicas < 1:
		return errors.New("health: Replicas must be at least 1")
	case c.LiveTimeout <= 0, c.OutcomeHorizon <= 0, c.MaxOutcomeObservers < 1:
		return errors.New("health: LiveTimeout, OutcomeHorizon and MaxOutcomeObservers must be positive")
	}
	return nil
}
