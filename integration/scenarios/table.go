// Package scenarios runs the seed's experiments on a simulated region of
// real processes: cairn servers, agents, Envoys, a fleet of instances as
// real listeners, and synthetic callers. Each scenario measures its
// figures, prints them as a table beside their budgets and fails on a
// miss; `make scenarios` runs them at full size (CAIRN_SCENARIOS=full)
// and writes docs/scenarios/REPORT.md from what they record
// (CAIRN_SCENARIO_OUT). `make test` runs a short version of each.
package scenarios

import (
	"os"

	"github.com/cairn-sd/cairn/integration/scenarios/result"
)

// Environment variables of the scenarios.
const (
	// EnvSize set to "full" runs every scenario at the seed's size; unset,
	// at the short size of make test.
	EnvSize = "CAIRN_SCENARIOS"
	// EnvOut names a directory each scenario writes its Result to, as
	// <name>.json, for the report (go run ./integration/scenarios/report).
	EnvOut = result.EnvOut
	// EnvLogs names a directory the region's logs (servers, agents,
	// Envoys, the fleet) are copied to when a scenario ends, under the
	// test's name: its data dirs are removed with it.
	EnvLogs = "CAIRN_SCENARIO_LOGS"
)

// Full reports whether the scenarios run at full size.
func Full() bool { return os.Getenv(EnvSize) == "full" }

// What a scenario records (package result).
type (
	Result   = result.Result
	Row      = result.Row
	Point    = result.Point
	Series   = result.Series
	Timeline = result.Timeline
	Mark     = result.Mark
)

// NewResult starts the record of a scenario named name (a file name:
// lower case, dashes) with a one-line title, at the size this run is.
func NewResult(name, title string) *Result {
	size := "short"
	if Full() {
		size = "full"
	}
	return result.New(name, title, size)
}
