package cmd

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/client"
	"github.com/cairn-sd/cairn/wire"
)

// serviceArg parses the positional NS/SVC.
func serviceArg(c *cli.Context) (string, string, error) {
	if c.NArg() != 1 {
		return "", "", usage("%s: want exactly one NS/SVC argument after the flags, got %d", c.Command.Name, c.NArg())
	}
	ns, svc, ok := strings.Cut(c.Args().First(), "/")
	if !ok || ns == "" || svc == "" || strings.Contains(svc, "/") {
		return "", "", usage("%s: %q is not NS/SVC", c.Command.Name, c.Args().First())
	}
	return ns, svc, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func table(w io.Writer, header string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func applyCommand() *cli.Command {
	return &cli.Command{
		Name:      "apply",
		Usage:     "apply service definitions (YAML, one service per document)",
		ArgsUsage: " ",
		Flags:     []cli.Flag{&cli.StringFlag{Name: "file", Aliases: []string{"f"}, Required: true, Usage: "YAML file, or - for standard input"}},
		Action: func(c *cli.Context) error {
			var (
				b   []byte
				err error
			)
			if f := c.String("file"); f == "-" {
				b, err = io.ReadAll(os.Stdin)
			} else {
				b, err = os.ReadFile(f)
			}
			if err != nil {
				return usage("--file: %v", err)
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			r, err := cl.Apply(c.Context, b)
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, r)
			}
			for _, s := range r.Services {
				fmt.Fprintf(c.App.Writer, "applied %s\n", s)
			}
			fmt.Fprintf(c.App.Writer, "revision: %d\n", r.Revision)
			return nil
		},
	}
}

// keyValues parses repeated NAME=VALUE flags.
func keyValues(flag string, vals []string) (map[string]string, error) {
	out := map[string]string{}
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" || val == "" {
			return nil, usage("--%s: %q is not NAME=VALUE", flag, v)
		}
		if _, dup := out[k]; dup {
			return nil, usage("--%s: %q is given twice", flag, k)
		}
		out[k] = val
	}
	return out, nil
}

func registerCommand() *cli.Command {
	return &cli.Command{
		Name:      "register",
		Usage:     "register an instance explicitly; prints its incarnation and lease deadline",
		ArgsUsage: "NS/SVC",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "instance", Required: true, Usage: "instance id (a DNS label)"},
			&cli.StringSliceFlag{Name: "address", Required: true, Usage: "IPv4 or IPv6 address (repeatable)"},
			&cli.StringSliceFlag{Name: "port", Required: true, Usage: "NAME=NUMBER for a port of the service (repeatable)"},
			&cli.StringFlag{Name: "region", Usage: "the instance's region (a DNS label): where locality-aware answers place it"},
			&cli.StringFlag{Name: "zone", Usage: "the instance's zone (a DNS label): where locality-aware answers place it"},
			&cli.IntFlag{Name: "weight", DefaultText: fmt.Sprint(wire.DefaultWeight), Usage: "base weight 1-65535"},
			&cli.DurationFlag{Name: "lease-ttl", DefaultText: "the service's lease_ttl", Usage: "lease TTL, 5s-24h"},
			&cli.StringFlag{Name: "registration-id", Usage: "names this registration (a boot id): a new id always gets a new incarnation"},
			&cli.DurationFlag{Name: "ramp", DefaultText: "none: the service's slow_start", Usage: "a deploy ramp for the new incarnation, whole seconds up to " +
				"1h: its slow start lasts the longer of this and the service's slow_start"},
			&cli.Uint64Flag{Name: "replaces", DefaultText: "none", Usage: "the incarnation this registration replaces, as register or endpoints printed it: " +
				"needed to change a live registration without --registration-id"},
		},
		Action: func(c *cli.Context) error {
			ns, svc, err := serviceArg(c)
			if err != nil {
				return err
			}
			ports, err := keyValues("port", c.StringSlice("port"))
			if err != nil {
				return err
			}
			// A value given is checked here: the defaults are for flags
			// left out, never for an explicit 0.
			if w := c.Int("weight"); c.IsSet("weight") && (w < 1 || w > 65535) {
				return usage("--weight: %d is out of range 1-65535", w)
			}
			if d := c.Duration("lease-ttl"); c.IsSet("lease-ttl") && (d < wire.MinLeaseTTL || d > wire.MaxLeaseTTL) {
				return usage("--lease-ttl: %s is out of range %s-%s", d, wire.MinLeaseTTL, wire.MaxLeaseTTL)
			}
			if err := wire.CheckRamp("--ramp", wire.Duration(c.Duration("ramp"))); err != nil {
				return usage("%v", err)
			}
			if c.IsSet("replaces") && c.Uint64("replaces") == 0 {
				return usage("--replaces: 0 is not an incarnation (incarnations start at 1)")
			}
			reg := wire.Registration{ID: c.String("instance"), Addresses: c.StringSlice("address"),
				Ports: map[string]int{}, Region: c.String("region"), Zone: c.String("zone"),
				Weight: c.Int("weight"), LeaseTTL: wire.Duration(c.Duration("lease-ttl")),
				RegistrationID: c.String("registration-id"), Replaces: c.Uint64("replaces"), Ramp: wire.Duration(c.Duration("ramp"))}
			for k, v := range ports {
				n, err := strconv.Atoi(v)
				if err != nil {
					return usage("--port: %s=%q: the port is not a number", k, v)
				}
				reg.Ports[k] = n
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			r, err := cl.Register(c.Context, ns, svc, reg)
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, r)
			}
			fmt.Fprintf(c.App.Writer, "instance: %s/%s/%s\nincarnation: %d\nlease_deadline: %s\n",
				ns, svc, r.ID, r.Incarnation, r.LeaseDeadline.Format(time.RFC3339))
			return nil
		},
	}
}

func instanceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "instance", Required: true, Usage: "instance id"},
		&cli.Uint64Flag{Name: "incarnation", Required: true, Usage: "the incarnation register printed"},
	}
}

func instanceKey(c *cli.Context) (wire.InstanceKey, error) {
	ns, svc, err := serviceArg(c)
	if err != nil {
		return wire.InstanceKey{}, err
	}
	return wire.InstanceKey{Namespace: ns, Service: svc, ID: c.String("instance")}, nil
}

func printInstance(c *cli.Context, in wire.Instance) error {
	if c.String("output") == "json" {
		return printJSON(c.App.Writer, in)
	}
	fmt.Fprintf(c.App.Writer, "instance: %s\nincarnation: %d\nlifecycle: %s\nlease_deadline: %s\n",
		in.Key(), in.Incarnation, in.Lifecycle, in.LeaseDeadline.Format(time.RFC3339))
	return nil
}

func mutateCommand(name, help string) *cli.Command {
	flags := instanceFlags()
	if name != "renew" {
		flags = append(flags, &cli.BoolFlag{Name: "force",
			Usage: "go past the service's disruption budget (policy.max_unavailable); the override is audited"})
	}
	return &cli.Command{
		Name:      name,
		Usage:     help,
		ArgsUsage: "NS/SVC",
		Flags:     flags,
		Action: func(c *cli.Context) error {
			key, err := instanceKey(c)
			if err != nil {
				return err
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			inc := c.Uint64("incarnation")
			var in wire.Instance
			switch name {
			case "renew":
				in, err = cl.Renew(c.Context, key, inc)
			case "drain":
				if c.Bool("force") {
					in, err = cl.ForceDrain(c.Context, key, inc)
				} else {
					in, err = cl.Drain(c.Context, key, inc)
				}
			default:
				if c.Bool("force") {
					in, err = cl.ForceDeregister(c.Context, key, inc)
				} else {
					in, err = cl.Deregister(c.Context, key, inc)
				}
			}
			if err != nil {
				return failed(err)
			}
			return printInstance(c, in)
		},
	}
}

func reportCommand() *cli.Command {
	return &cli.Command{
		Name:      "report",
		Usage:     "self-report readiness and dependency states",
		ArgsUsage: "NS/SVC",
		Flags: append(instanceFlags(),
			&cli.BoolFlag{Name: "ready", Required: true, Usage: "--ready=true or --ready=false"},
			&cli.StringSliceFlag{Name: "dependency", Usage: "NAME=ok|degraded|failed (repeatable)"},
		),
		Action: func(c *cli.Context) error {
			key, err := instanceKey(c)
			if err != nil {
				return err
			}
			kv, err := keyValues("dependency", c.StringSlice("dependency"))
			if err != nil {
				return err
			}
			deps := map[string]wire.DependencyState{}
			for k, v := range kv {
				deps[k] = wire.DependencyState(v)
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			in, err := cl.Report(c.Context, key, c.Uint64("incarnation"), c.Bool("ready"), deps)
			if err != nil {
				return failed(err)
			}
			return printInstance(c, in)
		},
	}
}

func servicesCommand() *cli.Command {
	return &cli.Command{
		Name:  "services",
		Usage: "list services",
		Action: func(c *cli.Context) error {
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			ss, err := cl.Services(c.Context)
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, ss)
			}
			var rows [][]string
			for _, s := range ss {
				rows = append(rows, []string{s.Namespace + "/" + s.Name, fmt.Sprint(s.Instances), fmt.Sprint(s.Eligible), fmt.Sprint(s.Revision)})
			}
			return table(c.App.Writer, "SERVICE\tINSTANCES\tELIGIBLE\tREVISION", rows)
		},
	}
}

