// Command summary turns the rows bench/dns/run.sh appends to
// bench/results/dns-*.tsv into Markdown tables for BENCHMARKS.md, and writes
// the data of the plots that bench/dns/summarize.sh draws.
//
//	go run ./bench/dns/summary [-disturbed 25] [-plot FILE] [-latplot FILE] dns-main.tsv [dns-flip.tsv ...]
//
// Files of every harness version are read: columns are found by the name
// in the header above them, and a column an older version did not write
// (p999_ms, flip_style, ...) reads as missing, shown "-". A MODE=flip row
// without flip_style is of the first churn driver, FLIP_STYLE=today.
//
// Medians are over undisturbed runs: a run is disturbed when processes other
// than the server, dnsperf and the flip driver used more than -disturbed %
// of one core during the measured run (lat_foreign_pct for the latency
// figures).
//
// When the rows have both cairn and cairn-rrl (cairn with response-rate
// limiting and EDNS cookies on, at a rate that limits nothing, dnsperf
// sending a client cookie), a table sets them side by side with the
// ratios cairn-rrl / cairn: what the protections cost. A server with no undisturbed run is summarised over all its runs
// and marked. Rows with a status other than ok (skipped, failed) are counted
// but not summarised.
package main

import (
	"bufio"
	"cmp"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	disturbed := flag.Float64("disturbed", 25, "foreign CPU, % of one core, above which a run is disturbed")
	plot := flag.String("plot", "", "write the QPS plot's data here (gnuplot columns)")
	latPlot := flag.String("latplot", "", "write the latency plot's data here (gnuplot columns)")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: summary [-disturbed PCT] [-plot FILE] [-latplot FILE] RESULTS.tsv...")
		os.Exit(2)
	}
	var rows []row
	for _, path := range flag.Args() {
		rs, err := readTSV(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "summary:", err)
			os.Exit(1)
		}
		rows = append(rows, rs...)
	}
	s := summarize(rows, *disturbed)
	s.write(os.Stdout)
	for _, w := range []struct {
		path  string
		write func(string) error
	}{{*plot, s.writePlot}, {*latPlot, s.writeLatencyPlot}} {
		if w.path == "" {
			continue
		}
		if err := w.write(w.path); err != nil {
			fmt.Fprintln(os.Stderr, "summary:", err)
			os.Exit(1)
		}
	}
}

// row is one line of a results file, by column name.
type row map[string]string

func (r row) num(col string) (float64, bool) {
	v, err := strconv.ParseFloat(r[col], 64)
	return v, err == nil && !math.IsNaN(v)
}

func readTSV(path string) ([]row, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var header []string
	var rows []row
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "\t")
		if header == nil {
			header = fields
			continue
		}
		if fields[0] == header[0] { // a header appended by another harness version
			header = fields
			continue
		}
		r := row{}
		for i, h := range header {
			if i < len(fields) {
				r[h] = fields[i]
			}
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %q: %w", path, err)
	}
	if header == nil {
		return nil, fmt.Errorf("%q is empty", path)
	}
	return rows, nil
}

// figures is the medians of one server (or one flip rate).
type figures struct {
	name                        string
	style                       string // flip rows: the driver's style
	runs, disturbed, notOK      int
	allDisturbed                bool
	qps, qpsMin, qpsMax         float64
	perCore, busy, avgLat       float64
	p50, p99, p99Min, p99Max    float64
	p999, pMax                  float64
	latRuns                     int
	rssIdle, rssLoaded, rssPeak float64
	respB                       float64
	flipRPS, flipChange, flipQ  float64
	flipDeferred                float64
	dnsMin, dnsMax, dnsOff      float64 // fewest and most A records in any run's answers; median share off, %
	flipInterval                string
}

