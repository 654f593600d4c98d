package callers

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// EnvoyConfig is an Envoy caller: it sends GET requests to an Envoy
// listener that routes to the service, and learns from the
// X-Cairn-Instance header which instance answered. It resolves nothing:
// Envoy does, from cairn's xDS, and reports its loads over LRS itself.
type EnvoyConfig struct {
	Config
	// URL is the listener's URL, e.g. http://127.0.0.1:10000/. Required.
	URL string
	// Hosts, if set, returns the addresses ("host:port") Envoy routes to
	// now, e.g. from its admin /clusters: asked every HostsEvery, each
	// change recorded as a view (what the caller was given).
	Hosts func(ctx context.Context) ([]string, error)
	// HostsEvery defaults to DefaultHostsEvery.
	HostsEvery time.Duration
}

// DefaultHostsEvery is how often an Envoy caller asks for Envoy's hosts.
const DefaultHostsEvery = 200 * time.Millisecond

// NewEnvoy returns an Envoy caller. A status other than 200 (Envoy's
// 503 with no healthy upstream, its 504 on an upstream timeout) is a
// failure, a 504 a timeout.
func NewEnvoy(cfg EnvoyConfig) (*Caller, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("callers: EnvoyConfig.URL must be an http URL, got %q", cfg.URL)
	}
	if cfg.HostsEvery < 0 {
		return nil, fmt.Errorf("callers: EnvoyConfig.HostsEvery must not be negative, got %v", cfg.HostsEvery)
	}
	if cfg.HostsEvery == 0 {
		cfg.HostsEvery = DefaultHostsEvery
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	hc := &http.Client{Transport: tr}
	c, err := newCaller(cfg.Config, Envoy, func(ctx context.Context) attempt {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
		if err != nil {
			return attempt{err: err}
		}
		who, err := doHTTP(hc, req)
		var se statusError
		if errors.As(err, &se) && se == http.StatusGatewayTimeout {
			err = fmt.Errorf("envoy: upstream timeout (%w)", context.DeadlineExceeded)
		}
		return attempt{instance: who, err: err}
	}, tr.CloseIdleConnections)
	if err != nil {
		return nil, err
	}
	c.rec.rec.Blind = true
	if cfg.Hosts != nil {
		c.watch = func(ctx context.Context) { c.watchHosts(ctx, cfg.Hosts, cfg.HostsEvery) }
	}
	return c, nil
}

// watchHosts records what hosts returns every interval, until ctx is
// done. A failed ask records nothing.
func (c *Caller) watchHosts(ctx context.Context, hosts func(context.Context) ([]string, error), every time.Duration) {
	tk := time.NewTicker(every)
	defer tk.Stop()
	for {
		at := c.cfg.Now()
		hctx, cancel := context.WithTimeout(ctx, every)
		hs, err := hosts(hctx)
		cancel()
		if err == nil {
			c.rec.view(at, hs)
		}
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
	}
}
