package xdsserver

import (
	"errors"
	"log/slog"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/status"
)

// Config configures a Server.
type Config struct {
	// Table is the publisher of the status table the server reads.
	// Required.
	Table *status.Publisher
	// Ready reports whether the table holds the store's state (the
	// health loop has built it from a synced store, or restored it): a
	// stream opened before that is refused with UNAVAILABLE and retries,
	// rather than being sent a partial view that a client would apply
	// (field notes X6). Nil: always ready.
	Ready func() bool
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// Registerer takes the server's metrics; nil registers none.
	Registerer prometheus.Registerer
}

// Server answers xDS streams from the published status table. It does
// not use go-control-plane's caches or stream server: those rebuild a
// watch on every acknowledgement under one lock and resend a refused
// version at once, in a loop (see docs/decisions.md); it uses
// go-control-plane's protocol types and gRPC service definitions.
type Server struct {
	discoveryv3.UnimplementedAggregatedDiscoveryServiceServer

	cfg   Config
	log   *slog.Logger
	m     *metrics
	views *views
}

// New returns a Server; Register attaches it to a gRPC server.
func New(cfg Config) (*Server, error) {
	if cfg.Table == nil {
		return nil, errors.New("xdsserver: Config.Table is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Server{cfg: cfg, log: log, m: m, views: &views{pub: cfg.Table, m: m}}, nil
}

// Register attaches the aggregated discovery service to gs.
func (s *Server) Register(gs *grpc.Server) {
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, s)
}

// StreamAggregatedResources serves one state-of-the-world ADS stream.
func (s *Server) StreamAggregatedResources(stream grpc.BidiStreamingServer[discoveryv3.DiscoveryRequest, discoveryv3.DiscoveryResponse]) error {
	if s.cfg.Ready != nil && !s.cfg.Ready() {
		s.m.refused.Inc()
		return grpcstatus.Error(codes.Unavailable, "xdsserver: the status table is not loaded yet; retry")
	}
	s.m.streams.Inc()
	defer s.m.streams.Dec()
	return newSotwStream(s, stream).run()
}
