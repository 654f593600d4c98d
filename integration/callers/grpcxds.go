package callers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/xds"
	xdsbootstrap "google.golang.org/grpc/xds/bootstrap"
)

// GRPCConfig is a grpc-go xDS caller: a grpc.ClientConn to
// xds:///<svc>.<ns> resolved through the cairn server its bootstrap
// names, calling grpc.health.v1 Health/Check. grpc-go picks the
// instance from what xDS gave it, and reports its loads over LRS by
// itself (as its token's caller, the same one as its POST /v1/outcomes).
type GRPCConfig struct {
	Config
	// Bootstrap is the xDS bootstrap (`cairn xds-bootstrap`). Required.
	Bootstrap []byte
	// Target is the service, "<svc>.<ns>". Required.
	Target string
	// Token, if set, is the bearer token the xDS stream presents, for
	// servers run with ACLs: it replaces the bootstrap's channel
	// credentials with BearerCredentials (plaintext, as cairn's
	// --insecure-plaintext or loopback servers speak).
	Token string
}

// BearerCredentials is the name of the xDS channel credentials type this
// package registers with grpc-go: plaintext, and "authorization: Bearer
// TOKEN" on every call, the token from the bootstrap's
// {"type": "cairn-bearer", "config": {"token": "..."}}. grpc-go has no
// built-in type that sends a bearer token in plaintext, and its
// registry is filled at init only.
const BearerCredentials = "cairn-bearer"

func init() { xdsbootstrap.RegisterChannelCredentials(bearerBuilder{}) }

type bearerBuilder struct{}

func (bearerBuilder) Name() string { return BearerCredentials }

func (bearerBuilder) Build(config json.RawMessage) (credentials.Bundle, func(), error) {
	var c struct {
		Token string `json:"token"`
	}
	if err := json.Unmarshal(config, &c); err != nil || c.Token == "" {
		return nil, nil, errors.New(`callers: cairn-bearer credentials need {"token": "..."}`)
	}
	return bearerBundle{token: c.Token}, func() {}, nil
}

// bearerBundle is plaintext transport credentials and a bearer token.
type bearerBundle struct{ token string }

func (b bearerBundle) TransportCredentials() credentials.TransportCredentials {
	return insecure.NewCredentials()
}
func (b bearerBundle) PerRPCCredentials() credentials.PerRPCCredentials { return b }
func (b bearerBundle) NewWithMode(string) (credentials.Bundle, error)   { return b, nil }

func (b bearerBundle) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.token}, nil
}
func (b bearerBundle) RequireTransportSecurity() bool { return false }

// WithToken returns bootstrap with every xDS server's channel
// credentials replaced by BearerCredentials carrying token.
func WithToken(bootstrap []byte, token string) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(bootstrap, &doc); err != nil {
		return nil, fmt.Errorf("callers: bootstrap: %w", err)
	}
	servers, _ := doc["xds_servers"].([]any)
	if len(servers) == 0 {
		return nil, errors.New("callers: bootstrap: xds_servers is empty")
	}
	for _, s := range servers {
		m, ok := s.(map[string]any)
		if !ok {
			return nil, errors.New("callers: bootstrap: xds_servers holds a non-object")
		}
		m["channel_creds"] = []any{map[string]any{"type": BearerCredentials, "config": map[string]any{"token": token}}}
	}
	return json.Marshal(doc)
}

// checkBootstrap checks what grpc-go would only check when the channel
// is first used: a JSON object whose xds_servers lists at least one
// server, each with a server_uri and channel_creds.
func checkBootstrap(boot []byte) error {
	var doc struct {
		Servers []struct {
			URI   string            `json:"server_uri"`
			Creds []json.RawMessage `json:"channel_creds"`
		} `json:"xds_servers"`
	}
	if err := json.Unmarshal(boot, &doc); err != nil {
		return fmt.Errorf("callers: GRPCConfig.Bootstrap must be a JSON object: %w", err)
	}
	if len(doc.Servers) == 0 {
		return errors.New("callers: GRPCConfig.Bootstrap: xds_servers is required and must list a server")
	}
	for i, sv := range doc.Servers {
		if sv.URI == "" || len(sv.Creds) == 0 {
			return fmt.Errorf("callers: GRPCConfig.Bootstrap: xds_servers[%d] needs a server_uri and channel_creds", i)
		}
	}
	return nil
}

// NewGRPC validates cfg and returns a grpc-go xDS caller. Its channel
// is made when Run starts and closed when Run returns: a caller never
// run holds nothing.
func NewGRPC(cfg GRPCConfig) (*Caller, error) {
	if strings.Count(cfg.Target, ".") != 1 {
		return nil, fmt.Errorf("callers: GRPCConfig.Target must be <svc>.<ns>, got %q", cfg.Target)
	}
	boot := cfg.Bootstrap
	if cfg.Token != "" {
		var err error
		if boot, err = WithToken(boot, cfg.Token); err != nil {
			return nil, err
		}
	}
	if err := checkBootstrap(boot); err != nil {
		return nil, err
	}
	var cc *grpc.ClientConn // set by start, before any send
	c, err := newCaller(cfg.Config, GRPCXDS, func(ctx context.Context) attempt {
		var p peer.Peer
		who, err := checkHealth(ctx, cc, grpc.Peer(&p))
		a := attempt{instance: who, err: err}
		if p.Addr != nil {
			if _, _, e := net.SplitHostPort(p.Addr.String()); e == nil {
				a.addr = p.Addr.String()
			}
		}
		return a
	}, func() {
		if cc != nil {
			cc.Close()
		}
	})
	if err != nil {
		return nil, err
	}
	c.start = func() error {
		rb, err := xds.NewXDSResolverWithConfigForTesting(boot)
		if err != nil {
			return fmt.Errorf("callers: GRPCConfig.Bootstrap: grpc-go refuses it: %w", err)
		}
		// The instances speak plaintext; the xDS channel is the bootstrap's.
		opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithResolvers(rb)}
		if cfg.SourceFor != nil {
			// The instances' connections; the xDS stream is the xDS
			// client's own, dialled as its bootstrap says.
			d := &net.Dialer{}
			opts = append(opts, grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
				return dialFrom(ctx, d, cfg.SourceFor, "tcp", a)
			}))
		}
		cc, err = grpc.NewClient("xds:///"+cfg.Target, opts...)
		if err != nil {
			return fmt.Errorf("callers: dialling xds:///%s: %w", cfg.Target, err)
		}
		return nil
	}
	return c, nil
}
