package main

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

func spread(xs []float64) float64 {
	lo, hi := slices.Min(xs), slices.Max(xs)
	return 100 * (hi - lo) / lo
}

// writePlot writes one line per measured server, highest QPS first:
// index, name, median QPS, min, max, per core-s, and the label (ratios) in
// quotes. It writes nothing when no server has a measured MODE=main run.
func (s summary) writePlot(path string) error {
	core, hasCore := s.find("coredns")
	knot, hasKnot := s.find("knot")
	var b strings.Builder
	b.WriteString("# idx name qps_median qps_min qps_max per_core label\n")
	i := 0
	for _, f := range s.servers {
		if math.IsNaN(f.qps) {
			continue
		}
		var label []string
		label = append(label, thousands(f.qps))
		if hasCore && f.name != "coredns" {
			label = append(label, "×"+fixed(f.qps/core.qps, 2)+" CoreDNS")
		}
		if hasKnot && f.name != "knot" {
			label = append(label, "×"+fixed(f.qps/knot.qps, 2)+" Knot")
		}
		if plain, ok := s.find("cairn"); ok && f.name == "cairn-rrl" {
			label = append(label, "×"+fixed(f.qps/plain.qps, 2)+" cairn")
		}
		fmt.Fprintf(&b, "%d %q %.0f %.0f %.0f %.0f %q\n", i, displayName(f.name), f.qps, f.qpsMin, f.qpsMax,
			f.perCore, strings.Join(label, "\n"))
		i++
	}
	if i == 0 {
		fmt.Fprintln(os.Stderr, "summary: no plot: no server has a measured run of MODE=main")
		return nil
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// latencyOrder is the order of the latency plot's groups: the reference
// first, cairn in the middle, then the slower peer, then any other.
var latencyOrder = []string{"knot", "cairn", "cairn-rrl", "coredns"}

// writeLatencyPlot writes one line per server with latency figures, in
// latencyOrder: index, name, median p50, p99, p99.9, and the p99's range
// over the runs. It writes nothing when no server has them.
func (s summary) writeLatencyPlot(path string) error {
	fs := slices.Clone(s.servers)
	rank := func(name string) int {
		if i := slices.Index(latencyOrder, name); i >= 0 {
			return i
		}
		return len(latencyOrder)
	}
	slices.SortStableFunc(fs, func(a, b figures) int { return cmp.Compare(rank(a.name), rank(b.name)) })
	var b strings.Builder
	b.WriteString("# idx name p50_ms p99_ms p999_ms p99_min p99_max\n")
	i := 0
	for _, f := range fs {
		if math.IsNaN(f.p50) || math.IsNaN(f.p99) {
			continue
		}
		// A file of an older harness has no p99.9: plotted as missing.
		p999 := "NaN"
		if !math.IsNaN(f.p999) {
			p999 = strconv.FormatFloat(f.p999, 'f', 4, 64)
		}
		fmt.Fprintf(&b, "%d %q %.4f %.4f %s %.4f %.4f\n", i, displayName(f.name), f.p50, f.p99, p999, f.p99Min, f.p99Max)
		i++
	}
	if i == 0 {
		fmt.Fprintln(os.Stderr, "summary: no latency plot: no server has latency figures of MODE=main")
		return nil
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
