package cmd

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/xdsserver"
)

// xdsLimit is one --xds-max-* cap: its flag, and where its value goes.
type xdsLimit struct {
	name, usage string
	value       int
	to          func(*xdsserver.Limits) *int
}

// xdsLimitList returns the caps, in the order --help lists them.
func xdsLimitList() []xdsLimit {
	return []xdsLimit{
		{"xds-max-names-per-stream", "most resource names one xDS stream may watch, all types together (an Envoy watches a name per cluster); past it the stream ends with RESOURCE_EXHAUSTED; 0: no cap",
			xdsserver.DefaultMaxNames, func(l *xdsserver.Limits) *int { return &l.MaxNames }},
		{"xds-max-types-per-stream", "most resource types one xDS stream may ask for, served or not; 0: no cap",
			xdsserver.DefaultMaxTypes, func(l *xdsserver.Limits) *int { return &l.MaxTypes }},
		{"xds-max-streams-per-token", "with ACLs on, most xDS and LRS streams one token may hold open; 0: no cap",
			xdsserver.DefaultMaxStreamsPerToken, func(l *xdsserver.Limits) *int { return &l.MaxStreamsPerToken }},
		{"xds-max-streams-per-address", "with ACLs off, most xDS and LRS streams one peer address may hold open; 0: no cap",
			xdsserver.DefaultMaxStreamsPerAddress, func(l *xdsserver.Limits) *int { return &l.MaxStreamsPerAddress }},
	}
}

// xdsLimitFlags returns the caps' flags.
func xdsLimitFlags() []cli.Flag {
	var out []cli.Flag
	for _, f := range xdsLimitList() {
		out = append(out, &cli.IntFlag{Name: f.name, Value: f.value, Usage: f.usage})
	}
	return out
}

// xdsLimits reads the --xds-max-* caps: a count, or 0 for no cap.
func xdsLimits(c *cli.Context) (xdsserver.Limits, error) {
	var l xdsserver.Limits
	for _, f := range xdsLimitList() {
		switch v := c.Int(f.name); {
		case v < 0:
			return l, fmt.Errorf("--%s: %d is negative (0 turns the cap off)", f.name, v)
		case v == 0:
			*f.to(&l) = -1 // xdsserver's "no cap"; its 0 is the default
		default:
			*f.to(&l) = v
		}
	}
	return l, nil
}
