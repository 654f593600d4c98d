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

// resolver is a caching stub for one name.
type resolver struct {
	cfg    DNSConfig
	client *dns.Client
	now    func() time.Time
	// answered is told every answer: the caller's view, and the channels
	// to keep.
	answered func(at time.Time, addrs []string)

	mu      sync.Mutex
	addrs   []string
	expires time.Time
	next    int
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
	snd, err := newSender(cfg.Protocol, cfg.Source, cfg.Timeout)
	if err != nil {
		return nil, err
	}
	r := &resolver{cfg: cfg, client: &dns.Client{Net: "udp"}}
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
	}, snd.close)
	if err != nil {
		return nil, err
	}
	r.now = c.cfg.Now
	r.answered = func(at time.Time, addrs []string) {
		c.rec.view(at, addrs)
		snd.retain(addrs)
	}
	return c, nil
}

// pick returns the address to send the next request to, resolving
// first when the cached answer has expired.
func (r *resolver) pick(ctx context.Context) (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if r.addrs == nil || !now.Before(r.expires) {
		addrs, ttl, err := r.resolve(ctx)
		switch {
		case err == nil:
			r.answered(now, addrs)
			r.addrs, r.expires = addrs, now.Add(ttl)
		case r.cfg.ServeStale && len(r.addrs) > 0:
			r.expires = now.Add(time.Second)
		default:
			r.addrs = nil
			return "", err
		}
	}
	if len(r.addrs) == 0 {
		return "", errors.New("no addresses")
	}
	a := r.addrs[r.next%len(r.addrs)]
	r.next++
	return a, nil
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
