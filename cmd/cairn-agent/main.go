// Command cairn-agent is `cairn agent` as a binary of its own: the same
// flags (and --token), the same behaviour, without the server, the
// store, raft or the dashboard linked in, so that an agent on a small
// machine maps only the code it runs (docs/decisions.md).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/cairn-sd/cairn/cmd/internal/agentcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := agentcmd.Run(ctx, os.Args, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
