package callers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// DNSConfig is a DNS caller: a legacy client behind a caching stub. It
// asks Server for the A records of Query, keeps the answer for its TTL
// (the smallest of the records', as a caching stub does; 0: asked again
// at the next request), and sends each request to the next address of
// the answer in turn, on Port. A records need nothing but the service's
// port, which a legacy client is configured with.
type DNSConfig struct {
	Config
	// Server is the DNS address asked, "host:port": a cairn server's
	// --dns-addr (DNSDirect) or an agent's (DNSAgent). Required.
	Server string
	// Query is the name asked: the service's, <svc>.<ns>.svc.<domain>.
	// Required.
	Query string
	// Port is the instances' port of the service. Required.
	Port int
	// Protocol is what the instances speak. Required.
	Protocol Protocol
	// Source, if set, is the address the caller's queries and requests
	// come from: 127.Z.x.y places it in zone Z of a server run with
	// --subnet.
	Source net.IP
	// ServeStale keeps using the last answer while the server does not
	// answer (RFC 8767), asking again at most once a second; without it,
	// a request whose resolution fails is a failure.
	ServeStale bool
}

// resolver is a caching stub for one name. One query runs at a time,
// without the lock: a request that needs an answer waits for it as long
// as its own deadline allows; with ServeStale and a previous answer, no
// request waits: the stale answer serves while one query refreshes it in
// the background.
type resolver struct {
	cfg     DNSConfig
	client  *dns.Client
	now     func() time.Time
	timeout time.Duration // of a query: the caller's request timeout
	// answered is told every answer: the caller's view, and the channels
	// to keep.
	answered func(at time.Time, addrs []string)
	// ctx bounds the queries; cancelled, and the queries waited for, by
	// stop.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	addrs   []string // nil: no answer
	expires time.Time
	next    int
	query   chan struct{} // closed when the running query ends; nil if none
	err     error         // of the last query
}

// NewDNS returns a DNS caller of kind DNSDirect or DNSAgent.
func NewDNS(kind Kind, cfg DNSConfig) (*Caller, error) {
	if kind != DNSDirect && kind != DNSAgent {
		return nil, fmt.Errorf("callers: a DNS caller is of kind %s or %s, got %q", DNSDirect, DNSAgent, kind)
	}
	if _, _, err := net.SplitHostPort(cfg.Server); err != nil {
		return nil, fmt.Errorf("callers: DNSConfig.Server must be host:port, got %q", cfg.Server)
	}
	if _, ok := dns.IsDomainName(cfg.Query); !ok || cfg.Query == "" {
		return nil, fmt.Errorf("callers: DNSConfig.Query must be a domain name, got %q", cfg.Query)
	}
	if cfg.Port < 1 || cfg.Port > 65535 {
		return nil, fmt.Errorf("callers: DNSConfig.Port must be between 1 and 65535, got %d", cfg.Port)
	}
	snd, err := newSender(cfg.Protocol, cfg.Source, cfg.SourceFor, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	r := &resolver{cfg: cfg, client: &dns.Client{Net: "udp"}}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	if cfg.Source != nil {
		r.client.Dialer = &net.Dialer{LocalAddr: &net.UDPAddr{IP: cfg.Source}}
	}
	var c *Caller
	c, err = newCaller(cfg.Config, kind, func(ctx context.Context) attempt {
		addr, err := r.pick(ctx)
		if err != nil {
			return attempt{err: fmt.Errorf("resolving %s: %w", cfg.Query, err)}
		}
		who, err := snd.send(ctx, addr)
		return attempt{instance: who, addr: addr, err: err}
	}, func() { r.stop(); snd.close() })
	if err != nil {
		r.cancel()
		return nil, err
	}
	r.now, r.timeout = c.cfg.Now, c.cfg.Timeout
	r.answered = func(at time.Time, addrs []string) {
		c.rec.view(at, addrs)
		snd.retain(addrs)
	}
	return c, nil
}

// pick returns the address to send the next request to, resolving
// first when the cached answer has expired (and ServeStale has no
// previous answer to serve meanwhile).
func (r *resolver) pick(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for waited := false; ; waited = true {
		fresh := r.addrs != nil && r.now().Before(r.expires)
		stale := r.cfg.ServeStale && len(r.addrs) > 0
		if !fresh && (stale || !waited) && r.query == nil {
			r.startQuery()
		}
		// The answer this request waited for serves it even with a TTL
		// of 0.
		answered := waited && r.err == nil && r.addrs != nil
		switch {
		case fresh || stale || answered:
			if len(r.addrs) == 0 {
				return "", errors.New("no addresses")
			}
			a := r.addrs[r.next%len(r.addrs)]
			r.next++
			return a, nil
		case waited:
			if r.err != nil {
				return "", r.err
			}
			return "", errors.New("no answer")
		}
		q := r.query
		r.mu.Unlock()
		select {
		case <-q:
		case <-ctx.Done():
			r.mu.Lock()
			return "", ctx.Err()
		}
		r.mu.Lock()
	}
}

// startQuery asks the server in the background, bounded by the caller's
// request timeout. r.mu is held.
func (r *resolver) startQuery() {
	done := make(chan struct{})
	r.query = done
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
		addrs, ttl, err := r.resolve(ctx)
		cancel()
		r.mu.Lock()
		defer r.mu.Unlock()
		now := r.now() // the answer is kept for its TTL from its arrival
		r.err = err
		switch {
		case err == nil:
			r.answered(now, addrs)
			r.addrs, r.expires = addrs, now.Add(ttl)
		case r.cfg.ServeStale && len(r.addrs) > 0:
			r.expires = now.Add(time.Second) // asked again in a second
		default:
			r.addrs = nil
		}
		r.query = nil
		close(done)
	}()
}

