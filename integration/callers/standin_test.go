package callers_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-sd/cairn/integration/callers"
)

// standin is one instance of the fleet interface the callers are written
// against, on a loopback address of its own: http, grpc or tcp, slow
// (answering after a delay) or refusing connections once Refuse is called.
type standin struct {
	id, addr string

	mu    sync.Mutex
	delay time.Duration
	stop  func()
}

// Slow makes the instance answer after d (0: at once).
func (s *standin) Slow(d time.Duration) {
	s.mu.Lock()
	s.delay = d
	s.mu.Unlock()
}

func (s *standin) wait(ctx context.Context) {
	s.mu.Lock()
	d := s.delay
	s.mu.Unlock()
	if d == 0 {
		return
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
	case <-ctx.Done():
	}
}

// Refuse closes the listener and every connection: connections to the
// address are refused from then on.
func (s *standin) Refuse() {
	s.mu.Lock()
	stop := s.stop
	s.stop = nil
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// startStandins starts one instance per ip, ids prefix-0…, all on one
// port (the service's), and stops them when the test ends.
func startStandins(t *testing.T, proto callers.Protocol, prefix string, ips ...string) ([]*standin, int) {
	t.Helper()
	for try := 0; ; try++ {
		lns, port, err := listenAll(ips)
		if err != nil {
			if try < 20 {
				continue
			}
			t.Fatal(err)
		}
		var out []*standin
		for i, ln := range lns {
			s := &standin{id: fmt.Sprintf("%s-%d", prefix, i), addr: ln.Addr().String()}
			s.stop = serve(s, proto, ln)
			t.Cleanup(s.Refuse)
			out = append(out, s)
		}
		return out, port
	}
}

// listenAll listens on one free port on every ip.
func listenAll(ips []string) ([]net.Listener, int, error) {
	first, err := net.Listen("tcp", net.JoinHostPort(ips[0], "0"))
	if err != nil {
		return nil, 0, err
	}
	port := first.Addr().(*net.TCPAddr).Port
	lns := []net.Listener{first}
	for _, ip := range ips[1:] {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(port)))
		if err != nil {
			for _, l := range lns {
				l.Close()
			}
			return nil, 0, err
		}
		lns = append(lns, ln)
	}
	return lns, port, nil
}

func serve(s *standin, proto callers.Protocol, ln net.Listener) func() {
	switch proto {
	case callers.HTTP:
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/" {
				s.wait(r.Context())
			}
			w.Header().Set(callers.InstanceHeader, s.id)
			fmt.Fprint(w, s.id)
		}), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		return func() { srv.Close() }
	case callers.GRPC:
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, &healthStandin{s: s})
		go func() { _ = gs.Serve(ln) }()
		return gs.Stop
	default:
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				c, err := ln.Accept()
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err != nil {
					continue
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					defer c.Close()
					s.wait(context.Background())
					w := bufio.NewWriter(c)
					fmt.Fprintln(w, s.id)
					w.Flush()
				}()
			}
		}()
		return func() { ln.Close(); wg.Wait() }
	}
}

type healthStandin struct {
	healthpb.UnimplementedHealthServer
	s *standin
}

func (h *healthStandin) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs(callers.InstanceMetadata, h.s.id)); err != nil {
		return nil, err
	}
	h.s.wait(ctx)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}
