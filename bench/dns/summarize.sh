#!/usr/bin/env bash
# summarize.sh: medians, ratios and a plot of the DNS benchmark's results.
#
#   bench/dns/summarize.sh [TAG...]      # default: $TAG if set, flip if MODE=flip,
#                                        # else main, and flip when it exists
#
# Reads bench/results/dns-TAG.tsv (bench/dns/run.sh), prints Markdown tables
# ready for BENCHMARKS.md (medians of undisturbed runs, ×CoreDNS and ×Knot
# ratios of median QPS and of QPS per server core-second, p50/p99, RSS; the
# MODE=flip table when there are flip rows) and keeps a copy in
# bench/results/dns-summary.md. Draws the QPS of each server, with the ratios
# as labels, into bench/results/dns-bench.png with gnuplot.
#
#   DISTURBED_PCT [25]  a run whose foreign CPU exceeds this % of a core is left out
#   PUBLISH=1           also copy the plot to docs/img/dns-bench.png
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"
DISTURBED_PCT=${DISTURBED_PCT:-25}
results=bench/results

tags=("$@")
if ((${#tags[@]} == 0)); then
	if [[ -n ${TAG:-} ]]; then
		tags=("$TAG") # as run.sh was given
	elif [[ ${MODE:-main} == flip ]]; then
		tags=(flip)
	else
		tags=(main)
		if [[ -s $results/dns-flip.tsv ]]; then tags+=(flip); fi
	fi
fi
files=()
for t in "${tags[@]}"; do
	f=$results/dns-$t.tsv
	[[ -s $f ]] || {
		echo "summarize.sh: $f is missing or empty: run bench/dns/run.sh (TAG=$t) first" >&2
		exit 1
	}
	files+=("$f")
done

tmp=$(mktemp -d /tmp/cairn-dnssum.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

go run ./bench/dns/summary -disturbed "$DISTURBED_PCT" -plot "$tmp/plot.dat" "${files[@]}" >"$tmp/summary.md"
cp "$tmp/summary.md" "$results/dns-summary.md"
cat "$tmp/summary.md"

[[ -s $tmp/plot.dat ]] || exit 0
if ! command -v gnuplot >/dev/null; then
	echo "summarize.sh: gnuplot missing (apt-get install gnuplot-nox): no plot" >&2
	exit 0
fi
png=$results/dns-bench.png
gnuplot <<EOF
set terminal pngcairo size 960,600 font "sans,11"
set output "$png"
set title "Authoritative DNS, UDP query mix, server pinned to one core\n{/*0.8 median QPS of undisturbed runs (bars: min-max); ${tags[*]}; $(date -u +%Y-%m-%d)}"
stats "$tmp/plot.dat" using 5 nooutput
set yrange [0:STATS_max * 1.35]
set xrange [-0.6:STATS_records - 0.4]
set ylabel "queries per second"
set format y "%.0f"
set grid ytics
set style fill solid 0.65 border -1
set boxwidth 0.6
set tics nomirror
unset key
plot "$tmp/plot.dat" using 1:3:xtic(2) with boxes lc rgb "#4a7fb0", \
     "" using 1:3:4:5 with yerrorbars lc rgb "black" pt 0 ps 0, \
     "" using 1:5:7 with labels offset 0, char 2.6 font ",10"
EOF
echo "plot: $png" >&2
if [[ ${PUBLISH:-0} == 1 ]]; then
	mkdir -p docs/img
	cp "$png" docs/img/dns-bench.png
	echo "published: docs/img/dns-bench.png" >&2
fi
