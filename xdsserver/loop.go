package xdsserver

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
)

// serveLoop runs one stream until the client closes it or the server
// stops: one goroutine receives; this one hands each request to request
// and each wake-up (a resource the stream watches changed) to changed,
// so that requests and changes are handled in one order, and a stream's
// requests in the order sent. A wake-up is never lost to a request
// answered in between: changed sends every open type's differences from
// what the stream last sent, whatever woke it.
func serveLoop[Req any](ctx context.Context, wake <-chan struct{},
	recv func() (Req, error), request func(Req) error, changed func() error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	reqs := make(chan Req)
	errc := make(chan error, 1)
	go func() {
		for {
			req, err := recv()
			if err != nil {
				errc <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			if errors.Is(err, io.EOF) || grpcstatus.Code(err) == codes.Canceled {
				return nil
			}
			return err
		case req := <-reqs:
			if err := request(req); err != nil {
				return err
			}
		case <-wake:
			if err := changed(); err != nil {
				return err
			}
		}
	}
}
