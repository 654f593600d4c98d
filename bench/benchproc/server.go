package benchproc

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/cairn-sd/cairn/client"
)

// StartServer starts bin as a single-node server (--dev, data in
// dir/server, its log in dir/server.log) whose HTTP, raft, DNS and gRPC
// listeners are on loopback at addrs[0] to addrs[3], waits until it is
// ready, and returns it with a client of its API. The caller stops the
// process and closes the client.
func StartServer(ctx context.Context, bin, dir string, addrs []string) (*Process, *client.Client, error) {
	srv, err := Start(bin, []string{"server", "--dev", "--data-dir", filepath.Join(dir, "server"),
		"--http-addr", addrs[0], "--raft-addr", addrs[1], "--dns-addr", addrs[2], "--grpc-addr", addrs[3], "--log-level", "warn"},
		filepath.Join(dir, "server.log"))
	if err != nil {
		return nil, nil, err
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	if err := srv.WaitReady(ctx, hc, "http://"+addrs[0]+"/readyz", 30*time.Second); err != nil {
		srv.Stop()
		return nil, nil, fmt.Errorf("starting the server: %w\n%s", err, srv.Tail())
	}
	cl, err := client.New(addrs[0], "")
	if err != nil {
		srv.Stop()
		return nil, nil, err
	}
	return srv, cl, nil
}
