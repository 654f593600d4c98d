package cmd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/internal/durable"
	"github.com/cairn-sd/cairn/internal/pki"
)

// Names of the files `cairn tls` writes.
const (
	caCertFile = "cairn-ca.pem"
	caKeyFile  = "cairn-ca-key.pem"
)

func tlsCommand() *cli.Command {
	return &cli.Command{
		Name:  "tls",
		Usage: "make a private CA and the certificates servers and clients present",
		Subcommands: []*cli.Command{
			{
				Name:  "ca",
				Usage: "the certificate authority",
				Subcommands: []*cli.Command{{
					Name:  "create",
					Usage: "write " + caCertFile + " and " + caKeyFile + " (keep the key offline; hand out the certificate)",
					Flags: []cli.Flag{
						&cli.StringFlag{Name: "dir", Value: ".", Usage: "folder to write the files in"},
						&cli.StringFlag{Name: "common-name", Value: "cairn CA", Usage: "the CA's name"},
						&cli.DurationFlag{Name: "validity", Value: 5 * 365 * 24 * time.Hour, Usage: "how long the CA is valid"},
					},
					Action: func(c *cli.Context) error {
						ca, err := pki.NewCA(c.String("common-name"), c.Duration("validity"), time.Now())
						if err != nil {
							return usage("--%v", err)
						}
						return writePEM(c, c.String("dir"), strings.TrimSuffix(caCertFile, ".pem"), ca)
					},
				}},
			},
			{
				Name:  "cert",
				Usage: "certificates signed by the CA",
				Subcommands: []*cli.Command{{
					Name:  "create",
					Usage: "write a server's (--server) or a client's (--client) certificate and key, signed by the CA",
					Flags: []cli.Flag{
						&cli.BoolFlag{Name: "server", Usage: "a server's certificate: names " + "server.cairn, localhost and loopback, for server and client authentication"},
						&cli.BoolFlag{Name: "client", Usage: "a client's certificate (CLI, agents, Envoys): client authentication only"},
						&cli.StringFlag{Name: "ca", Value: caCertFile, Usage: "the CA's certificate"},
						&cli.StringFlag{Name: "ca-key", Value: caKeyFile, Usage: "the CA's key"},
						&cli.StringFlag{Name: "dir", Value: ".", Usage: "folder to write the files in"},
						&cli.StringFlag{Name: "name", DefaultText: "server-cairn-N or client-cairn-N, the first N free", Usage: "file name and common name"},
						&cli.StringSliceFlag{Name: "dns", Usage: "a DNS name the server is reached by (repeatable)"},
						&cli.StringSliceFlag{Name: "ip", Usage: "an IP address the server is reached on (repeatable)"},
						&cli.DurationFlag{Name: "validity", Value: 365 * 24 * time.Hour, Usage: "how long the certificate is valid"},
					},
					Action: certCreate,
				}},
			},
		},
	}
}

func certCreate(c *cli.Context) error {
	if c.Bool("server") == c.Bool("client") {
		return usage("give one of --server or --client")
	}
	role := "client"
	if c.Bool("server") {
		role = "server"
	}
	var ips []net.IP
	for _, s := range c.StringSlice("ip") {
		ip := net.ParseIP(s)
		if ip == nil {
			return usage("--ip: %q is not an IP address", s)
		}
		ips = append(ips, ip)
	}
	certPEM, err := os.ReadFile(c.String("ca"))
	if err != nil {
		return usage("--ca: %v", err)
	}
	keyPEM, err := os.ReadFile(c.String("ca-key"))
	if err != nil {
		return usage("--ca-key: %v", err)
	}
	dir := c.String("dir")
	name := c.String("name")
	if name == "" {
		for i := 0; ; i++ {
			name = fmt.Sprintf("%s-cairn-%d", role, i)
			if _, err := os.Stat(filepath.Join(dir, name+".pem")); errors.Is(err, os.ErrNotExist) {
				break
			}
		}
	}
	p, err := pki.NewCert(pki.PEM{Cert: certPEM, Key: keyPEM}, pki.Request{Server: role == "server", CommonName: name,
		DNSNames: c.StringSlice("dns"), IPs: ips, Validity: c.Duration("validity")}, time.Now())
	if err != nil {
		return usage("--ca %s, --ca-key %s: %v", c.String("ca"), c.String("ca-key"), err)
	}
	return writePEM(c, dir, name, p)
}

// writePEM writes name.pem and name-key.pem (0600) in dir, refusing to
// replace either.
func writePEM(c *cli.Context, dir, name string, p pki.PEM) error {
	cert, key := filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	for _, f := range []string{cert, key} {
		if _, err := os.Stat(f); err == nil {
			return failed(fmt.Errorf("%s exists: not replaced", f))
		}
	}
	if err := durable.WriteFile(key, p.Key, 0o600); err != nil {
		return failed(err)
	}
	if err := durable.WriteFile(cert, p.Cert, 0o644); err != nil {
		return failed(err)
	}
	_, err := fmt.Fprintf(c.App.Writer, "wrote %s\nwrote %s\n", cert, key)
	return err
}
