package dnsserver

import (
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
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
	// RRL limits the UDP responses each source prefix gets
	// (response-rate limiting), so that the server cannot be made to
	// flood a spoofed victim; see RRLConfig. By default it is on unless
	// Addr is a loopback address.
	RRL RRLConfig
	// Cookies answers EDNS Cookies (RFC 7873) with server cookies any
	// server sharing the secret can verify (RFC 9018); a query whose
	// server cookie verifies has proven its source address and is never
	// rate-limited. See CookieConfig. By default they are on unless Addr
	// is a loopback address.
	Cookies CookieConfig
	// Revision, if set, says the store revision of a service's view, for
	// the revision option's answer (RevisionOption): the agent's, whose
	// views each have their own. false, or nil: the table's store
	// revision.
	Revision func(namespace, service string) (uint64, bool)
	// Rand returns uniform floats in [0, 1) for weighted sampling; nil
	// uses math/rand/v2. Tests pass a seeded source (it must then be safe
	// for concurrent use if queries run concurrently).
	Rand func() float64

	Now        func() time.Time
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Mode turns one of the UDP port's protections (Config.RRL,
// Config.Cookies) on or off.
type Mode uint8

const (
	// ModeAuto, the zero value, is on unless Config.Addr's host is a
	// loopback address or "localhost": there only the host's own
	// processes can send queries, and they can flood it directly.
	ModeAuto Mode = iota
	// ModeOn is on whatever the address (a benchmark measures its cost
	// on loopback this way).
	ModeOn
	// ModeOff is off.
	ModeOff
)

// ParseMode reads "auto", "on" or "off" (a flag's value).
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto", "":
		return ModeAuto, nil
	case "on":
		return ModeOn, nil
	case "off":
		return ModeOff, nil
	}
	return ModeAuto, fmt.Errorf("dnsserver: mode %q: want auto, on or off", s)
}

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeOn:
		return "on"
	case ModeOff:
		return "off"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// enabled reports whether the mode is on for a server listening on addr.
func (m Mode) enabled(addr string) bool {
	switch m {
	case ModeOn:
		return true
	case ModeAuto:
		return !loopbackAddr(addr)
	}
	return false
}

// loopbackAddr reports whether addr (host:port) listens on loopback
// only. A wildcard ("", 0.0.0.0, ::) or a name other than localhost is
// not: it may be reachable from elsewhere.
func loopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Unmap().IsLoopback()
}

// RRLConfig configures response-rate limiting (rrl.go): each source
// prefix may get Rate UDP responses a second, Burst at once; past that,
// every Slip-th response is sent truncated (TC, the question only: the
// client asks again over TCP, which is never limited) and the others are
// dropped. A query whose server cookie verifies (Config.Cookies) is
// never limited. The state is a table of TableSize prefixes made at New:
// its memory does not grow with the number of sources.
type RRLConfig struct {
	// Mode: ModeAuto (the default) limits unless Config.Addr is a
	// loopback address; ModeOn limits on loopback too; ModeOff never.
	Mode Mode
	// Rate is the responses a second each source prefix gets, sustained.
	// Defaults to 2000 (DefaultRRLRate). At most 1e9.
	Rate int
	// Burst is the responses a prefix may get at once, after a quiet
	// spell, above the rate. Defaults to 2 × Rate. At most 2e9.
	Burst int
	// Slip: every Slip-th limited response is sent truncated, the others
	// are dropped. Defaults to 2 (DefaultRRLSlip); 1 truncates every
	// limited response; NoSlip drops them all. At most 100.
	Slip int
	// IPv4Prefix and IPv6Prefix are the lengths of the source prefixes
	// responses are counted by. Default to 24 and 56.
	IPv4Prefix, IPv6Prefix int
	// TableSize is the most source prefixes counted at once; past it, the
	// prefix that has been quiet longest in its slot's bucket is
	// forgotten. Rounded up to a power of two of 3-prefix buckets (64
	// octets each). Defaults to 49,152 (1 MiB). At most 1<<24.
	TableSize int
	// Exempt sources are never limited: the operator's resolvers, which
	// ask for many clients. (A spoofed source in them is not limited
	// either: list only addresses that answer to you.)
	Exempt []netip.Prefix
}

// NoSlip as RRLConfig.Slip drops every limited response.
const NoSlip = -1

