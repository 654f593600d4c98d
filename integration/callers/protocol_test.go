package callers

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/cairn-sd/cairn/integration"
)

type healthID struct {
	healthpb.UnimplementedHealthServer
	id string
}

func (h healthID) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	if err := grpc.SetHeader(ctx, metadata.Pairs(InstanceMetadata, h.id)); err != nil {
		return nil, err
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

// serveHealth serves Health/Check on addr ("127.0.0.1:0" for any port)
// and returns the address and a stop func.
func serveHealth(t *testing.T, addr, id string) (string, func()) {
	t.Helper()
	var ln net.Listener
	if err := integration.Poll(2*time.Second, 20*time.Millisecond, func() (err error) {
		ln, err = net.Listen("tcp", addr) // the port may take a moment to be free again
		return err
	}); err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, healthID{id: id})
	go func() { _ = gs.Serve(ln) }()
	return ln.Addr().String(), gs.Stop
}

// TestGRPCChannelRecovers: after an instance refused connections for a
// while, its channel calls it again within about a second of its return
// (grpc-go's default backoff would wait several seconds, failing every
// call meanwhile).
func TestGRPCChannelRecovers(t *testing.T) {
	addr, stop := serveHealth(t, "127.0.0.1:0", "i-0")
	s, err := newSender(GRPC, nil, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	call := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		_, err := s.send(ctx, addr)
		return err
	}
	if err := call(); err != nil {
		t.Fatal(err)
	}
	stop()
	// Refused for 6 s at the callers' rate: grpc-go's default backoff
	// would have grown past 4 s by then.
	refused := time.Now()
	tk := time.NewTicker(50 * time.Millisecond)
	defer tk.Stop()
	for range tk.C {
		if time.Since(refused) > 6*time.Second {
			break
		}
		_ = call()
	}
	_, stop = serveHealth(t, addr, "i-0")
	defer stop()
	back := time.Now()
	if err := integration.Poll(2500*time.Millisecond, 50*time.Millisecond, call); err != nil {
		t.Fatalf("still failing %v after the instance came back: %v", time.Since(back), err)
	}
	t.Logf("called again %v after the instance came back", time.Since(back).Round(time.Millisecond))
}

// TestGRPCChannelsRetained: the channel of an address that left the
// answer is closed once its last request is done; the others are kept.
func TestGRPCChannelsRetained(t *testing.T) {
	s, err := newSender(GRPC, nil, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	a, err := s.conn("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	b, err := s.conn("127.0.0.2:1")
	if err != nil {
		t.Fatal(err)
	}
	s.release(b)
	s.retain([]string{"127.0.0.2:1"})
	if a.cc.GetState() == connectivity.Shutdown {
		t.Fatal("closed while a request used it")
	}
	s.release(a)
	if a.cc.GetState() != connectivity.Shutdown {
		t.Error("the channel of an address no longer in the answer was not closed")
	}
	if b.cc.GetState() == connectivity.Shutdown || len(s.conns) != 1 {
		t.Error("the channel of an address in the answer was closed")
	}
}
