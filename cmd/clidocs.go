package cmd

import "io"

// cliDocsHeader opens docs/cli.md.
const cliDocsHeader = "<!-- Generated from the command definitions in cmd/ by `make docs` (go run ./cmd/cairn-docs docs/cli.md). Do not edit: change the flags' Usage, Value or DefaultText and run `make docs`. -->\n\n"

// CLIMarkdown renders the whole command tree, every command and flag with
// its help text and default, as Markdown (urfave/cli's ToMarkdown): the
// text of docs/cli.md, which `make docs` writes and TestCLIDocs keeps
// current.
func CLIMarkdown() (string, error) {
	md, err := App(io.Discard, io.Discard).ToMarkdown()
	if err != nil {
		return "", err
	}
	return cliDocsHeader + md, nil
}