// CookieConfig configures EDNS Cookies (cookie.go).
type CookieConfig struct {
	// Mode: ModeAuto (the default) answers cookies unless Config.Addr is
	// a loopback address; ModeOn on loopback too; ModeOff ignores the
	// COOKIE option as a server without cookies does.
	Mode Mode
	// Secret is the 16-octet key server cookies are made and checked
	// with. Servers one client may reach at one address (anycast, a
	// load balancer's pool, a cluster's replicas) share it, so that a
	// cookie one of them made verifies on the others (RFC 9018). nil: a
	// random secret made at New; cookies then do not outlive the process,
	// and a client that reaches another replica is answered with a fresh
	// cookie (and may be rate-limited until it sends that one back).
	Secret []byte
	// PreviousSecret, optional, is accepted as well but never used to
	// make a cookie: to roll the secret, give every replica the new one
	// with the old one here, and drop the old one an hour later, when no
	// cookie it made is still valid (RFC 9018 §5).
	PreviousSecret []byte
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
	DefaultRRLRate        = 2000
	DefaultRRLSlip        = 2
	DefaultRRLIPv4Prefix  = 24
	DefaultRRLIPv6Prefix  = 56
	DefaultRRLTableSize   = 49152
	// maxRRLRate keeps the interval between responses at 1 ns or more.
	maxRRLRate       = 1_000_000_000
	maxRRLTableSize  = 1 << 24
	maxRRLSlip       = 100
	cookieSecretSize = 16
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
	r := &c.RRL
	if r.Rate == 0 {
		r.Rate = DefaultRRLRate
	}
	if r.Burst == 0 {
		r.Burst = 2 * r.Rate
	}
	if r.Slip == 0 {
		r.Slip = DefaultRRLSlip
	}
	if r.IPv4Prefix == 0 {
		r.IPv4Prefix = DefaultRRLIPv4Prefix
	}
	if r.IPv6Prefix == 0 {
		r.IPv6Prefix = DefaultRRLIPv6Prefix
	}
	if r.TableSize == 0 {
		r.TableSize = DefaultRRLTableSize
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
	if err := c.RRL.validate(); err != nil {
		return err
	}
	if err := c.Cookies.validate(); err != nil {
		return err
	}
	for i, s := range c.Subnets {
		if !s.Prefix.IsValid() {
			return fmt.Errorf("dnsserver: Subnets[%d]: invalid prefix", i)
		}
	}
	return nil
}

func (r *RRLConfig) validate() error {
	switch {
	case r.Mode > ModeOff:
		return fmt.Errorf("dnsserver: RRL.Mode %v", r.Mode)
	case r.Rate < 1 || r.Rate > maxRRLRate:
		return fmt.Errorf("dnsserver: RRL.Rate %d is out of range 1-%d", r.Rate, maxRRLRate)
	case r.Burst < 1 || r.Burst > 2*maxRRLRate:
		return fmt.Errorf("dnsserver: RRL.Burst %d is out of range 1-%d", r.Burst, 2*maxRRLRate)
	case r.Slip != NoSlip && (r.Slip < 1 || r.Slip > maxRRLSlip):
		return fmt.Errorf("dnsserver: RRL.Slip %d is out of range 1-%d (or NoSlip)", r.Slip, maxRRLSlip)
	case r.IPv4Prefix < 1 || r.IPv4Prefix > 32:
		return fmt.Errorf("dnsserver: RRL.IPv4Prefix %d is out of range 1-32", r.IPv4Prefix)
	case r.IPv6Prefix < 1 || r.IPv6Prefix > 128:
		return fmt.Errorf("dnsserver: RRL.IPv6Prefix %d is out of range 1-128", r.IPv6Prefix)
	case r.TableSize < 1 || r.TableSize > maxRRLTableSize:
		return fmt.Errorf("dnsserver: RRL.TableSize %d is out of range 1-%d", r.TableSize, maxRRLTableSize)
	}
	for i, p := range r.Exempt {
		if !p.IsValid() {
			return fmt.Errorf("dnsserver: RRL.Exempt[%d]: invalid prefix", i)
		}
	}
	return nil
}

func (c *CookieConfig) validate() error {
	switch {
	case c.Mode > ModeOff:
		return fmt.Errorf("dnsserver: Cookies.Mode %v", c.Mode)
	case c.Secret != nil && len(c.Secret) != cookieSecretSize:
		return fmt.Errorf("dnsserver: Cookies.Secret is %d octets, want %d", len(c.Secret), cookieSecretSize)
	case c.PreviousSecret != nil && len(c.PreviousSecret) != cookieSecretSize:
		return fmt.Errorf("dnsserver: Cookies.PreviousSecret is %d octets, want %d", len(c.PreviousSecret), cookieSecretSize)
	case c.PreviousSecret != nil && c.Secret == nil:
		return errors.New("dnsserver: Cookies.PreviousSecret without a Secret")
	}
	return nil
}
