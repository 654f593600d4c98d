#!/usr/bin/env bash
# summarize.sh: medians, ratios and a plot of the DNS benchmark's results.
#
#   bench/dns/summarize.sh [TAG...]      # default: $TAG if set, flip if MODE=flip,
#                                        # rollout if MODE=rollout, else main, and
#                                        # flip when it exists
#
# Reads bench/results/dns-TAG.tsv (bench/dns/run.sh), prints Markdown tables
# ready for BENCHMARKS.md (medians of undisturbed runs, ×CoreDNS and ×Knot
# ratios of median QPS and of QPS per server core-second, p50/p99/p99.9 and
# max at the fixed rate, RSS; when both cairn and cairn-rrl ran, the two side
# by side with the ratios cairn-rrl / cairn of QPS, QPS per core-second and
# latency: what RRL and cookies cost; a MODE=flip table per churn style when
# there are flip rows; the MODE=rollout table, the tail after a mass
# registration beside steady and the peers, when there are rollout rows)
# and keeps a copy in bench/results/dns-summary.md. Draws
# with gnuplot, from the MODE=main rows:
#
#   bench/results/dns-bench.png    the QPS of each server, the ratios as labels
#                                  (cairn-rrl's also × cairn)
#   bench/results/dns-latency.png  p50, p99 and p99.9 at the fixed rate per
#                                  server (Knot, cairn, CoreDNS), log scale,
#                                  with SPEC §9's p99 target
#
#   DISTURBED_PCT [25]  a run whose foreign CPU exceeds this % of a core is left out
#   PUBLISH=1           also copy the plots to docs/img/
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
	elif [[ ${MODE:-main} == rollout ]]; then
		tags=(rollout)
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

go run ./bench/dns/summary -disturbed "$DISTURBED_PCT" -plot "$tmp/plot.dat" -latplot "$tmp/lat.dat" \
	"${files[@]}" >"$tmp/summary.md"
cp "$tmp/summary.md" "$results/dns-summary.md"
cat "$tmp/summary.md"

[[ -s $tmp/plot.dat || -s $tmp/lat.dat ]] || exit 0
if ! command -v gnuplot >/dev/null; then
	echo "summarize.sh: gnuplot missing (apt-get install gnuplot-nox): no plot" >&2
	exit 0
fi

# publish PNG: with PUBLISH=1, copy a plot to docs/img/ under its own name.
publish() {
	[[ ${PUBLISH:-0} == 1 ]] || return 0
	mkdir -p docs/img
	cp "$1" "docs/img/$(basename "$1")"
	echo "published: docs/img/$(basename "$1")" >&2
}

if [[ -s $tmp/plot.dat ]]; then
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
	publish "$png"
fi

if [[ -s $tmp/lat.dat ]]; then
	png=$results/dns-latency.png
	# The y range in whole decades around every figure and the 1 ms
	# target: gnuplot's own would start at the shortest bar, hiding it.
	# (The quoted name may hold spaces: it is replaced by one word first.)
	read -r ylo yhi < <(awk '!/^#/ { sub(/"[^"]*"/, "name"); for (i = 3; i <= 7; i++) if ($i != "NaN" && $i > 0) {
			if (lo == "" || $i < lo) lo = $i; if ($i > hi) hi = $i } }
		END { if (hi < 1) hi = 1; e = log(lo) / log(10); f = int(e); if (f > e) f--
			g = log(hi * 3) / log(10); h = int(g); if (h < g) h++
			printf "%g %g\n", 10 ^ f, 10 ^ h }' "$tmp/lat.dat")
	# The fixed rate, as the first MODE=main row asked it.
	qps=$(awk -F'\t' '$1 == "time" { for (i = 1; i <= NF; i++) { if ($i == "lat_qps") c = i; if ($i == "mode") m = i }; next }
		c && $m == "main" && $c ~ /^[0-9.]+$/ { printf "%.0f\n", $c; exit }' "${files[@]}" | sed -e ':a' -e 's/\B[0-9]\{3\}\>/,&/' -e 'ta')
	gnuplot <<EOF
set terminal pngcairo size 960,600 font "sans,11"
set output "$png"
set title "Authoritative DNS latency at a fixed ${qps:-10,000} queries/s, server pinned to one core\n{/*0.8 medians of undisturbed runs (bars on p99: its min-max over the runs); ${tags[*]}; $(date -u +%Y-%m-%d)}"
stats "$tmp/lat.dat" using 1 nooutput
set xrange [-0.6:STATS_records - 0.4]
set logscale y
set yrange [$ylo:$yhi]
set ylabel "latency, ms (log scale)"
set grid ytics
set style fill solid 0.75 border -1
set boxwidth 0.25
set tics nomirror
set key top left
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lw 1.5 lc rgb "#c03030"
set label "SPEC §9: p99 ≤ 1 ms" at graph 0.01, first 1.2 left tc rgb "#c03030" font ",10"
plot "$tmp/lat.dat" using (\$1-0.27):3 with boxes lc rgb "#9cc3e4" title "p50", \
     "" using 1:4:xtic(2) with boxes lc rgb "#4a7fb0" title "p99", \
     "" using (\$1+0.27):5 with boxes lc rgb "#1f3f66" title "p99.9", \
     "" using 1:4:6:7 with yerrorbars lc rgb "black" pt 0 ps 0 notitle, \
     "" using (\$1-0.27):3:(sprintf("%.3g", \$3)) with labels offset 0, char 0.8 font ",9" notitle, \
     "" using 1:4:(sprintf("%.3g", \$4)) with labels offset 0, char 0.8 font ",9" notitle, \
     "" using (\$1+0.27):5:(sprintf("%.3g", \$5)) with labels offset 0, char 0.8 font ",9" notitle
EOF
	echo "plot: $png" >&2
	publish "$png"
fi
