package xdstest

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc"

	"github.com/cairn-sd/cairn/xdsserver"
)

// Serve serves srv over gRPC on a loopback port and runs it (following
// its published tables), until stop is called; it returns the address.
// stop may be called more than once.
func Serve(srv *xdsserver.Server) (addr string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	gs := grpc.NewServer()
	srv.Register(gs)
	go gs.Serve(ln)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Run(ctx) }()
	var once sync.Once
	return ln.Addr().String(), func() { once.Do(func() { gs.Stop(); cancel(); <-done }) }, nil
}