// stop ends the queries and waits for them.
func (r *resolver) stop() {
	r.cancel()
	r.wg.Wait()
}

// resolve asks the server for the name's A records (over TCP when the
// answer is truncated) and returns them as host:port, and their TTL.
// An empty answer (NODATA, or every instance withdrawn) is an answer.
func (r *resolver) resolve(ctx context.Context) ([]string, time.Duration, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(r.cfg.Query), dns.TypeA)
	m.SetEdns0(1232, false)
	in, _, err := r.client.ExchangeContext(ctx, m, r.cfg.Server)
	if err == nil && in.Truncated {
		tc := &dns.Client{Net: "tcp"}
		if r.cfg.Source != nil {
			tc.Dialer = &net.Dialer{LocalAddr: &net.TCPAddr{IP: r.cfg.Source}}
		}
		in, _, err = tc.ExchangeContext(ctx, m, r.cfg.Server)
	}
	if err != nil {
		return nil, 0, err
	}
	if in.Rcode != dns.RcodeSuccess && in.Rcode != dns.RcodeNameError {
		return nil, 0, fmt.Errorf("rcode %s", dns.RcodeToString[in.Rcode])
	}
	port := strconv.Itoa(r.cfg.Port)
	var addrs []string
	ttl := uint32(0)
	for _, rr := range in.Answer {
		a, ok := rr.(*dns.A)
		if !ok || !strings.EqualFold(a.Hdr.Name, dns.Fqdn(r.cfg.Query)) {
			continue
		}
		if addrs == nil || a.Hdr.Ttl < ttl {
			ttl = a.Hdr.Ttl
		}
		addrs = append(addrs, net.JoinHostPort(a.A.String(), port))
	}
	if addrs == nil {
		addrs = []string{}
		ttl = negativeTTL(in)
	}
	return addrs, time.Duration(ttl) * time.Second, nil
}

// negativeTTL is how long an empty answer is kept: the SOA's minimum,
// capped by the SOA record's own TTL (RFC 2308).
func negativeTTL(in *dns.Msg) uint32 {
	for _, rr := range in.Ns {
		if soa, ok := rr.(*dns.SOA); ok {
			return min(soa.Minttl, soa.Hdr.Ttl)
		}
	}
	return 0
}
