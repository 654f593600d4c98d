package store

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
)

// Config configures a Store. The zero value of every field but NodeID and
// RaftAddr means "use the default".
type Config struct {
	// NodeID is this server's raft id. Required.
	NodeID string
	// RaftAddr is the address raft listens on and advertises, host:port.
	// Required unless Transport is set.
	RaftAddr string
	// HTTPAddr is this node's API address, recorded in the membership so
	// that followers can forward writes to the leader.
	HTTPAddr string
	// Region and Zone are where this server runs, recorded in the
	// membership with its addresses.
	Region, Zone string
	// DataDir holds the raft log, stable store and snapshots. Empty means
	// in memory (tests only: nothing survives Close).
	DataDir string
	// Bootstrap makes a node without existing state form a new
	// single-node cluster. A node that joins an existing cluster leaves
	// it false.
	Bootstrap bool

	// HeartbeatTimeout and ElectionTimeout default to
	// DefaultElectionTimeout, LeaderLease to HeartbeatTimeout (the most
	// raft allows: a leader starved of CPU for a moment keeps its
	// place). raft randomises the first two in [x, 2x): a follower
	// stands for election between one and two HeartbeatTimeouts after
	// it last heard from the leader, and a 3-node cluster whose leader died elects a new one once both
	// survivors have given up on it (a follower that still hears from a
	// leader refuses its vote), about 2x to 3x after the death. The
	// leader steps down after LeaderLease without a quorum's answer.
	HeartbeatTimeout time.Duration
	ElectionTimeout  time.Duration
	LeaderLease      time.Duration
	// LeaseCheckpoint is how often the leader replicates lease renewals
	// (batched) and runs housekeeping. Defaults to 1s.
	LeaseCheckpoint time.Duration
	// TombstoneTTL is how long a deregistered instance is kept so that
	// its old incarnation still meets a 409. Defaults to 1h.
	TombstoneTTL time.Duration
	// SnapshotThreshold is the number of log entries between snapshots.
	// Defaults to raft's 8192.
	SnapshotThreshold uint64

	// LeaderRevision asks the leader, at its HTTP address, for its
	// revision; a follower is CaughtUp once it has applied as much. Nil
	// (tests) makes a follower CaughtUp once it has heard from a leader.
	LeaderRevision func(ctx context.Context, httpAddr string) (uint64, error)
	// ReplicationCheck is how often a follower asks the leader for its
	// revision to know how current its replica is (replication.go), and
	// how long it waits for the answer. Defaults to LeaseCheckpoint.
	ReplicationCheck time.Duration

	// RaftTLS, when set, runs raft over mutual TLS: Server is the
	// listener's config (it must require and verify the peer's
	// certificate), Client the dialler's (it presents this node's).
	RaftTLS *RaftTLS

	// Transport replaces the TCP transport (tests use raft's in-memory
	// one).
	Transport raft.Transport
	// Now defaults to time.Now.
	Now func() time.Time
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer receives the store's metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// DefaultElectionTimeout is the default HeartbeatTimeout and
// ElectionTimeout: a quarter of raft's defaults, so that a 3-node
// cluster on a LAN accepts writes again within a second of its leader's
// death at p99 (docs/benchmarks/store.md).
const DefaultElectionTimeout = 250 * time.Millisecond

func (c *Config) setDefaults() {
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = DefaultElectionTimeout
	}
	if c.ElectionTimeout == 0 {
		c.ElectionTimeout = DefaultElectionTimeout
	}
	if c.LeaderLease == 0 {
		c.LeaderLease = c.HeartbeatTimeout
	}
	if c.LeaseCheckpoint == 0 {
		c.LeaseCheckpoint = time.Second
	}
	if c.ReplicationCheck == 0 {
		c.ReplicationCheck = c.LeaseCheckpoint
	}
	if c.TombstoneTTL == 0 {
		c.TombstoneTTL = time.Hour
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

// Validate reports the first missing or inconsistent field.
func (c *Config) Validate() error {
	if c.NodeID == "" {
		return errors.New("store: NodeID is required")
	}
	if c.RaftAddr == "" && c.Transport == nil {
		return errors.New("store: RaftAddr is required")
	}
	if c.LeaderLease > c.HeartbeatTimeout {
		return errors.New("store: LeaderLease must not exceed HeartbeatTimeout")
	}
	return nil
}
