package cmd

import (
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/wire"
)

func evacuateCommand() *cli.Command {
	return &cli.Command{
		Name: "evacuate",
		Usage: "shift traffic away from a zone, reversibly: its instances stay registered, probed and eligible, and go last " +
			"for every caller; --undo brings the zone back over its services' shift_back, in steps",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "zone", Required: true, Usage: "the zone to evacuate"},
			&cli.StringFlag{Name: "region", DefaultText: "every region", Usage: "the zone in this region only"},
			&cli.StringFlag{Name: "service", DefaultText: "every service", Usage: "NS/SVC: evacuate the zone for this service only"},
			&cli.StringFlag{Name: "reason", Usage: "why, for the audit trail and cairn evacuations"},
			&cli.DurationFlag{Name: "expires", DefaultText: wire.DefaultEvacuationExpiry.String(),
				Usage: "end the evacuation after this long if nobody undoes it (at most " + wire.MaxEvacuationExpiry.String() + ")"},
			&cli.BoolFlag{Name: "force", Usage: "evacuate even when the rest of a service could not carry it or it exceeds a disruption budget (audited)"},
			&cli.BoolFlag{Name: "undo", Usage: "end the evacuation of exactly this scope: the zone starts to return"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 0 {
				return usage("evacuate: takes no arguments (name a service with --service NS/SVC), got %q", c.Args().First())
			}
			req := wire.EvacuateRequest{Zone: c.String("zone"), Region: c.String("region"), Reason: c.String("reason"),
				Expires: wire.Duration(c.Duration("expires")), Force: c.Bool("force"), Undo: c.Bool("undo")}
			var err error
			if req.Namespace, req.Service, err = serviceFlag(c, "evacuate"); err != nil {
				return err
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			e, err := cl.Evacuate(c.Context, req)
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, e)
			}
			if req.Undo {
				_, err = fmt.Fprintf(c.App.Writer, "%s: returning over its services' shift_back (id %d)\n", e.Scope(), e.ID)
				return err
			}
			_, err = fmt.Fprintf(c.App.Writer, "%s: evacuated until %s (id %d)%s\n", e.Scope(),
				e.ExpiresAt.Local().Format(time.RFC3339), e.ID, noteOf(e))
			return err
		},
	}
}

func noteOf(e wire.EvacuationView) string {
	if e.Note == "" {
		return ""
	}
	return "; " + e.Note
}

func evacuationsCommand() *cli.Command {
	return &cli.Command{
		Name:  "evacuations",
		Usage: "the evacuations in force, and regions' failovers (TO): scope, state, who, when, why, expiry",
		Action: func(c *cli.Context) error {
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			es, err := cl.Evacuations(c.Context)
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, es)
			}
			var rows [][]string
			for _, e := range es {
				service := "*"
				if e.Service != "" {
					service = e.Namespace + "/" + e.Service
				}
				zone := e.Zone
				if e.To != "" {
					zone = "*" // a region's failover: every zone
				}
				rows = append(rows, []string{fmt.Sprint(e.ID), orDash(e.Region), zone, orDash(e.To), service, evacuationState(e),
					e.Actor, e.StartedAt.Local().Format(time.RFC3339), e.ExpiresAt.Local().Format(time.RFC3339), orDash(e.Reason)})
			}
			return table(c.App.Writer, "ID\tREGION\tZONE\tTO\tSERVICE\tSTATE\tBY\tSINCE\tEXPIRES\tREASON", rows)
		},
	}
}

// evacuationState is the state with what a reader needs beside it:
// "evacuated, forced", "returning for 1m10s", "paused: …".
func evacuationState(e wire.EvacuationView) string {
	s := e.State
	switch e.State {
	case "returning":
		s += " for " + e.Returned.D().Round(time.Second).String() + " (ended by " + e.EndedBy + ")"
	case "paused":
		s += ": " + e.PauseReason
	}
	if e.Forced {
		s += ", forced"
	}
	return s
}

// serviceFlag reads a command's optional --service NS/SVC: both empty
// when it is not given.
func serviceFlag(c *cli.Context, command string) (ns, svc string, err error) {
	s := c.String("service")
	if s == "" {
		return "", "", nil
	}
	ns, svc, ok := strings.Cut(s, "/")
	if !ok || ns == "" || svc == "" || strings.Contains(svc, "/") {
		return "", "", usage("%s: --service %q is not NS/SVC", command, s)
	}
	return ns, svc, nil
}