func endpointsCommand() *cli.Command {
	return &cli.Command{
		Name:      "endpoints",
		Usage:     "endpoints of a service: the verdict, eligibility, weight and tier DNS and xDS serve, the evaluator's verdict beside them",
		ArgsUsage: "NS/SVC",
		Flags: []cli.Flag{&cli.BoolFlag{Name: "consistent",
			Usage: "a linearizable read: answered by the leader (the server asked forwards it) once a quorum confirms it leads, so it holds every write acknowledged before it; the store's instances only, with the leader's verdicts; fails (503 no_leader) when no leader can confirm"}},
		Action: func(c *cli.Context) error {
			ns, svc, err := serviceArg(c)
			if err != nil {
				return err
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			var opts []client.ReadOption
			server := "this server"
			if c.Bool("consistent") {
				opts, server = append(opts, client.Consistent()), "the leader"
			}
			es, err := cl.Endpoints(c.Context, ns, svc, opts...)
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, es)
			}
			var rows [][]string
			var tableVersion, tableRevision uint64
			for _, e := range es {
				lease := "expired"
				if !e.LeaseExpired {
					lease = time.Until(e.LeaseDeadline).Round(time.Second).String()
				}
				tier := "-"
				if e.Tier != nil {
					tier = fmt.Sprint(*e.Tier)
				}
				rows = append(rows, []string{e.InstanceID, fmt.Sprint(e.Incarnation), strings.Join(e.Addresses, ","),
					zoneCell(e), e.Lifecycle.String(), e.Verdict.String(), fmt.Sprint(e.Eligible), fmt.Sprint(e.Weight), tier,
					evaluatorSummary(e), lease, orDash(evidenceSummary(e, time.Now())), orDash(strings.Join(e.Reasons, "; "))})
				tableVersion, tableRevision = e.TableVersion, e.TableRevision
			}
			if err := table(c.App.Writer, "INSTANCE\tINCARNATION\tADDRESSES\tZONE\tLIFECYCLE\tVERDICT\tELIGIBLE\tWEIGHT\tTIER\tEVALUATOR\tLEASE\tEVIDENCE\tREASONS", rows); err != nil {
				return err
			}
			if tableVersion > 0 {
				fmt.Fprintf(c.App.Writer, "served by %s's DNS and xDS: status table version %d (store revision %d); tier from %[1]s's locality\n",
					server, tableVersion, tableRevision)
			}
			detail, err := cl.Service(c.Context, ns, svc, opts...)
			if err != nil {
				return failed(err)
			}
			if b := detail.Budget; b != nil {
				fmt.Fprintln(c.App.Writer, budgetLine(*b))
			}
			subs, err := cl.Subscribers(c.Context, ns, svc)
			if err != nil {
				return failed(err)
			}
			_, err = fmt.Fprintln(c.App.Writer, subscribersLine(subs))
			return err
		},
	}
}

// zoneCell is the endpoint's zone, and what an evacuation does to it:
// "a (evacuated)", "a (returning, 30%)".
func zoneCell(e wire.Endpoint) string {
	switch {
	case e.Evacuation == "evacuated":
		return orDash(e.Zone) + " (evacuated)"
	case e.Evacuation != "" && e.Share != nil:
		return fmt.Sprintf("%s (%s, %.0f%%)", orDash(e.Zone), e.Evacuation, *e.Share*100)
	}
	return orDash(e.Zone)
}

// evaluatorSummary is the evaluator's committed verdict beside what is
// served: "healthy, eligible", "unhealthy, withdrawn"; "-" before its
// first verdict.
func evaluatorSummary(e wire.Endpoint) string {
	v := e.Evaluator
	if v == nil {
		return "-"
	}
	if v.Eligible {
		return v.Verdict.String() + ", eligible"
	}
	return v.Verdict.String() + ", withdrawn"
}

// budgetLine is the disruption budget in use: "disruption budget:
// max_unavailable 2 of 10 instances, 1 in use: i1 (draining)".
func budgetLine(b wire.DisruptionBudget) string {
	if b.InUse == 0 {
		return fmt.Sprintf("disruption budget: %s, none in use", b.Describe())
	}
	return fmt.Sprintf("disruption budget: %s, %d in use: %s", b.Describe(), b.InUse, b.Holders())
}

// subscribersLine says which revisions the xDS subscribers of the
// server asked hold: "xDS subscribers on this server: 3, 1 behind
// (revision 1042: 2; revision 1040: 1, 1 behind)".
func subscribersLine(s wire.XDSSubscribers) string {
	if s.Subscribers == 0 {
		return "xDS subscribers on this server: none"
	}
	var parts []string
	for _, r := range s.Revisions {
		p := fmt.Sprintf("revision %d: %d", r.Revision, r.Subscribers)
		if r.Behind > 0 {
			p += fmt.Sprintf(", %d behind", r.Behind)
		}
		parts = append(parts, p)
	}
	return fmt.Sprintf("xDS subscribers on this server: %d, %d behind (%s)", s.Subscribers, s.Behind, strings.Join(parts, "; "))
}

