package cmd

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/xdsserver"
)

// xdsLimits reads the --xds-max-* caps: a count, or 0 for no cap.
func xdsLimits(c *cli.Context) (xdsserver.Limits, error) {
	var l xdsserver.Limits
	for _, f := range []struct {
		name string
		to   *int
	}{
		{"xds-max-names-per-stream", &l.MaxNames},
		{"xds-max-types-per-stream", &l.MaxTypes},
		{"xds-max-streams-per-token", &l.MaxStreamsPerToken},
		{"xds-max-streams-per-address", &l.MaxStreamsPerAddress},
	} {
		switch v := c.Int(f.name); {
		case v < 0:
			return l, fmt.Errorf("--%s: %d is negative (0 turns the cap off)", f.name, v)
		case v == 0:
			*f.to = -1 // xdsserver's "no cap"; its 0 is the default
		default:
			*f.to = v
		}
	}
	return l, nil
}
