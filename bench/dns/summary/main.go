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
	rollouts  []figures           // mode rollout, named server/phase (rollout.go)
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
	rollout := map[string][]row{}
	for _, r := range rows {
		if !slices.Contains(s.tags, r["tag"]) {
			s.tags = append(s.tags, r["tag"])
		}
		if v := r["version"]; v != "" && v != "-" && !slices.Contains(s.versions[r["server"]], v) {
			s.versions[r["server"]] = append(s.versions[r["server"]], v)
		}
		switch r["mode"] {
		case "rollout":
			k := rolloutName(r["server"], r["phase"])
			rollout[k] = append(rollout[k], r)
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
	for k, rs := range rollout {
		s.rollouts = append(s.rollouts, figuresOf(k, rs, threshold))
	}
	sortRollouts(s.rollouts)
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

func (s summary) find(name string) (figures, bool) {
	for _, f := range s.servers {
		if f.name == name && !math.IsNaN(f.qps) {
			return f, true
		}
	}
	return figures{}, false
}
