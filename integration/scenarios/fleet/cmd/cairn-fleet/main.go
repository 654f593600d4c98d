// Command cairn-fleet runs a simulated fleet (package fleet): cairn-fleet
// SPEC.json listens on every instance's address and on the control API,
// prints "ready <URL>" and serves until SIGINT or SIGTERM.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"github.com/cairn-sd/cairn/integration/scenarios/fleet"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "cairn-fleet:", err)
		os.Exit(1)
	}
}

func run() error {
	if len(os.Args) != 2 {
		return fmt.Errorf("usage: cairn-fleet SPEC.json")
	}
	b, err := os.ReadFile(os.Args[1])
	if err != nil {
		return err
	}
	var spec fleet.Spec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("%s: %w", os.Args[1], err)
	}
	s, err := fleet.NewServer(spec)
	if err != nil {
		return err
	}
	defer s.Close()
	ln, err := net.Listen("tcp", cmp.Or(spec.Control, "127.0.0.1:0"))
	if err != nil {
		return fmt.Errorf("control: %w", err)
	}
	srv := &http.Server{Handler: fleet.Handler(s)}
	go func() { _ = srv.Serve(ln) }()
	fmt.Printf("ready http://%s\n", ln.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return srv.Close()
}
