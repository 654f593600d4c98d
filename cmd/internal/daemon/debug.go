package daemon

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/urfave/cli/v2"
)

// The --debug-addr listener: Go's profiles (net/http/pprof) on a port of
// their own, off unless asked for, loopback only (it has no ACL).

// DebugAddrFlag is --debug-addr.
func DebugAddrFlag() cli.Flag {
	return &cli.StringFlag{Name: "debug-addr", DefaultText: "off", Usage: "serve Go's profiles (/debug/pprof/) on this loopback HOST:PORT, without ACLs"}
}

// CheckDebugAddr refuses a --debug-addr that is not HOST:PORT on loopback.
func CheckDebugAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("--debug-addr: %q is not HOST:PORT", addr)
	}
	if !IsLoopback(addr) {
		return fmt.Errorf("--debug-addr: %q is not a loopback address; the profiles have no ACL", addr)
	}
	return nil
}

// debugServer serves net/http/pprof's handlers.
func debugServer() *http.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
}

// ServeDebug serves the profiles on ln until ctx is done.
func ServeDebug(ctx context.Context, ln net.Listener) error {
	srv := debugServer()
	stopped := context.AfterFunc(ctx, func() { srv.Close() })
	defer stopped()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving --debug-addr: %w", err)
	}
	return nil
}
