// Package cmd is cairn's command line: it turns flags and environment into
// the packages' Configs, wires them together, runs them under one context
// and maps errors to exit codes. It holds no logic of its own: a rule a
// command needs lives in the package that owns the concept, with its tests.
//
// Imports: every cairn package (it is the only one that may import api,
// and the only one that builds the pipeline); cmd/deps_test.go and
// cmd/layout_test.go hold the project's import and layout rules.
//
// Threading: a server runs its parts under one errgroup bound to the
// signal context (serverrun.go), stops them in order on the way out
// (not ready, lame duck, leadership handed over, HTTP drained, xDS
// streams stopped, then the store) and waits for each.
//
// Files: app.go (the commands), commands.go (the CLI's client commands),
// server.go and serverflags.go (cairn server: constructions and flags),
// serverrun.go (its lifecycle), tls.go, bootstrap.go, xdslimits.go,
// clidocs.go (docs/cli.md). The agent's command is internal/agentcmd,
// which cairn-agent (cmd/cairn-agent) runs too; what the server and the
// agent set up alike is internal/daemon.
package cmd

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/cmd/internal/agentcmd"
	"github.com/cairn-sd/cairn/cmd/internal/daemon"
	"github.com/cairn-sd/cairn/internal/certs"
)

// Exit codes.
const (
	exitOK    = daemon.ExitOK
	exitError = daemon.ExitError // the request failed
	exitUsage = daemon.ExitUsage // bad flags or arguments
)

// Run runs the CLI with args and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return daemon.ExitCode(App(stdout, stderr).RunContext(ctx, args), stderr, "cairn")
}

// App builds the cairn command tree.
func App(stdout, stderr io.Writer) *cli.App {
	return &cli.App{
		Name:      "cairn",
		Usage:     "service discovery and health checks: DNS and xDS from a replicated registry",
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are printed once, by Run.
		ExitErrHandler: func(*cli.Context, error) {},
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Value: "http://127.0.0.1:8480", EnvVars: []string{"CAIRN_ADDR"}, Usage: "API address of a cairn server"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"CAIRN_TOKEN"}, Usage: "bearer token"},
			&cli.StringFlag{Name: "ca-file", EnvVars: []string{"CAIRN_CACERT"}, Usage: "CA bundle to verify the server's certificate with (https; an --addr without a scheme then means https)"},
			&cli.StringFlag{Name: "client-cert", EnvVars: []string{"CAIRN_CLIENT_CERT"}, Usage: "certificate to present to the server (needed for cairn join: a server's)"},
			&cli.StringFlag{Name: "client-key", EnvVars: []string{"CAIRN_CLIENT_KEY"}, Usage: "the client certificate's key"},
			&cli.StringFlag{Name: "tls-server-name", EnvVars: []string{"CAIRN_TLS_SERVER_NAME"}, DefaultText: "--addr's host", Usage: "name to verify the server's certificate for"},
			&cli.StringFlag{Name: "output", Aliases: []string{"o"}, Value: "table", Usage: "table or json"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usage("unknown command %q; see cairn --help", c.Args().First())
			}
			return cli.ShowAppHelp(c)
		},
		Before: func(c *cli.Context) error {
			if o := c.String("output"); o != "table" && o != "json" {
				return cli.Exit(fmt.Sprintf("--output: %q must be table or json", o), exitUsage)
			}
			return nil
		},
		Commands: []*cli.Command{
			serverCommand(),
			applyCommand(),
			registerCommand(),
			mutateCommand("renew", "renew an instance's lease"),
			mutateCommand("deregister", "remove an instance (fenced by incarnation)"),
			mutateCommand("drain", "drain an instance: out of DNS at once, removed after the drain window"),
			reportCommand(),
			servicesCommand(),
			endpointsCommand(),
			eventsCommand(),
			replayCommand(),
			rolloutCommand(),
			membersCommand(),
			joinCommand(),
			leaveCommand(),
			evacuateCommand(),
			evacuationsCommand(),
			regionCommand(),
			xdsBootstrapCommand(),
			agentcmd.Command(),
			kubeSyncCommand(),
			tlsCommand(),
		},
	}
}

// apiClient returns a client for the global --addr and --token, over
// TLS with --ca-file (and --client-cert, --client-key).
func apiClient(c *cli.Context) (*client.Client, error) {
	var tc *tls.Config
	if ca := c.String("ca-file"); ca != "" || c.String("client-cert") != "" {
		f, err := certs.Load(certs.Config{CAFile: ca, CertFile: c.String("client-cert"), KeyFile: c.String("client-key"),
			CAFlag: "--ca-file", CertFlag: "--client-cert", KeyFlag: "--client-key"})
		if err != nil {
			return nil, cli.Exit(err.Error(), exitUsage)
		}
		tc = f.ClientConfig(c.String("tls-server-name"))
	}
	addr := c.String("addr")
	if tc != nil && !c.IsSet("addr") {
		addr = strings.Replace(addr, "http://", "https://", 1)
	}
	cl, err := client.NewTLS(addr, c.String("token"), tc)
	if err != nil {
		return nil, cli.Exit("--addr: "+err.Error(), exitUsage)
	}
	return cl, nil
}

// failed maps a request error to exit code 1.
func failed(err error) error {
	if err == nil {
		return nil
	}
	return cli.Exit(err.Error(), exitError)
}

func usage(format string, args ...any) error {
	return cli.Exit(fmt.Sprintf(format, args...), exitUsage)
}
