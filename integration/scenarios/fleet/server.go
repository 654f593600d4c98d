package fleet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Server holds a fleet's listeners: one accept loop per instance, an
// HTTP server shared by the http instances and a gRPC server shared by
// the grpc ones; each request finds its instance by the address it
// arrived on.
type Server struct {
	insts  []*inst
	byAddr map[string]*inst // by listening address
	web    *http.Server
	rpc    *grpc.Server
	wg     sync.WaitGroup
	setMu  sync.Mutex // one Set at a time: a listener reopens once
}

// inst is one instance and its state.
type inst struct {
	Instance
	served atomic.Int64

	mu    sync.Mutex
	mode  string
	delay time.Duration
	ln    net.Listener          // nil while refused
	conns map[net.Conn]struct{} // open connections, closed on refuse
}

// NewServer listens on every instance's address and serves them. It
// fails, closing what it opened, if the spec is invalid or an address
// cannot be listened on.
func NewServer(spec Spec) (*Server, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	s := &Server{byAddr: make(map[string]*inst, len(spec.Instances))}
	s.web = &http.Server{
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       time.Minute,
	}
	s.rpc = grpc.NewServer()
	healthpb.RegisterHealthServer(s.rpc, health{s: s})
	for _, i := range spec.Instances {
		in := &inst{Instance: i, mode: ModeOK, conns: map[net.Conn]struct{}{}}
		s.insts = append(s.insts, in)
		s.byAddr[i.HostPort()] = in
	}
	for _, in := range s.insts {
		if err := s.listen(in); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// listen opens in's listener and serves it; the caller holds no lock.
func (s *Server) listen(in *inst) error {
	ln, err := net.Listen("tcp", in.HostPort())
	if err != nil {
		return fmt.Errorf("fleet: instance %s: %w", in.ID, err)
	}
	tl := &trackedListener{Listener: ln, in: in}
	in.mu.Lock()
	in.ln = tl
	in.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		switch in.Kind {
		case KindHTTP:
			_ = s.web.Serve(tl)
		case KindGRPC:
			_ = s.rpc.Serve(tl)
		case KindTCP:
			s.serveTCP(in, tl)
		}
	}()
	return nil
}

// Close closes every listener and connection.
func (s *Server) Close() {
	for _, in := range s.insts {
		in.refuse()
	}
	_ = s.web.Close()
	s.rpc.Stop()
	s.wg.Wait()
}

// Set applies a mode request, returning how many instances it selected.
func (s *Server) Set(r ModeRequest) (int, error) {
	if err := r.validate(); err != nil {
		return 0, err
	}
	s.setMu.Lock()
	defer s.setMu.Unlock()
	named := make(map[string]bool, len(r.IDs))
	for _, id := range r.IDs {
		named[id] = true
	}
	if len(named) > 0 {
		known := 0
		for _, in := range s.insts {
			if named[in.ID] {
				known++
			}
		}
		if known != len(named) {
			return 0, fmt.Errorf("ids: %d of %d name no instance of the fleet", len(named)-known, len(named))
		}
	}
	n := 0
	var errs []error
	for _, in := range s.insts {
		if !r.selects(in.Instance, named) {
			continue
		}
		n++
		in.mu.Lock()
		in.mode, in.delay = r.Mode, time.Duration(r.Delay)
		listening := in.ln != nil
		in.mu.Unlock()
		switch {
		case r.Mode == ModeRefuse:
			in.refuse()
		case !listening:
			if err := s.listen(in); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return n, errors.Join(errs...)
}

// refuse closes in's listener and its open connections.
func (in *inst) refuse() {
	in.mu.Lock()
	ln := in.ln
	in.ln = nil
	conns := in.conns
	in.conns = map[net.Conn]struct{}{}
	in.mu.Unlock()
	if ln != nil {
		_ = ln.Close()
	}
	for c := range conns {
		_ = c.Close()
	}
}

// state returns in's mode and delay.
func (in *inst) state() (string, time.Duration) {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mode, in.delay
}

// wait holds a caller's request for the slow mode's delay, or until ctx
// ends; false if it ended.
func (in *inst) wait(ctx context.Context) bool {
	mode, delay := in.state()
	if mode != ModeSlow {
		return true
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// States lists every instance with its mode and count.
func (s *Server) States() []InstanceState {
	out := make([]InstanceState, 0, len(s.insts))
	for _, in := range s.insts {
		mode, delay := in.state()
		out = append(out, InstanceState{Instance: in.Instance, Mode: mode, Delay: Duration(delay), Served: in.served.Load()})
	}
	return out
}

// Listening counts the instances whose listener is open.
func (s *Server) Listening() int {
	n := 0
	for _, in := range s.insts {
		in.mu.Lock()
		if in.ln != nil {
			n++
		}
		in.mu.Unlock()
	}
	return n
}

// trackedListener records the connections it accepts with their
// instance, so that refuse closes them.
type trackedListener struct {
	net.Listener
	in *inst
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, in: l.in}
	l.in.mu.Lock()
	if l.in.ln != l {
		// Refused meanwhile: this connection came too late.
		l.in.mu.Unlock()
		_ = c.Close()
		return nil, net.ErrClosed
	}
	l.in.conns[tc] = struct{}{}
	l.in.mu.Unlock()
	return tc, nil
}

type trackedConn struct {
	net.Conn
	in   *inst
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.in.mu.Lock()
		delete(c.in.conns, c)
		c.in.mu.Unlock()
	})
	return c.Conn.Close()
}

// serveTCP accepts on ln until it closes: each connection gets the
// instance id and a newline, after the delay of the slow mode.
func (s *Server) serveTCP(in *inst, ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if in.wait(ctx) {
				in.served.Add(1)
				_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
				_, _ = c.Write([]byte(in.ID + "\n"))
			}
		}()
	}
}

