package callers

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
)

// EnvoyConfig is an Envoy caller: it sends GET requests to an Envoy
// listener that routes to the service, and learns from the
// X-Cairn-Instance header which instance answered. It resolves nothing:
// Envoy does, from cairn's xDS, and reports its loads over LRS itself.
type EnvoyConfig struct {
	Config
	// URL is the listener's URL, e.g. http://127.0.0.1:10000/. Required.
	URL string
}

// NewEnvoy returns an Envoy caller. A status other than 200 (Envoy's
// 503 with no healthy upstream, its 504 on an upstream timeout) is a
// failure, a 504 a timeout.
func NewEnvoy(cfg EnvoyConfig) (*Caller, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("callers: EnvoyConfig.URL must be an http URL, got %q", cfg.URL)
	}
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	hc := &http.Client{Transport: tr}
	return newCaller(cfg.Config, Envoy, func(ctx context.Context) attempt {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.URL, nil)
		if err != nil {
			return attempt{err: err}
		}
		who, err := doHTTP(hc, req)
		if err != nil && err.Error() == "status 504" {
			err = fmt.Errorf("envoy: upstream timeout (%w)", context.DeadlineExceeded)
		}
		return attempt{instance: who, err: err}
	}, tr.CloseIdleConnections)
}
