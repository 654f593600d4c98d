package cmd

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/wire"
)

func regionCommand() *cli.Command {
	return &cli.Command{
		Name:  "region",
		Usage: "this server's region, the other regions it follows (--peer-region), and failing its callers over to one of them",
		Subcommands: []*cli.Command{
			{
				Name:  "list",
				Usage: "this server's region and the regions it follows: connected, stale, how old its view of each is",
				Action: func(c *cli.Context) error {
					cl, err := apiClient(c)
					if err != nil {
						return err
					}
					rs, err := cl.Regions(c.Context)
					if err != nil {
						return failed(err)
					}
					if c.String("output") == "json" {
						return printJSON(c.App.Writer, rs)
					}
					rows := [][]string{{orDash(rs.Region), "(this server's)", "-", "-", "-", "-", "-"}}
					for _, p := range rs.Peers {
						state := "fresh"
						switch {
						case p.Restored:
							state = "restored from disk"
						case p.Stale:
							state = "stale"
						}
						rows = append(rows, []string{p.Region, orDash(p.Server), fmt.Sprint(p.Connected), state,
							(time.Duration(p.AgeSeconds * float64(time.Second))).Round(time.Millisecond).String(),
							fmt.Sprint(p.Revision), fmt.Sprint(p.Instances)})
					}
					return table(c.App.Writer, "REGION\tSERVER\tCONNECTED\tVIEW\tAGE\tREVISION\tINSTANCES", rows)
				},
			},
			failoverCommand(),
		},
	}
}

func failoverCommand() *cli.Command {
	return &cli.Command{
		Name: "failover",
		Usage: "give this region's callers another region's endpoints first, checked against that region's capacity; " +
			"--undo brings the region's own back over its services' shift_back, in steps",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "from", Required: true, Usage: "the region failing over: the region of the server asked"},
			&cli.StringFlag{Name: "to", Required: true, Usage: "the region its callers are given first (one the server follows)"},
			&cli.StringFlag{Name: "service", DefaultText: "every service", Usage: "NS/SVC: fail over this service only"},
			&cli.StringFlag{Name: "reason", Usage: "why, for the audit trail and cairn evacuations"},
			&cli.DurationFlag{Name: "expires", DefaultText: wire.DefaultEvacuationExpiry.String(),
				Usage: "end the failover after this long if nobody undoes it (at most " + wire.MaxEvacuationExpiry.String() + ")"},
			&cli.BoolFlag{Name: "force", Usage: "fail over even when the other region's eligible instances are too few, or its view is stale (audited)"},
			&cli.BoolFlag{Name: "undo", Usage: "end the failover of exactly this scope: the region's own instances come back"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usage("region failover: takes no arguments (name a service with --service NS/SVC), got %q", c.Args().First())
			}
			req := wire.FailoverRequest{From: c.String("from"), To: c.String("to"), Reason: c.String("reason"),
				Expires: wire.Duration(c.Duration("expires")), Force: c.Bool("force"), Undo: c.Bool("undo")}
			var err error
			if req.Namespace, req.Service, err = serviceFlag(c, "region failover"); err != nil {
				return err
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			e, err := cl.Failover(c.Context, req)
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, e)
			}
			if req.Undo {
				_, err = fmt.Fprintf(c.App.Writer, "%s: ended; the region's own instances return over their services' shift_back (id %d)\n", e.Scope(), e.ID)
				return err
			}
			_, err = fmt.Fprintf(c.App.Writer, "%s: in force until %s (id %d); %s%s\n", e.Scope(),
				e.ExpiresAt.Local().Format(time.RFC3339), e.ID, e.Capacity, noteOf(e))
			return err
		},
	}
}
