// Command xdspeer is the xDS bench's peer: the same endpoint assignments
// cairn serves to the bench, served by go-control-plane's LinearCache
// and its own delta xDS server, as a user would build it from the
// library alone (the cache comments call it the cache for "EDS entries,
// uniformly across a fleet of proxies").
//
// It serves -services assignments named "svc-<i>.bench:grpc", each of
// -endpoints endpoints 10.<i/256>.<i%256>.<e+1>:<port>, every port
// starting at -port (the layout bench/cmd/xdsload registers in cairn).
// Its HTTP endpoint changes one endpoint at a time, for the load
// generator:
//
//	POST /change?svc=I&ep=E&port=P   P > 0: the endpoint in rotation on port P; P = 0: withdrawn
//	GET  /readyz                     200 once serving
//
// A change returns once LinearCache.UpdateResource has returned (it
// hands the new assignment to every watching stream before returning).
// It stops on SIGTERM or SIGINT.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

type options struct {
	grpcAddr, httpAddr  string
	services, endpoints int
	port                int
}

func main() {
	var o options
	flag.StringVar(&o.grpcAddr, "grpc-addr", "127.0.0.1:18481", "xDS over gRPC")
	flag.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:18480", "the change endpoint")
	flag.IntVar(&o.services, "services", 400, "services")
	flag.IntVar(&o.endpoints, "endpoints", 8, "endpoints per service (at most 254)")
	flag.IntVar(&o.port, "port", 20000, "every endpoint's first port")
	flag.Parse()
	if o.services < 1 || o.services > 65536 || o.endpoints < 1 || o.endpoints > 254 || o.port < 1 || o.port > 65535 {
		fmt.Fprintln(os.Stderr, "xdspeer: -services must be 1–65536, -endpoints 1–254, -port 1–65535")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "xdspeer:", err)
		os.Exit(1)
	}
}

// peer holds each endpoint's port (0: withdrawn) and the cache.
type peer struct {
	o     options
	cache *cachev3.LinearCache
	mu    sync.Mutex // serialises changes of one assignment's ports with its update
	ports [][]uint16 // by service, by endpoint
}

func name(svc int) string { return fmt.Sprintf("svc-%d.bench:grpc", svc) }

// assignment builds service svc's assignment from its ports.
func (p *peer) assignment(svc int) *endpointv3.ClusterLoadAssignment {
	loc := &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: "eu", Zone: "eu-1a"},
		LoadBalancingWeight: wrapperspb.UInt32(1)}
	for e, port := range p.ports[svc] {
		if port == 0 {
			continue
		}
		addr := fmt.Sprintf("10.%d.%d.%d", svc>>8, svc&255, e+1)
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{Address: &corev3.Address{
				Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: addr,
					PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)}}}}}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: wrapperspb.UInt32(100),
		})
	}
	return &endpointv3.ClusterLoadAssignment{ClusterName: name(svc), Endpoints: []*endpointv3.LocalityLbEndpoints{loc}}
}

func run(ctx context.Context, o options) error {
	p := &peer{o: o, ports: make([][]uint16, o.services)}
	initial := map[string]types.Resource{}
	for s := range o.services {
		p.ports[s] = make([]uint16, o.endpoints)
		for e := range p.ports[s] {
			p.ports[s][e] = uint16(o.port)
		}
		initial[name(s)] = p.assignment(s)
	}
	p.cache = cachev3.NewLinearCache(resourcev3.EndpointType, cachev3.WithInitialResources(initial))
	xs := serverv3.NewServer(ctx, p.cache, nil)
	// The keepalive settings of go-control-plane's own example server
	// (pkg/test/server.go), as a user would copy them.
	gs := grpc.NewServer(grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 5 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 30 * time.Second, PermitWithoutStream: true}))
	discoveryv3.RegisterAggregatedDiscoveryServiceServer(gs, xs)
	gln, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return fmt.Errorf("listening for gRPC on %q: %w", o.grpcAddr, err)
	}
	hln, err := net.Listen("tcp", o.httpAddr)
	if err != nil {
		gln.Close()
		return fmt.Errorf("listening for HTTP on %q: %w", o.httpAddr, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("POST /change", p.change)
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(gln) }()
	go func() { errc <- hs.Serve(hln) }()
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hs.Shutdown(sctx)
	gs.Stop()
	if errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		err = nil
	}
	return err
}

// change sets one endpoint's port (0: withdrawn) and updates its
// assignment in the cache.
func (p *peer) change(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	svc, err1 := strconv.Atoi(q.Get("svc"))
	ep, err2 := strconv.Atoi(q.Get("ep"))
	port, err3 := strconv.Atoi(q.Get("port"))
	if err := errors.Join(err1, err2, err3); err != nil || svc < 0 || svc >= p.o.services || ep < 0 || ep >= p.o.endpoints || port < 0 || port > 65535 {
		http.Error(w, fmt.Sprintf("want svc in [0,%d), ep in [0,%d), port in [0,65535]: %v", p.o.services, p.o.endpoints, err), http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	p.ports[svc][ep] = uint16(port)
	err := p.cache.UpdateResource(name(svc), p.assignment(svc))
	p.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
