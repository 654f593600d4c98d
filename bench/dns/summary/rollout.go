package main

import (
	"cmp"
	"fmt"
	"io"
	"math"
	"slices"
)

// The MODE=rollout rows (bench/dns/rollout.sh): cairn's fixed-rate tail in
// the 30 s from the end of a mass registration (phase rollout), the same
// server 60 s after it (phase steady), and the peers at the same rate.

// rolloutName names a rollout group: the server and the phase.
func rolloutName(server, phase string) string { return server + "/" + phase }

// phaseRank orders the rollout table: cairn's rollout, cairn's steady,
// then the peers.
func phaseRank(f figures) int {
	switch f.name {
	case rolloutName("cairn", "rollout"):
		return 0
	case rolloutName("cairn", "steady"):
		return 1
	}
	return 2
}

func sortRollouts(fs []figures) {
	slices.SortFunc(fs, func(a, b figures) int {
		return cmp.Or(cmp.Compare(phaseRank(a), phaseRank(b)), cmp.Compare(a.name, b.name))
	})
}

func (s summary) findRollout(name string) (figures, bool) {
	for _, f := range s.rollouts {
		if f.name == name && !math.IsNaN(f.p99) {
			return f, true
		}
	}
	return figures{}, false
}

var rolloutLabels = map[string]string{
	rolloutName("cairn", "rollout"):  "cairn, the 30 s after 8,000 registrations (slow start running)",
	rolloutName("cairn", "steady"):   "cairn, steady (60 s after the last registration)",
	rolloutName("knot", "steady"):    "Knot, same rate",
	rolloutName("coredns", "steady"): "CoreDNS, same rate",
}

func (s summary) writeRollout(w io.Writer) {
	steady, hasSteady := s.findRollout(rolloutName("cairn", "steady"))
	knot, hasKnot := s.findRollout(rolloutName("knot", "steady"))
	fmt.Fprintln(w, "MODE=rollout: dnsperf at a fixed rate for 30 s from the end of a mass registration, the same server 60 s after it, and the peers. Medians over the runs whose run was undisturbed; ÷ are ratios of median p99.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| run | runs | p50, ms | p99, ms (range) | p99.9 / max, ms | server core busy | p99 ÷ cairn steady | p99 ÷ Knot |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|")
	for _, f := range s.rollouts {
		label := rolloutLabels[f.name]
		if label == "" {
			label = f.name
		}
		xs, xk := "-", "-"
		if hasSteady {
			xs = fixed(f.p99/steady.p99, 2)
		}
		if hasKnot {
			xk = fixed(f.p99/knot.p99, 2)
		}
		runs := fmt.Sprint(f.latRuns)
		if f.notOK > 0 {
			runs += fmt.Sprintf(" (+%d skipped)", f.notOK)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s (%s-%s) | %s / %s | %s%% | %s | %s |\n", label, runs,
			fixed(f.p50, 3), fixed(f.p99, 3), fixed(f.p99Min, 3), fixed(f.p99Max, 3),
			fixed(f.p999, 3), fixed(f.pMax, 3), fixed(f.busy, 0), xs, xk)
	}
}
