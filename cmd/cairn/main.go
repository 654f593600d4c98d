// Command cairn is the cairn server, agent and CLI.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/cairn-sd/cairn/cmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cmd.Run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
