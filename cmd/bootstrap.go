package cmd

import (
	"cmp"
	"fmt"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/xdsserver"
)

func xdsBootstrapCommand() *cli.Command {
	return &cli.Command{
		Name:  "xds-bootstrap",
		Usage: "print a gRPC xDS bootstrap: GRPC_XDS_BOOTSTRAP_CONFIG for a client that dials xds:///<svc>.<ns>",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "xds-addr", DefaultText: "the gRPC address the server at --addr reports", Usage: "the server's --grpc-addr, as the client reaches it"},
			&cli.StringFlag{Name: "node-id", DefaultText: "this host's name", Usage: "the client's node id"},
			&cli.StringFlag{Name: "region", Usage: "the client's region"},
			&cli.StringFlag{Name: "zone", Usage: "the client's zone"},
			&cli.StringFlag{Name: "tls-ca", DefaultText: "the CLI's --ca-file", Usage: "TLS: the CA bundle the client verifies the server with (a path on the client's host); the server's certificate must name --xds-addr's host"},
			&cli.StringFlag{Name: "tls-cert", DefaultText: "the CLI's --client-cert", Usage: "TLS: the client's certificate (cairn tls cert create --client)"},
			&cli.StringFlag{Name: "tls-key", DefaultText: "the CLI's --client-key", Usage: "TLS: the client certificate's key"},
		},
		Action: func(c *cli.Context) error {
			node := c.String("node-id")
			if node == "" {
				h, err := os.Hostname()
				if err != nil {
					return cli.Exit("--node-id: not given, and this host has no name: "+err.Error(), exitUsage)
				}
				node = h
			}
			server, err := xdsAddr(c)
			if err != nil {
				return err
			}
			b, err := xdsserver.Bootstrap(xdsserver.BootstrapConfig{Server: server, NodeID: node,
				Region: c.String("region"), Zone: c.String("zone"),
				// A CLI that speaks TLS to the servers (CAIRN_CACERT) prints a
				// bootstrap that does too.
				CAFile: cmp.Or(c.String("tls-ca"), c.String("ca-file")), CertFile: cmp.Or(c.String("tls-cert"), c.String("client-cert")),
				KeyFile: cmp.Or(c.String("tls-key"), c.String("client-key"))})
			if err != nil {
				return cli.Exit(err.Error(), exitUsage)
			}
			_, err = fmt.Fprintf(c.App.Writer, "%s\n", b)
			return err
		},
	}
}

// xdsAddrRetry bounds how long xds-bootstrap keeps asking a server that
// refuses the connection for its gRPC address.
const xdsAddrRetry = 2 * time.Second

// xdsAddr is the xDS server a bootstrap points at: --xds-addr, or else
// the gRPC address the server at --addr reports in GET /v1/status, with
// its host when that address is a wildcard (0.0.0.0:8481 is reached at
// the host the CLI reached). It says on stderr which it used and where
// it came from, so that stdout stays a bootstrap.
func xdsAddr(c *cli.Context) (string, error) {
	if c.IsSet("xds-addr") {
		a := c.String("xds-addr")
		if _, _, err := net.SplitHostPort(a); err != nil {
			return "", usage("--xds-addr: %q is not HOST:PORT", a)
		}
		fmt.Fprintf(c.App.ErrWriter, "xds-bootstrap: xDS server %s (--xds-addr)\n", a)
		return a, nil
	}
	cl, err := apiClient(c)
	if err != nil {
		return "", err
	}
	defer cl.Close()
	cl.RetryFor = xdsAddrRetry
	hint := "; name the xDS server with --xds-addr HOST:PORT"
	st, err := cl.Status(c.Context)
	if err != nil {
		return "", failed(fmt.Errorf("asking the server at --addr %s for its gRPC address: %w%s", c.String("addr"), err, hint))
	}
	host, port, err := net.SplitHostPort(st.GRPCAddr)
	if err != nil {
		return "", failed(fmt.Errorf("the server at --addr %s reports no gRPC address (grpc_addr %q in GET /v1/status)%s",
			c.String("addr"), st.GRPCAddr, hint))
	}
	from := fmt.Sprintf("the gRPC address the server at --addr %s reports", c.String("addr"))
	if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
		host = cl.Hostname()
		from += fmt.Sprintf(" (%s: every interface, reached at --addr's host)", st.GRPCAddr)
	}
	a := net.JoinHostPort(host, port)
	fmt.Fprintf(c.App.ErrWriter, "xds-bootstrap: xDS server %s, %s\n", a, from)
	return a, nil
}
