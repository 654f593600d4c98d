package cmd

import (
	"fmt"
	"runtime/debug"

	"github.com/urfave/cli/v2"
)

// The collector's pace (--gc-percent): how much a server's heap may grow
// over what it keeps before the next collection.

// defaultGCPercent is --gc-percent's value. The resident set of a Go
// server is about (1 + GOGC/100) × 1.1 × its live heap: the collector
// lets the heap grow to its goal before marking, and the runtime keeps
// 10% above the goal mapped. At Go's 100 that is 2.2 × what the server
// holds; at 25, 1.4 × (docs/decisions.md, "The server collects at
// GOGC 25").
const defaultGCPercent = 25

// gcPercentFlag is --gc-percent.
func gcPercentFlag() cli.Flag {
	return &cli.IntFlag{Name: "gc-percent", Value: defaultGCPercent,
		Usage: "the Go collector's GOGC: how far, in percent of the live heap, the heap grows before the next collection; lower holds less memory and spends more CPU collecting (10 to 1000; the GOGC environment variable, when set, wins)"}
}

// checkGCPercent refuses a --gc-percent outside 10–1000.
func checkGCPercent(p int) error {
	if p < 10 || p > 1000 {
		return fmt.Errorf("--gc-percent: %d is outside 10 to 1000", p)
	}
	return nil
}

// setGCPercent applies --gc-percent, unless the GOGC environment
// variable (getenv) already told the runtime what to do. It returns the
// value in force.
func setGCPercent(p int, getenv func(string) string) int {
	if getenv("GOGC") != "" {
		cur := debug.SetGCPercent(100)
		debug.SetGCPercent(cur)
		return cur
	}
	debug.SetGCPercent(p)
	return p
}
