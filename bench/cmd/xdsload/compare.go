package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// compare reads the runs in files (xdsload's output, its JSON line),
// and prints the runs without hostile streams beside those with, the
// medians of each, and the ratio of the honest withdrawal p99 medians:
// what SPEC §9 bounds (hostile subscribers move it by ≤ 10%). Runs are
// paired in the order given for the per-round ratios.
func compare(w io.Writer, files []string) error {
	type run struct {
		file string
		r    report
	}
	var base, hostile []run
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		found := false
		for line := range bytes.Lines(b) {
			if !bytes.HasPrefix(line, []byte("{")) {
				continue
			}
			var r report
			if err := json.Unmarshal(line, &r); err != nil {
				return fmt.Errorf("%s: %w", f, err)
			}
			if r.Hostile != nil && r.Hostile.Streams > 0 {
				hostile = append(hostile, run{f, r})
			} else {
				base = append(base, run{f, r})
			}
			found = true
		}
		if !found {
			return fmt.Errorf("%s: no xdsload result (a JSON line)", f)
		}
	}
	if len(base) == 0 || len(hostile) == 0 {
		return fmt.Errorf("want runs without hostile streams and with: got %d and %d", len(base), len(hostile))
	}
	fmt.Fprintln(w, "| run | hostile streams (names held at the changes) | honest withdrawal p50 / **p99** / max | withdrawals at 99% within 5 s | admission p99 | honest all admitted in | server CPU | server RSS after | hostile refusals |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	for _, g := range [][]run{base, hostile} {
		for _, x := range g {
			r := x.r
			hs, refusals := "0", ""
			if h := r.Hostile; h != nil {
				hs = fmt.Sprintf("%d (%s)", h.Streams, thousands(h.HeldAtChanges))
				var n int64
				var kinds []string
				for _, f := range h.Refusals {
					n += f.Count
					kinds = append(kinds, fmt.Sprintf("%d %s", f.Count, f.Code))
				}
				refusals = fmt.Sprintf("%d", n)
				if len(kinds) > 0 {
					refusals += " (" + strings.Join(kinds, ", ") + ")"
				}
			}
			fmt.Fprintf(w, "| %s | %s | %s / **%s** / %s | %d of %d | %s | %.1f s | %.1f s | %.0f MiB | %s |\n",
				x.file, hs, msStr(r.Withdrawals.P50ms), msStr(r.Withdrawals.P99ms), msStr(r.Withdrawals.MaxMs),
				r.Withdrawals.T99Within5s, r.Withdrawals.Changes, msStr(r.Admissions.P99ms), r.AdmitAllSeconds,
				r.ServerCPUSeconds, r.RSSAfterMiB, refusals)
		}
	}
	med := func(g []run, f func(report) float64) float64 {
		var v []float64
		for _, x := range g {
			v = append(v, f(x.r))
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	p99 := func(r report) float64 { return r.Withdrawals.P99ms }
	b, h := med(base, p99), med(hostile, p99)
	fmt.Fprintf(w, "\nMedians of %d runs without and %d with hostile streams:\n", len(base), len(hostile))
	for _, m := range []struct {
		what string
		f    func(report) float64
	}{
		{"honest withdrawal p50", func(r report) float64 { return r.Withdrawals.P50ms }},
		{"honest withdrawal p99", p99},
		{"honest withdrawal max", func(r report) float64 { return r.Withdrawals.MaxMs }},
		{"admission p99", func(r report) float64 { return r.Admissions.P99ms }},
	} {
		fmt.Fprintf(w, "- %s: %s → %s\n", m.what, msStr(med(base, m.f)), msStr(med(hostile, m.f)))
	}
	share := func(r report) float64 {
		return 100 * float64(r.Withdrawals.T99Within5s) / float64(max(r.Withdrawals.Changes, 1))
	}
	fmt.Fprintf(w, "- withdrawals at 99%% of their subscribers within 5 s: %.1f%% → %.1f%%\n", med(base, share), med(hostile, share))
	var rounds []string
	for i := range min(len(base), len(hostile)) {
		rounds = append(rounds, fmt.Sprintf("%.2f", hostile[i].r.Withdrawals.P99ms/max(base[i].r.Withdrawals.P99ms, 0.001)))
	}
	verdict := func(ok bool) string {
		if ok {
			return "holds"
		}
		return "does not hold"
	}
	ratio := h / max(b, 0.001)
	fmt.Fprintf(w, "\n**Honest withdrawal p99 with hostile streams ÷ without: %.2f** (medians; per round %s). SPEC §9 (≤ 1.10): %s. Below SPEC §9's steady bound (p99 < 1 s) with them: %s.\n",
		ratio, strings.Join(rounds, ", "), verdict(ratio <= 1.10), verdict(h < 1000))
	return nil
}
