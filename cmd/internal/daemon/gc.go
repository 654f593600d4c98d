package daemon

import (
	"fmt"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/internal/gcpace"
)

// The collector's pace (--gc-percent): how much a server's (or an
// agent's) heap may grow over what it keeps before the next collection.

// DefaultGCPercent is --gc-percent's value. The resident set of a Go
// process is about (1 + GOGC/100) × 1.1 × its live heap: the collector
// lets the heap grow to its goal before marking, and the runtime keeps
// 10% above the goal mapped. At Go's 100 that is 2.2 × what the server
// holds; at 25, 1.4 × (docs/decisions.md, "The server collects at
// GOGC 25", and for the agent "A lean agent binary").
const DefaultGCPercent = 25

// GCFlags are --gc-percent and --gc-percent-burst (the server's).
func GCFlags() []cli.Flag {
	return []cli.Flag{
		GCPercentFlag(),
		&cli.IntFlag{Name: "gc-percent-burst", DefaultText: "off: --gc-percent throughout",
			Usage: "while the server allocates fast, raise GOGC from --gc-percent up to this, to keep collections 2s apart (registration bursts collect less often; memory comes back once quiet); above --gc-percent, at most 1000"},
	}
}

// GCPercentFlag is --gc-percent (the agent's, and the server's).
func GCPercentFlag() cli.Flag {
	return &cli.IntFlag{Name: "gc-percent", Value: DefaultGCPercent,
		Usage: "the Go collector's GOGC: how far, in percent of the live heap, the heap grows before the next collection; lower holds less memory and collects more often (10 to 1000; the GOGC environment variable, when set, wins)"}
}

// CheckGCPercent refuses a --gc-percent outside 10–1000, and a
// --gc-percent-burst (0: off) not above it or above 1000.
func CheckGCPercent(p, burst int) error {
	if p < 10 || p > 1000 {
		return fmt.Errorf("--gc-percent: %d is outside 10 to 1000", p)
	}
	if burst != 0 && (burst <= p || burst > 1000) {
		return fmt.Errorf("--gc-percent-burst: %d must be above --gc-percent (%d) and at most 1000", burst, p)
	}
	return nil
}

// GCPacing applies --gc-percent p and --gc-percent-burst burst. It
// returns the pacing to run (nil: none) and what is in force, for the
// log: nothing when the GOGC environment variable (getenv) already told
// the runtime what to do; p itself without burst; gcpace from p up to
// burst with it.
func GCPacing(p, burst int, getenv func(string) string) (*gcpace.Config, string) {
	if v := getenv("GOGC"); v != "" {
		return nil, "GOGC=" + v
	}
	if burst == 0 {
		debug.SetGCPercent(p)
		return nil, fmt.Sprint(p)
	}
	return &gcpace.Config{Low: p, High: burst}, fmt.Sprintf("%d to %d by allocation rate", p, burst)
}
