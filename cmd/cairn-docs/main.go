// Command cairn-docs writes the CLI reference, docs/cli.md, from the
// command definitions: `make docs` runs it.
package main

import (
	"fmt"
	"os"

	"github.com/cairn-sd/cairn/cmd"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: cairn-docs FILE (docs/cli.md)")
		os.Exit(2)
	}
	md, err := cmd.CLIMarkdown()
	if err == nil {
		err = os.WriteFile(os.Args[1], []byte(md), 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "cairn-docs:", err)
		os.Exit(1)
	}
}
