package cmd

import (
	"fmt"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/wire"
)

func rolloutCommand() *cli.Command {
	return &cli.Command{
		Name:  "rollout",
		Usage: "rollouts of a service: its newest registrations coming into rotation",
		Subcommands: []*cli.Command{{
			Name: "status",
			Usage: "how many instances of the newest rollout are in rotation, ramping or at full weight, as this server " +
				"serves them (the latest set: registered since the newest rollout began, marked *)",
			ArgsUsage: "NS/SVC",
			Action: func(c *cli.Context) error {
				ns, svc, err := serviceArg(c)
				if err != nil {
					return err
				}
				cl, err := apiClient(c)
				if err != nil {
					return err
				}
				ro, err := cl.Rollout(c.Context, ns, svc)
				if err != nil {
					return failed(err)
				}
				if c.String("output") == "json" {
					return printJSON(c.App.Writer, ro)
				}
				return printRollout(c, ro)
			},
		}},
	}
}

// printRollout writes ro as a table and a summary line.
func printRollout(c *cli.Context, ro wire.Rollout) error {
	var rows [][]string
	for _, in := range ro.Instances {
		mark := ""
		if in.Latest {
			mark = "*"
		}
		ramp := "-"
		if in.Ramp != 0 {
			ramp = in.Ramp.String()
		}
		rows = append(rows, []string{mark, in.InstanceID, fmt.Sprint(in.Incarnation), in.RegisteredAt.Format(time.RFC3339),
			in.Lifecycle.String(), in.Verdict.String(), fmt.Sprint(in.Eligible), fmt.Sprintf("%d/%d", in.Weight, in.BaseWeight),
			fmt.Sprintf("%d%%", in.RampPercent), ramp, in.SlowStart.String(), in.Phase})
	}
	if err := table(c.App.Writer, "LATEST\tINSTANCE\tINCARNATION\tREGISTERED\tLIFECYCLE\tVERDICT\tELIGIBLE\tWEIGHT\tRAMP%\tRAMP\tSLOW_START\tPHASE", rows); err != nil {
		return err
	}
	s := ro.Summary
	if s.Latest == 0 {
		_, err := fmt.Fprintln(c.App.Writer, "no live instances")
		return err
	}
	state := "in progress"
	if s.Complete {
		state = "complete"
	}
	_, err := fmt.Fprintf(c.App.Writer, "rollout since %s: %d of %d instances; %d in rotation (%d at full weight, %d ramping), %d not eligible; %s "+
		"(status table version %d)\n", ro.StartedAt.Format(time.RFC3339), s.Latest, s.Instances, s.InRotation, s.FullWeight, s.Ramping,
		s.NotEligible, state, ro.TableVersion)
	return err
}
