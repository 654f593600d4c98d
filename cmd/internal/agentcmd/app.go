package agentcmd

import (
	"context"
	"io"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/cmd/internal/daemon"
)

// App is cairn-agent: `cairn agent` as a program of its own, taking the
// same flags and --token, and linking none of the server.
func App(stdout, stderr io.Writer) *cli.App {
	c := Command()
	return &cli.App{
		Name:      "cairn-agent",
		Usage:     c.Usage + " (`cairn agent`, without the server linked)",
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once, by Run.
		ExitErrHandler:  func(*cli.Context, error) {},
		HideHelpCommand: true,
		Flags:           append(c.Flags, TokenFlag()),
		Action:          c.Action,
	}
}

// Run runs cairn-agent with args and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return daemon.ExitCode(App(stdout, stderr).RunContext(ctx, args), stderr, "cairn-agent")
}