// instanceOf finds the instance a connection arrived on by its local
// address.
func (s *Server) instanceOf(local net.Addr) *inst {
	if local == nil {
		return nil
	}
	return s.byAddr[local.String()]
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	in := s.instanceOf(local)
	if in == nil {
		http.Error(w, "no instance listens here", http.StatusMisdirectedRequest)
		return
	}
	w.Header().Set(InstanceHeader, in.ID)
	if r.URL.Path == "/ready" {
		if mode, _ := in.state(); mode == ModeDown {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
		return
	}
	if r.URL.Path != "/" {
		http.NotFound(w, r) // a check pointed at a wrong path fails
		return
	}
	if !in.wait(r.Context()) {
		return
	}
	in.served.Add(1)
	_, _ = w.Write([]byte(in.ID))
}

// health is the grpc instances' grpc.health.v1.Health.
type health struct {
	healthpb.UnimplementedHealthServer
	s *Server
}

func (h health) instance(ctx context.Context) (*inst, error) {
	p, ok := peer.FromContext(ctx)
	var in *inst
	if ok {
		in = h.s.instanceOf(p.LocalAddr)
	}
	if in == nil {
		return nil, status.Error(codes.Internal, "no instance listens here")
	}
	_ = grpc.SetHeader(ctx, metadata.Pairs("x-cairn-instance", in.ID))
	return in, nil
}

func (in *inst) servingStatus() healthpb.HealthCheckResponse_ServingStatus {
	if mode, _ := in.state(); mode == ModeDown {
		return healthpb.HealthCheckResponse_NOT_SERVING
	}
	return healthpb.HealthCheckResponse_SERVING
}

// CallerService is the service a caller's Health/Check names; a Check
// of any other is a probe's, answered at once and not counted as
// served.
const CallerService = "caller"

func (h health) Check(ctx context.Context, req *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	in, err := h.instance(ctx)
	if err != nil {
		return nil, err
	}
	if req.GetService() != CallerService {
		return &healthpb.HealthCheckResponse{Status: in.servingStatus()}, nil
	}
	if !in.wait(ctx) {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	in.served.Add(1)
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func (h health) List(ctx context.Context, _ *healthpb.HealthListRequest) (*healthpb.HealthListResponse, error) {
	in, err := h.instance(ctx)
	if err != nil {
		return nil, err
	}
	return &healthpb.HealthListResponse{Statuses: map[string]*healthpb.HealthCheckResponse{"": {Status: in.servingStatus()}}}, nil
}

// Watch sends the status once, then again whenever it changes, checked
// every second, until the caller leaves.
func (h health) Watch(_ *healthpb.HealthCheckRequest, stream grpc.ServerStreamingServer[healthpb.HealthCheckResponse]) error {
	in, err := h.instance(stream.Context())
	if err != nil {
		return err
	}
	last := healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		if st := in.servingStatus(); st != last {
			if err := stream.Send(&healthpb.HealthCheckResponse{Status: st}); err != nil {
				return err
			}
			last = st
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-t.C:
		}
	}
}
