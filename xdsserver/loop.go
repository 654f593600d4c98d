package xdsserver

import (
	"context"
	"errors"
	"io"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/cairn-sd/cairn/status"
)

// serveLoop runs one stream until the client closes it or the server
// stops: one goroutine receives; this one hands each request to request
// and each newer table to changed, so that requests and table changes
// are handled in one order, and a stream's requests in the order sent.
// *seen is the version of the last table whose changes were sent: only
// this loop advances it, before calling changed, never a request's
// answer — a request answered from a newer table sends only its own type,
// and the other types' changes in that table must still go out.
func serveLoop[Req any](ctx context.Context, pub *status.Publisher, seen *uint64,
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
		next := pub.Changed(*seen)
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
		case <-next:
			*seen = max(*seen, tableVersion(pub))
			if err := changed(); err != nil {
				return err
			}
		}
	}
}

// tableVersion returns the version of the current table.
func tableVersion(pub *status.Publisher) uint64 {
	t := pub.Acquire()
	defer t.Release()
	return t.Version()
}
