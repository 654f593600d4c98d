package agent

import (
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/cairn-sd/cairn/internal/backoff"
	"github.com/cairn-sd/cairn/status"
)

// Config configures an Agent.
type Config struct {
	// Servers are the xDS servers' gRPC addresses (HOST:PORT), tried in
	// turn: the agent streams from one at a time and moves to the next
	// when it fails. At least one is required.
	Servers []string
	// Services are views subscribed from the start ("<ns>/<svc>"); the
	// agent adds any a caller asks about over DNS (Unheld).
	Services []string
	// NodeID, Region and Zone describe the agent's node to the servers
	// (node.id, node.locality). Region and Zone are also the place its
	// DNS answers rank tiers from (dnsserver.Config.Own).
	NodeID, Region, Zone string
	// Token, if set, is sent as "authorization: Bearer TOKEN".
	Token string
	// Path is the file the views are kept in (tablefile's format, with
	// each view's revision, version and times). Empty: nothing is kept.
	Path string
	// Table is the status table the agent fills from its views, for a
	// dnsserver to read. Required. Its tables grow with the instances
	// the views hold, up to its Capacity, when it is made with
	// status.Config.Initial below Capacity (cmd starts it at 256 slots).
	Table *status.Publisher
	// Backoff times reconnections (full jitter; package backoff).
	// Defaults to waits below 1s at first, doubling up to 30s: when a
	// server goes, its agents come back spread over a second rather
	// than at once (field notes A7), and a long outage is asked about
	// twice a minute.
	Backoff backoff.Config
	// StaleAfter is the DNS server's threshold, which the status and
	// metrics report staleness by. Defaults to 5s.
	StaleAfter time.Duration
	// AbsentTTL is how long a server's word that a service does not
	// exist is taken (NXDOMAIN meanwhile) for a name asked about over
	// DNS whose view the agent never held, once that name has been
	// unsubscribed (past MaxViews/2 such names, the oldest are): its
	// next query after AbsentTTL subscribes again. Names still
	// subscribed (those of Services, of views that went, and the newest
	// unknown ones) come as soon as their service does. Defaults to 30s.
	AbsentTTL time.Duration
	// MaxViews caps the views subscribed to: names asked about past it
	// are answered Not Ready without a subscription (field notes A4: a
	// flood of names that do not exist must not grow the agent).
	// Defaults to 4096.
	MaxViews int
	// AnswerTimeout bounds the wait for a server's first answer on a new
	// stream: past it the agent moves to the next server. Defaults to
	// 10s.
	AnswerTimeout time.Duration
	// SaveInterval is the least time between two writes of the file.
	// Defaults to 250ms.
	SaveInterval time.Duration
	// TouchInterval is how often, while a stream is open and no view
	// changes, the file is written again to record that its views are
	// still current: an agent restarted while no server answers takes
	// the age of its views from the file, and that age counts against
	// the DNS server's max-stale. Defaults to 1m.
	TouchInterval time.Duration
	// DialOptions are added to the gRPC dial options (tests; the
	// transport's credentials).
	DialOptions []grpc.DialOption
	// Keepalive times the pings that find a stream gone silent (a
	// server gone without a FIN, a partition). Defaults to a ping after
	// 30s without traffic, the stream given up 10s later; grpc-go pings
	// no more often than every 10s, and cairn's servers allow that.
	Keepalive keepalive.ClientParameters
	// NoViewMetrics leaves out the metrics of each view (its age and
	// staleness, a series per service): a server following another
	// region's views (package peer) reports them per region instead.
	NoViewMetrics bool

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}
