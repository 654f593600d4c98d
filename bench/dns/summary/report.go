package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

var display = map[string]string{"cairn": "cairn", "cairn-rrl": "cairn, RRL+cookies", "coredns": "CoreDNS", "knot": "Knot"}

func displayName(s string) string {
	if d, ok := display[s]; ok {
		return d
	}
	return s
}

// thousands formats v rounded to an integer with thousands separators.
func thousands(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	n := strconv.FormatInt(int64(math.Round(v)), 10)
	neg := strings.HasPrefix(n, "-")
	n = strings.TrimPrefix(n, "-")
	var b strings.Builder
	for i, c := range n {
		if i > 0 && (len(n)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

func fixed(v float64, prec int) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// ratio is "a/b", with the per-core ratio in brackets where it differs.
func ratio(f, peer figures) string {
	q := f.qps / peer.qps
	c := f.perCore / peer.perCore
	out := fixed(q, 2)
	if !math.IsNaN(c) && fixed(c, 2) != out {
		out += " (" + fixed(c, 2) + ")"
	}
	return out
}

func (f figures) runsCell() string {
	out := strconv.Itoa(f.runs)
	if f.allDisturbed {
		out = "0 of " + strconv.Itoa(f.disturbed) + " undisturbed; all shown*"
	} else if f.disturbed > 0 {
		out += fmt.Sprintf(" (+%d disturbed)", f.disturbed)
	}
	if f.notOK > 0 {
		out += fmt.Sprintf(" (+%d skipped)", f.notOK)
	}
	return out
}

func (s summary) write(w io.Writer) {
	fmt.Fprintf(w, "<!-- bench/dns/summarize.sh %s: medians of runs with foreign CPU <= %.0f%% of a core -->\n",
		strings.Join(s.tags, " "), s.threshold)
	if len(s.servers) > 0 {
		s.writeMain(w)
	}
	if len(s.rollouts) > 0 {
		if len(s.servers) > 0 {
			fmt.Fprintln(w)
		}
		s.writeRollout(w)
	}
	for i, f := range s.flips {
		if i > 0 && f.style == s.flips[i-1].style {
			continue
		}
		if i > 0 || len(s.servers) > 0 {
			fmt.Fprintln(w)
		}
		var group []figures
		for _, g := range s.flips {
			if g.style == f.style {
				group = append(group, g)
			}
		}
		writeFlip(w, f.style, group)
	}
}

func (s summary) writeMain(w io.Writer) {
	core, hasCore := s.find("coredns")
	knot, hasKnot := s.find("knot")
	fmt.Fprintln(w, "Pinned UDP, query mix. ×CoreDNS and ×Knot are ratios of median QPS; the ratios of QPS per server core-second are in brackets where they differ. The latency medians are over the runs whose latency run was undisturbed.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| server | runs | QPS median (min-max) | QPS per server core-s | server core busy | ×CoreDNS | ×Knot | avg latency at saturation, ms | p50 / p99 (range) at fixed rate, ms | p99.9 / max at fixed rate, ms | RSS idle → loaded (peak), MiB | avg response, B |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|")
	var notes []string
	for _, f := range s.servers {
		if math.IsNaN(f.qps) {
			notes = append(notes, fmt.Sprintf("%s: no run measured (%d skipped or failed).", displayName(f.name), f.notOK))
			continue
		}
		xc, xk := "-", "-"
		if hasCore {
			xc = ratio(f, core)
		}
		if hasKnot {
			xk = ratio(f, knot)
		}
		latRuns := ""
		if f.latRuns != f.runs {
			latRuns = fmt.Sprintf("; %d run%s", f.latRuns, map[bool]string{true: "s"}[f.latRuns != 1])
		}
		fmt.Fprintf(w, "| %s | %s | %s (%s-%s) | %s | %s%% | %s | %s | %s | %s / %s (%s-%s%s) | %s / %s | %s → %s (%s) | %s |\n",
			displayName(f.name), f.runsCell(), thousands(f.qps), thousands(f.qpsMin), thousands(f.qpsMax),
			thousands(f.perCore), fixed(f.busy, 0), xc, xk, fixed(f.avgLat, 2),
			fixed(f.p50, 3), fixed(f.p99, 3), fixed(f.p99Min, 3), fixed(f.p99Max, 3), latRuns,
			fixed(f.p999, 3), fixed(f.pMax, 3),
			fixed(f.rssIdle, 0), fixed(f.rssLoaded, 0), fixed(f.rssPeak, 0), fixed(f.respB, 0))
		if f.allDisturbed {
			notes = append(notes, fmt.Sprintf("*%s: every run was disturbed; the medians are over all of them.", displayName(f.name)))
		}
	}
	var vs []string
	for _, f := range s.servers {
		if v := s.versions[f.name]; len(v) > 0 {
			vs = append(vs, strings.Join(v, ", "))
		}
	}
	if len(vs) > 0 {
		notes = append(notes, "Versions: "+strings.Join(vs, "; ")+".")
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, n)
		}
	}
	s.writeProtectionCost(w)
}

// writeProtectionCost sets cairn-rrl beside cairn, with the ratios, when
// both were measured.
func (s summary) writeProtectionCost(w io.Writer) {
	plain, ok1 := s.find("cairn")
	prot, ok2 := s.find("cairn-rrl")
	if !ok1 || !ok2 {
		return
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The cost of response-rate limiting and EDNS cookies: cairn-rrl is cairn started with `--dns-rrl-rate 100000000 --dns-cookies on` (every answer accounted, none limited) and asked by dnsperf with a client cookie in every query (one server cookie made per answer); the ratio is cairn-rrl / cairn, same runs.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| | cairn | cairn, RRL+cookies | ratio |")
	fmt.Fprintln(w, "|---|---|---|---|")
	for _, r := range []struct {
		what string
		a, b float64
		cell func(float64) string
	}{
		{"QPS median", plain.qps, prot.qps, thousands},
		{"QPS per server core-s", plain.perCore, prot.perCore, thousands},
		{"avg latency at saturation, ms", plain.avgLat, prot.avgLat, func(v float64) string { return fixed(v, 3) }},
		{"p50 at fixed rate, ms", plain.p50, prot.p50, func(v float64) string { return fixed(v, 3) }},
		{"p99 at fixed rate, ms", plain.p99, prot.p99, func(v float64) string { return fixed(v, 3) }},
		{"p99.9 at fixed rate, ms", plain.p999, prot.p999, func(v float64) string { return fixed(v, 3) }},
		{"avg response, B", plain.respB, prot.respB, func(v float64) string { return fixed(v, 0) }},
	} {
		fmt.Fprintf(w, "| %s | %s | %s | %s |\n", r.what, r.cell(r.a), r.cell(r.b), fixed(r.b/r.a, 3))
	}
}

// writeFlip writes the table of one churn style's rates.
func writeFlip(w io.Writer, style string, flips []figures) {
	interval := ""
	for _, f := range flips {
		if f.flipInterval != "" {
			interval = ", one batch every " + f.flipInterval
		}
	}
	switch style {
	case "steady":
		fmt.Fprintf(w, "cairn under steady-eligible health churn (MODE=flip FLIP_STYLE=steady%s, cairn's evaluation rounds at that interval): the rate is the share of endpoints whose health changes each second; a swap's two reports land one round apart, so that every service keeps half its endpoints eligible at every round.\n", interval)
	case "today":
		fmt.Fprintf(w, "cairn under health churn, the driver as first written (MODE=flip FLIP_STYLE=today%s; rows without a style are these): the same reports every second at every rate; the rate is the share of endpoints that swap readiness each second, both halves of a swap in one batch.\n", interval)
	default:
		fmt.Fprintf(w, "cairn under health churn, FLIP_STYLE=%s%s.\n", style, interval)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| flipped per second | runs | QPS median (min-max) | × 0% | QPS per server core-s | p50 / p99 / p99.9 at fixed rate, ms | p99 × 0% | avg response, B | A records per answer, min-max (% of answers off half) | reports/s | published eligibility changes per second, % | deferred withdrawals (most at once, of the observed) | quarantined at the end |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	var base figures
	for _, f := range flips {
		if f.name == "0" {
			base = f
		}
	}
	for _, f := range flips {
		if math.IsNaN(f.qps) {
			fmt.Fprintf(w, "| %s%% | %s | - | - | - | - | - | - | - | - | - | - | - |\n", f.name, f.runsCell())
			continue
		}
		dnsCell := "-"
		if !math.IsNaN(f.dnsMin) {
			dnsCell = fmt.Sprintf("%s-%s (%s%%)", fixed(f.dnsMin, 0), fixed(f.dnsMax, 0), fixed(f.dnsOff, 1))
		}
		fmt.Fprintf(w, "| %s%% | %s | %s (%s-%s) | %s | %s | %s / %s / %s | %s | %s | %s | %s | %s | %s | %s |\n",
			f.name, f.runsCell(), thousands(f.qps), thousands(f.qpsMin), thousands(f.qpsMax),
			fixed(f.qps/base.qps, 3), thousands(f.perCore), fixed(f.p50, 3), fixed(f.p99, 3), fixed(f.p999, 3),
			fixed(f.p99/base.p99, 2), fixed(f.respB, 0), dnsCell, thousands(f.flipRPS), fixed(f.flipChange, 1),
			fixed(f.flipDeferred, 0), fixed(f.flipQ, 0))
	}
	var qps, p99 []float64
	for _, f := range flips {
		if !math.IsNaN(f.qps) {
			qps = append(qps, f.qps)
			p99 = append(p99, f.p99)
		}
	}
	if len(qps) > 1 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "Spread of the medians, (max-min)/min: QPS %s%%, p99 %s%% (SPEC §9 target: within 5%%).\n",
			fixed(spread(qps), 1), fixed(spread(p99), 1))
	}
	for _, f := range flips {
		if f.allDisturbed {
			fmt.Fprintf(w, "*%s%%: every run was disturbed; the medians are over all of them.\n", f.name)
		}
	}
	for _, f := range flips {
		if f.flipQ > 0 {
			fmt.Fprintln(w, "Instances in flap quarantine are out of rotation, so their answers shrink (see avg response): compare rates only where the quarantined column is 0.")
			break
		}
	}
	var unsteady []string
	for _, f := range flips {
		if !math.IsNaN(f.dnsMin) && (f.dnsMin != f.dnsMax || f.dnsOff > 0) {
			unsteady = append(unsteady, f.name+"%")
		}
	}
	if len(unsteady) > 0 {
		fmt.Fprintf(w, "Answer sizes did not hold still at %s: the sampled answers did not all carry half their service's addresses. Deferred withdrawals (the shrink cap's budget spent) keep endpoints published; late batches or overruns of the driver (in the rows' notes) put a swap's halves in different rounds.\n",
			strings.Join(unsteady, ", "))
	}
}
