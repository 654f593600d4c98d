package dnsserver

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/zones"
)

// Config configures a Server.
type Config struct {
	// Zone is the zone served: apex, NS, SOA, static records, and the
	// shape of the service tree. Required.
	Zone *zones.Zone
	// Table is the status table the answers are cross-referenced with.
	// Required.
	Table *status.Publisher
	// Addr is the UDP and TCP address to listen on (SPEC §3: default
	// 127.0.0.1:8053).
	Addr string
	// Own is this server's locality: the caller's when neither EDNS
	// Client Subnet nor Subnets place it.
	Own Place
	// Subnets place callers by source (or trusted client-subnet)
	// address; the longest matching prefix wins.
	Subnets []Subnet
	// ECSTrusted are the sources whose EDNS Client Subnet option is used
	// (resolvers of the operator's). Others' ECS options do not place the
	// caller: they are echoed with scope 0 (RFC 7871 §7.2.1).
	ECSTrusted []netip.Prefix
	// StaleAfter: when the node's view of the store is older than this,
	// answers are stale (EDE 3 or 19, TTL at most 30 s). Defaults to 5s.
	StaleAfter time.Duration
	// MaxStale: past this, SERVFAIL with EDE 22. Defaults to 24h.
	MaxStale time.Duration
	// LastSync returns when this node's store view was last known to be
	// current (now on the leader, the last contact with it on a
	// follower; the last table built, if older). nil: never stale.
	LastSync func() time.Time
	// Restored reports whether the table was loaded from disk at start
	// and the store has not caught up since: every answer is then stale
	// (EDE 3), whatever the table's age (SPEC §7). nil: never.
	Restored func() bool
	// Unheld, if set, is asked about a service the table does not hold,
	// for a table that holds only some of them (an agent's, which holds
	// the views it subscribed to). It returns nil when the service will
	// not come (the answer is NXDOMAIN), else a channel closed when it
	// has come or will not: the query waits for it, at most UnheldWait,
	// and is answered then from the table of that moment — SERVFAIL with
	// EDE 14 (Not Ready), never a cached denial, if the service is still
	// not there. The strings are valid only during the call. nil: the
	// table holds every service.
	Unheld func(namespace, service string) <-chan struct{}
	// UnheldWait bounds a query's wait for an unheld service. Defaults
	// to 1s; at most MaxUnheldWaiting queries wait at once, the others
	// are answered at once.
	UnheldWait time.Duration
	// UDPSize is the EDNS UDP payload size advertised and the most a UDP
	// answer may be. Defaults to 1232.
	UDPSize uint16
	// TCPIdleTimeout closes an idle TCP connection, and bounds the wait
	// for a query on it. Defaults to 10s.
	TCPIdleTimeout time.Duration
	// TCPMaxConns caps the TCP connections open at once; past it a new
	// connection is closed as soon as it is accepted. Defaults to 1024.
	TCPMaxConns int
	// Rand returns uniform floats in [0, 1) for weighted sampling; nil
	// uses math/rand/v2. Tests pass a seeded source (it must then be safe
	// for concurrent use if queries run concurrently).
	Rand func() float64

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Place is a region and zone by name.
type Place struct{ Region, Zone string }

// Subnet places the callers of a prefix.
type Subnet struct {
	Prefix netip.Prefix
	Place
}

// The defaults.
const (
	DefaultAddr           = "127.0.0.1:8053"
	DefaultStaleAfter     = 5 * time.Second
	DefaultMaxStale       = 24 * time.Hour
	DefaultUDPSize        = 1232
	DefaultTCPIdleTimeout = 10 * time.Second
	DefaultTCPMaxConns    = 1024
	// defaultARecordLimit applies when a service's limit is unset.
	defaultARecordLimit = 8
	// staleTTL caps the TTLs of stale answers (RFC 8767 suggests 30 s).
	staleTTL = 30
)

func (c *Config) setDefaults() {
	if c.Addr == "" {
		c.Addr = DefaultAddr
	}
	if c.StaleAfter == 0 {
		c.StaleAfter = DefaultStaleAfter
	}
	if c.MaxStale == 0 {
		c.MaxStale = DefaultMaxStale
	}
	if c.UDPSize == 0 {
		c.UDPSize = DefaultUDPSize
	}
	if c.UnheldWait <= 0 {
		c.UnheldWait = time.Second
	}
	if c.TCPIdleTimeout == 0 {
		c.TCPIdleTimeout = DefaultTCPIdleTimeout
	}
	if c.TCPMaxConns == 0 {
		c.TCPMaxConns = DefaultTCPMaxConns
	}
	if c.Rand == nil {
		c.Rand = rand.Float64
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
}

func (c *Config) validate() error {
	switch {
	case c.Zone == nil:
		return errors.New("dnsserver: Zone is required")
	case c.Table == nil:
		return errors.New("dnsserver: Table is required")
	case c.StaleAfter <= 0 || c.MaxStale <= c.StaleAfter:
		return fmt.Errorf("dnsserver: StaleAfter (%v) must be positive and MaxStale (%v) longer", c.StaleAfter, c.MaxStale)
	case c.UDPSize < 512:
		return fmt.Errorf("dnsserver: UDPSize %d is below 512", c.UDPSize)
	case c.TCPMaxConns < 1:
		return fmt.Errorf("dnsserver: TCPMaxConns %d is below 1", c.TCPMaxConns)
	}
	for i, s := range c.Subnets {
		if !s.Prefix.IsValid() {
			return fmt.Errorf("dnsserver: Subnets[%d]: invalid prefix", i)
		}
	}
	return nil
}
