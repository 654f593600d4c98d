package cmd

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/wire"
)

// replayCommand is `cairn replay`: what the node asked told a caller in
// a place about a service at a time of the past, and why.
func replayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "what the node told a caller about a service at a time of the past (DNS answers, xDS assignments), and why",
		ArgsUsage: "NS/SVC",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "at", Usage: "RFC 3339 time, or a duration before now (-90s)"},
			&cli.Uint64Flag{Name: "revision", Usage: "store revision (the first part of an xDS version) instead of --at"},
			&cli.StringFlag{Name: "version", Usage: "an xDS version cairn sent (<revision>-<digest>) instead of --at: the state it came from"},
			&cli.StringFlag{Name: "region", DefaultText: "the node's", Usage: "the caller's region"},
			&cli.StringFlag{Name: "zone", DefaultText: "the node's", Usage: "the caller's zone"},
			&cli.StringFlag{Name: "instance", Usage: "show this instance's changes and events, five minutes either side"},
		},
		Action: func(c *cli.Context) error {
			ns, svc, err := serviceArg(c)
			if err != nil {
				return err
			}
			q := wire.ReplayQuery{Namespace: ns, Service: svc, Region: c.String("region"), Zone: c.String("zone"), Instance: c.String("instance")}
			given := 0
			for _, f := range []string{"at", "revision", "version"} {
				if c.IsSet(f) {
					given++
				}
			}
			if given != 1 {
				return usage("replay: give exactly one of --at, --revision and --version")
			}
			switch {
			case c.IsSet("at"):
				if q.At, err = wire.ParseReplayTime(c.String("at"), time.Now()); err != nil {
					return usage("replay: --at: %v", err)
				}
			case c.IsSet("revision"):
				if q.Revision = c.Uint64("revision"); q.Revision == 0 {
					return usage("replay: --revision: must be a store revision, from 1")
				}
			default:
				if q.Revision, q.Digest, err = wire.ParseReplayVersion(c.String("version")); err != nil {
					return usage("replay: --version: %v", err)
				}
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			r, err := cl.Replay(c.Context, q)
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, r)
			}
			return printReplay(c, r)
		},
	}
}

// printReplay writes a replay as tables: the table in force, the
// endpoints, the DNS answers, the xDS assignments, then what changed.
func printReplay(c *cli.Context, r wire.Replay) error {
	w := c.App.Writer
	place := "the node's place"
	if r.Region != "" || r.Zone != "" {
		place = orDash(r.Region) + "/" + orDash(r.Zone)
	}
	fmt.Fprintf(w, "%s/%s at %s, for a caller in %s\n", r.Namespace, r.Service, r.At.Local().Format(time.RFC3339Nano), place)
	fresh := r.Freshness
	if !r.SyncedAt.IsZero() {
		fresh += ", last synced " + r.SyncedAt.Local().Format(time.RFC3339)
	}
	fmt.Fprintf(w, "table %d (store revision %d), built %s; the node was %s\n", r.TableVersion, r.TableRevision,
		r.TableBuilt.Local().Format(time.RFC3339Nano), fresh)
	if r.Matched != nil {
		fmt.Fprintf(w, "%d state(s) at that revision; the version's digest matched: %v\n", r.Candidates, *r.Matched)
	}
	if r.HealthDisregarded {
		fmt.Fprintln(w, "health disregarded: the guard served endpoints whatever their health")
	}
	fmt.Fprintln(w)
	var rows [][]string
	for _, e := range r.Endpoints {
		why := orDash(e.Reason)
		if t := e.Transition; t != nil {
			why = fmt.Sprintf("%s: %s -> %s (%s)", t.At.Local().Format(time.TimeOnly), orDash(t.From), orDash(t.To), orDash(t.Reason))
			if ev := t.Evidence; ev != nil && e.EvidenceAgeSeconds != nil {
				why += fmt.Sprintf(", %s by %s, %.0fs old", ev.Class, ev.Observer, *e.EvidenceAgeSeconds)
			}
		}
		rows = append(rows, []string{e.InstanceID, strings.Join(e.Addresses, ","), orDash(e.Zone), strconv.Itoa(e.Tier),
			e.Verdict.String(), e.Lifecycle.String(), strconv.FormatBool(e.Eligible), strconv.Itoa(e.Weight), why})
	}
	if err := table(w, "INSTANCE\tADDRESSES\tZONE\tTIER\tVERDICT\tLIFECYCLE\tELIGIBLE\tWEIGHT\tLAST TRANSITION", rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows = nil
	for _, d := range r.DNS {
		answer := strings.Join(d.Answer, "\n\t\t\t")
		if d.Sampled {
			answer += " (a sample, by weight)"
		}
		if len(d.EDE) > 0 {
			d.Rcode += " EDE " + strings.Join(d.EDE, "; ")
		}
		rows = append(rows, []string{d.Name, d.Type, d.Rcode, orDash(answer)})
	}
	if err := table(w, "NAME\tTYPE\tRCODE\tANSWER", rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows = nil
	for _, x := range r.XDS {
		for _, e := range x.Endpoints {
			rows = append(rows, []string{x.Cluster, x.Version, e.Address, orDash(e.Zone), strconv.Itoa(e.Priority), strconv.Itoa(e.Weight), e.Health})
		}
		if len(x.Endpoints) == 0 {
			rows = append(rows, []string{x.Cluster, x.Version, "-", "-", "-", "-", "-"})
		}
	}
	if err := table(w, "CLUSTER\tVERSION\tENDPOINT\tZONE\tPRIORITY\tWEIGHT\tHEALTH", rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows = nil
	for _, ch := range r.Changes {
		rows = append(rows, []string{ch.At.Local().Format(time.RFC3339Nano), strconv.FormatUint(ch.TableVersion, 10), ch.InstanceID,
			endpointState(ch.Before) + " -> " + endpointState(ch.After)})
	}
	return table(w, "CHANGED\tTABLE\tINSTANCE\tSTATE", rows)
}

// endpointState is one side of a change: "-" when absent.
func endpointState(e *wire.ReplayEndpoint) string {
	if e == nil {
		return "-"
	}
	s := fmt.Sprintf("%s %s", e.Verdict, e.Lifecycle)
	if e.Eligible {
		s += fmt.Sprintf(" eligible w%d", e.Weight)
	} else {
		s += " out"
	}
	return s
}