type summary struct {
	threshold float64
	servers   []figures           // mode main, by QPS, highest first
	flips     []figures           // mode flip, by style (steady first), then rate
	versions  map[string][]string // per server, every version seen, in order
	tags      []string
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func col(rows []row, name string) []float64 {
	var out []float64
	for _, r := range rows {
		if v, ok := r.num(name); ok {
			out = append(out, v)
		}
	}
	return out
}

// figuresOf summarises one group of rows.
func figuresOf(name string, rows []row, threshold float64) figures {
	f := figures{name: name}
	var ok []row
	for _, r := range rows {
		if r["status"] == "ok" {
			ok = append(ok, r)
		} else {
			f.notOK++
		}
	}
	quiet := func(foreignCol string) []row {
		var q []row
		for _, r := range ok {
			if v, good := r.num(foreignCol); good && v <= threshold {
				q = append(q, r)
			}
		}
		return q
	}
	use := quiet("foreign_pct")
	f.runs, f.disturbed = len(use), len(ok)-len(use)
	if len(use) == 0 && len(ok) > 0 {
		use, f.allDisturbed = ok, true
	}
	qps := col(use, "qps")
	f.qps = median(qps)
	if len(qps) > 0 {
		f.qpsMin, f.qpsMax = slices.Min(qps), slices.Max(qps)
	}
	f.perCore = median(col(use, "qps_per_core_s"))
	f.busy = median(col(use, "server_busy_pct"))
	f.avgLat = median(col(use, "avg_lat_ms"))
	f.rssIdle = median(col(use, "rss_idle_kib")) / 1024
	f.rssLoaded = median(col(use, "rss_loaded_kib")) / 1024
	f.rssPeak = median(col(use, "rss_hwm_kib")) / 1024
	f.respB = median(col(use, "resp_bytes"))
	f.flipRPS = median(col(use, "flip_reports_per_s"))
	f.flipChange = median(col(use, "flip_change_pct"))
	f.flipQ = median(col(use, "flip_quarantined"))
	f.flipDeferred = median(col(use, "flip_deferred"))
	f.dnsMin, f.dnsMax = math.NaN(), math.NaN()
	if v := col(use, "flip_dns_a_min"); len(v) > 0 {
		f.dnsMin = slices.Min(v)
	}
	if v := col(use, "flip_dns_a_max"); len(v) > 0 {
		f.dnsMax = slices.Max(v)
	}
	f.dnsOff = median(col(use, "flip_dns_off_pct"))
	for _, r := range use {
		if v := r["flip_interval"]; v != "" && v != "-" {
			f.flipInterval = v
		}
	}
	lat := quiet("lat_foreign_pct")
	if len(lat) == 0 {
		lat = ok
	}
	f.latRuns = len(lat)
	f.p50 = median(col(lat, "p50_ms"))
	p99 := col(lat, "p99_ms")
	f.p99 = median(p99)
	if len(p99) > 0 {
		f.p99Min, f.p99Max = slices.Min(p99), slices.Max(p99)
	}
	f.p999 = median(col(lat, "p999_ms"))
	f.pMax = median(col(lat, "max_ms"))
	return f
}

// flipStyle is a flip row's driver style; rows written before the
// column existed are of the first driver.
func flipStyle(r row) string {
	if s := r["flip_style"]; s != "" && s != "-" {
		return s
	}
	return "today"
}

func summarize(rows []row, threshold float64) summary {
	s := summary{threshold: threshold, versions: map[string][]string{}}
	main := map[string][]row{}
	type flipKey struct{ style, pct string }
	flip := map[flipKey][]row{}
	for _, r := range rows {
		if !slices.Contains(s.tags, r["tag"]) {
			s.tags = append(s.tags, r["tag"])
		}
		if v := r["version"]; v != "" && v != "-" && !slices.Contains(s.versions[r["server"]], v) {
			s.versions[r["server"]] = append(s.versions[r["server"]], v)
		}
		switch r["mode"] {
		case "flip":
			k := flipKey{flipStyle(r), r["flip_pct"]}
			flip[k] = append(flip[k], r)
		default:
			main[r["server"]] = append(main[r["server"]], r)
		}
	}
	for name, rs := range main {
		s.servers = append(s.servers, figuresOf(name, rs, threshold))
	}
	slices.SortFunc(s.servers, func(a, b figures) int {
		// Servers with figures first, highest QPS first; then by name.
		if c := cmp.Compare(nanLow(b.qps), nanLow(a.qps)); c != 0 {
			return c
		}
		return cmp.Compare(a.name, b.name)
	})
	for k, rs := range flip {
		f := figuresOf(k.pct, rs, threshold)
		f.style = k.style
		s.flips = append(s.flips, f)
	}
	slices.SortFunc(s.flips, func(a, b figures) int {
		x, _ := strconv.Atoi(a.name)
		y, _ := strconv.Atoi(b.name)
		return cmp.Or(cmp.Compare(styleRank(a.style), styleRank(b.style)), cmp.Compare(a.style, b.style), cmp.Compare(x, y))
	})
	return s
}

// styleRank orders the churn tables: steady, then today, then any other.
func styleRank(s string) int {
	switch s {
	case "steady":
		return 0
	case "today":
		return 1
	}
	return 2
}

func nanLow(v float64) float64 {
	if math.IsNaN(v) {
		return math.Inf(-1)
	}
	return v
}

var display = map[string]string{"cairn": "cairn", "cairn-rrl": "cairn, RRL+cookies", "coredns": "CoreDNS", "knot": "Knot"}

func displayName(s string) string {
	if d, ok := display[s]; ok {
		return d
	}
	return s
}

func (s summary) find(name string) (figures, bool) {
	for _, f := range s.servers {
		if f.name == name && !math.IsNaN(f.qps) {
			return f, true
		}
	}
	return figures{}, false
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
