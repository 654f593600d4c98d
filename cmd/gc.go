package cmd

import (
	"fmt"
	"runtime/debug"

	"github.com/urfave/cli/v2"

	"github.com/cairn-sd/cairn/internal/gcpace"
)

// The collector's pace (--gc-percent): how much a server's heap may grow
// over what it keeps before the next collection.

// defaultGCPercent is --gc-percent's value. The resident set of a Go
// server is about (1 + GOGC/100) × 1.1 × its live heap: the collector
// lets the heap grow to its goal before marking, and the runtime keeps
// 10% above the goal mapped. At Go's 100 that is 2.2 × what the server
// holds; at 25, 1.4 × (docs/decisions.md, "The server collects at
// GOGC 25 while it is quiet").
const defaultGCPercent = gcpace.DefaultLow

// gcPercentFlag is --gc-percent.
func gcPercentFlag() cli.Flag {
	return &cli.IntFlag{Name: "gc-percent", Value: defaultGCPercent,
		Usage: "the Go collector's GOGC while the server makes little garbage: how far, in percent of the live heap, the heap grows before the next collection; lower holds less memory. Below 100 it is raised toward 100 while the server allocates fast, to keep collections 2s apart (10 to 1000; the GOGC environment variable, when set, wins and stays)"}
}

// checkGCPercent refuses a --gc-percent outside 10–1000.
func checkGCPercent(p int) error {
	if p < 10 || p > 1000 {
		return fmt.Errorf("--gc-percent: %d is outside 10 to 1000", p)
	}
	return nil
}

// gcPacing applies --gc-percent p. It returns the pacing to run (nil:
// none) and what is in force, for the log: nothing when the GOGC
// environment variable (getenv) already told the runtime what to do;
// p itself from 100 up; below, gcpace from p up to 100.
func gcPacing(p int, getenv func(string) string) (*gcpace.Config, string) {
	if v := getenv("GOGC"); v != "" {
		return nil, "GOGC=" + v
	}
	if p >= gcpace.DefaultHigh {
		debug.SetGCPercent(p)
		return nil, fmt.Sprint(p)
	}
	return &gcpace.Config{Low: p, High: gcpace.DefaultHigh}, fmt.Sprintf("%d to %d by allocation rate", p, gcpace.DefaultHigh)
}
