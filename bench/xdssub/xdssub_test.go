package xdssub

import (
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/status"
	"github.com/cairn-sd/cairn/status/statustest"
	"github.com/cairn-sd/cairn/xdsserver"
	"github.com/cairn-sd/cairn/xdsserver/xdstest"
)

// TestOlder: older means an older revision and other content; the same
// content from an older table, and versions without a revision, are not.
func TestOlder(t *testing.T) {
	for _, c := range []struct {
		got, held string
		want      bool
	}{
		{"5-aa", "7-bb", true},
		{"7-bb", "5-aa", false},
		{"5-aa", "7-aa", false}, // same content
		{"7-cc", "7-bb", false}, // same revision
		{"aa", "7-bb", true},    // a bare digest is revision 0
		{"5-aa", "bb", false},
	} {
		if got := Older(c.got, c.held); got != c.want {
			t.Errorf("Older(%q, %q) = %v, want %v", c.got, c.held, got, c.want)
		}
	}
}

// TestViewApply: a view holds the last version of each resource, tells
// an older one sent over a newer, and the removal of a held one.
func TestViewApply(t *testing.T) {
	var v View
	res := func(name, version string) *discoveryv3.Resource {
		return &discoveryv3.Resource{Name: name, Version: version}
	}
	if reg, rem := v.Apply(&discoveryv3.DeltaDiscoveryResponse{Resources: []*discoveryv3.Resource{res("a", "3-x"), res("b", "3-y")}}); reg != nil || rem != nil {
		t.Fatalf("first response: regressed %v, removed %v", reg, rem)
	}
	reg, rem := v.Apply(&discoveryv3.DeltaDiscoveryResponse{Resources: []*discoveryv3.Resource{res("a", "2-z")}, RemovedResources: []string{"b", "c"}})
	if len(reg) != 1 || reg[0] != (Regression{Name: "a", Held: "3-x", Got: "2-z"}) || len(rem) != 1 || rem[0] != "b" {
		t.Fatalf("regressed %v, removed %v; want a 3-x → 2-z, and b", reg, rem)
	}
	if h := v.Held(); len(h) != 1 || h["a"] != "2-z" {
		t.Errorf("held %v, want a at 2-z alone", h)
	}
}

// TestSubscriberRetriesAndResumes: a server that is not ready refuses
// the subscriber with UNAVAILABLE, and it retries until admitted; when
// its stream ends it opens another naming the version it holds, and is
// not sent the unchanged resource again.
func TestSubscriberRetriesAndResumes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tb := statustest.New(t, 8)
	pay := statustest.Service{ServiceInfo: status.ServiceInfo{Namespace: "shop", Name: "pay", Ports: []status.Port{{Name: "grpc", Number: 8443, Protocol: "tcp"}}}}
	in := statustest.Ready("pay-0", "10.0.0.1")
	in.Ports = map[string]uint16{"grpc": 8443}
	pay.Instances = append(pay.Instances, in)
	tb.Publish(t, pay)
	var ready atomic.Bool
	srv, err := xdsserver.New(xdsserver.Config{Table: tb.Publisher, Ready: ready.Load, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	served := make(chan struct{})
	go func() { defer close(served); _ = gs.Serve(ln) }()
	rctx, stopRun := context.WithCancel(ctx)
	ran := make(chan struct{})
	go func() { defer close(ran); _ = srv.Run(rctx) }()
	defer func() { gs.Stop(); <-served; stopRun(); <-ran }()
	cc, err := xdstest.Dial(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()

	const name = "pay.shop:grpc"
	var (
		mu       sync.Mutex
		refusals []codes.Code
		helds    []map[string]string
		got      []int // resources per response
		streams  = make(chan *Session, 4)
	)
	s := &Subscriber{
		Request: Request{Type: resourcev3.EndpointType, Names: []string{name}},
		Retry:   Retry{Min: 10 * time.Millisecond, Max: 50 * time.Millisecond},
		Rand:    rand.New(rand.NewPCG(1, 2)),
		Refused: func(err error) {
			mu.Lock()
			refusals = append(refusals, grpcstatus.Code(err))
			n := len(refusals)
			mu.Unlock()
			if n == 3 {
				ready.Store(true)
			}
		},
		Opened: func(sess *Session, held map[string]string) {
			mu.Lock()
			helds = append(helds, held)
			mu.Unlock()
			streams <- sess
		},
		Received: func(resp *discoveryv3.DeltaDiscoveryResponse, reg []Regression, rem []string) {
			mu.Lock()
			got = append(got, len(resp.Resources))
			mu.Unlock()
			if reg != nil || rem != nil {
				t.Errorf("regressed %v, removed %v", reg, rem)
			}
		},
	}
	sctx, stopSub := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); s.Run(sctx, cc) }()
	defer func() { stopSub(); <-done }()

	first := <-streams
	if first.Attempts != 4 {
		t.Errorf("admitted at attempt %d, want 4 (3 refused)", first.Attempts)
	}
	first.Close() // the stream ends; the subscriber opens another
	select {
	case <-streams:
	case <-ctx.Done():
		t.Fatal("no second stream")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, c := range refusals {
		if c != codes.Unavailable {
			t.Errorf("refused with %v, want Unavailable", c)
		}
	}
	if len(helds) != 2 || helds[0] != nil || helds[1][name] == "" {
		t.Errorf("held when asking: %v; want nothing, then %s's version", helds, name)
	}
	if len(got) == 0 || got[0] != 1 {
		t.Errorf("resources per response %v; want the assignment first", got)
	}
}
