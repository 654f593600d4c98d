package cmd

import (
	"io"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// TestFlagHelp: every flag of every command, subcommands included, has a
// help text and states its default once (issue 29, item 8).
//
// The rule: a flag's default is stated by urfave alone, as "(default: X)"
// after the help text, from the flag's Value or, where the default is
// computed (from --dev, another flag, the data dir) or means "none", from
// its DefaultText. So Usage never contains the word "default" (the two
// would disagree the day one changes), and the line --help prints holds
// "default" at most once. A flag whose zero Value is not what an unset
// flag does must set DefaultText; that the test cannot see.
func TestFlagHelp(t *testing.T) {
	app := App(io.Discard, io.Discard)
	n := 0
	check := func(where string, flags []cli.Flag) {
		for _, f := range flags {
			n++
			df, ok := f.(cli.DocGenerationFlag)
			if !ok {
				t.Errorf("%s --%s: not a documented flag type", where, f.Names()[0])
				continue
			}
			name := where + " --" + f.Names()[0]
			u := strings.TrimSpace(df.GetUsage())
			if u == "" {
				t.Errorf("%s: no help text (Usage)", name)
			}
			if strings.Contains(strings.ToLower(u), "default") {
				t.Errorf("%s: Usage %q says a default: set Value, or DefaultText where the default is computed, and let urfave print it", name, u)
			}
			if line := f.String(); strings.Count(strings.ToLower(line), "default") > 1 {
				t.Errorf("%s: --help states more than one default: %q", name, line)
			}
		}
	}
	var walk func(path string, cmds []*cli.Command)
	walk = func(path string, cmds []*cli.Command) {
		for _, c := range cmds {
			p := path + " " + c.Name
			check(p, c.Flags)
			walk(p, c.Subcommands)
		}
	}
	check("cairn", app.Flags)
	walk("cairn", app.Commands)
	if n < 50 {
		t.Fatalf("walked %d flags; the command tree was not walked", n)
	}
}