// evidenceSummary is the freshest evidence per class with its age:
// "probe ok 1s (node-a), report ready 12s". A follower holds no per-class
// evidence; it shows what the committed verdict was decided on.
func evidenceSummary(e wire.Endpoint, now time.Time) string {
	age := func(t time.Time) string { return now.Sub(t).Round(time.Second).String() }
	var parts []string
	seen := map[string]bool{}
	for _, ev := range e.Evidence { // freshest first within each class
		if seen[ev.Class] {
			continue
		}
		seen[ev.Class] = true
		res := "fail"
		if ev.OK {
			res = "ok"
		}
		parts = append(parts, fmt.Sprintf("%s %s %s (%s)", ev.Class, res, age(ev.At), ev.Observer))
	}
	if r := e.Report; r != nil {
		res := "not-ready"
		if r.Ready {
			res = "ready"
		}
		parts = append(parts, fmt.Sprintf("report %s %s", res, age(r.At)))
	}
	if len(parts) == 0 && e.VerdictEvidence != nil {
		v := e.VerdictEvidence
		parts = append(parts, fmt.Sprintf("%s %s (%s)", v.Class, age(v.At), v.Observer))
	}
	return strings.Join(parts, ", ")
}

func eventsCommand() *cli.Command {
	return &cli.Command{
		Name:      "events",
		Usage:     "the audit trail of a service",
		ArgsUsage: "NS/SVC",
		Flags:     []cli.Flag{&cli.IntFlag{Name: "limit", Value: 100, Usage: "newest N events"}},
		Action: func(c *cli.Context) error {
			ns, svc, err := serviceArg(c)
			if err != nil {
				return err
			}
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			ev, err := cl.Events(c.Context, ns, svc, c.Int("limit"))
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, ev)
			}
			var rows [][]string
			for _, e := range ev {
				change := ""
				if e.From != "" || e.To != "" {
					change = orDash(e.From) + " -> " + orDash(e.To)
				}
				inst := e.Instance
				if e.Incarnation > 0 {
					inst += "#" + fmt.Sprint(e.Incarnation)
				}
				rows = append(rows, []string{e.At.Local().Format(time.RFC3339), string(e.Kind), orDash(inst), orDash(change), orDash(e.Reason), e.Actor})
			}
			return table(c.App.Writer, "TIME\tKIND\tINSTANCE\tCHANGE\tREASON\tACTOR", rows)
		},
	}
}

func membersCommand() *cli.Command {
	return &cli.Command{
		Name:  "members",
		Usage: "list the cluster's servers",
		Action: func(c *cli.Context) error {
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			ms, err := cl.Members(c.Context)
			if err != nil {
				return failed(err)
			}
			if c.String("output") == "json" {
				return printJSON(c.App.Writer, ms)
			}
			var rows [][]string
			for _, m := range ms {
				role := "follower"
				if m.Leader {
					role = "leader"
				}
				rows = append(rows, []string{m.NodeID, m.RaftAddr, orDash(m.HTTPAddr), role})
			}
			return table(c.App.Writer, "NODE\tRAFT\tHTTP\tROLE", rows)
		},
	}
}

func joinCommand() *cli.Command {
	return &cli.Command{
		Name:  "join",
		Usage: "add a server to the cluster (a server started with --join does this itself)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "node-id", Required: true, Usage: "the server's --node-id"},
			&cli.StringFlag{Name: "raft-addr", Required: true, Usage: "the server's raft address (HOST:PORT), as peers reach it"},
			&cli.StringFlag{Name: "http-addr", Required: true, Usage: "the server's API address (HOST:PORT), as peers reach it"},
		},
		Action: func(c *cli.Context) error {
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			m := wire.Member{NodeID: c.String("node-id"), RaftAddr: c.String("raft-addr"), HTTPAddr: c.String("http-addr")}
			if err := cl.Join(c.Context, m); err != nil {
				return failed(err)
			}
			fmt.Fprintf(c.App.Writer, "joined %s\n", m.NodeID)
			return nil
		},
	}
}

func leaveCommand() *cli.Command {
	return &cli.Command{
		Name:  "leave",
		Usage: "remove a server from the cluster",
		Flags: []cli.Flag{&cli.StringFlag{Name: "node-id", Required: true, Usage: "the server's --node-id"}},
		Action: func(c *cli.Context) error {
			cl, err := apiClient(c)
			if err != nil {
				return err
			}
			if err := cl.Leave(c.Context, c.String("node-id")); err != nil {
				return failed(err)
			}
			fmt.Fprintf(c.App.Writer, "removed %s\n", c.String("node-id"))
			return nil
		},
	}
}
