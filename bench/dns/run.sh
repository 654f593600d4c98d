#!/usr/bin/env bash
# run.sh: the DNS benchmark (SPEC §9) — cairn against CoreDNS (file plugin)
# and Knot DNS serving the same names, in the same run, on this machine.
# Method and anchors: shared/research/dns-bench.md.
#
# Usage (from anywhere; paths are relative to the repository root):
#
#   make build && bench/dns/install-peers.sh     # once: bin/cairn, dnsperf, knot, coredns
#   bench/dns/run.sh                             # 3 rounds of cairn, cairn-rrl, coredns, knot
#   ROUNDS=1 WARMUP=1 MEASURE=3 LAT_SECONDS=2 bench/dns/run.sh   # a quick check
#   SERVERS="coredns knot" bench/dns/run.sh      # peers only
#   SERVERS="cairn cairn-rrl" bench/dns/run.sh   # the cost of RRL and cookies only
#   MODE=flip bench/dns/run.sh                   # cairn under 0/50/100% steady-eligible churn
#   MODE=flip FLIP_STYLE=today bench/dns/run.sh  # the same with the first churn driver
#   MODE=rollout bench/dns/run.sh                # the tail right after 8,000 registrations,
#                                                # then steady, and Knot (bench/dns/rollout.sh)
#   MODE=rollout PROFILE=1 ROUNDS=1 bench/dns/run.sh   # the same, with pprof on the server
#   bench/dns/summarize.sh                       # medians, ratios, tables, plots
#   make bench-dns                               # install check, the three runs above, summarize
#
# Each round starts every server afresh, pinned to CPU $SERVER_CPU (taskset,
# re-applied to every thread once it answers; GOMAXPROCS=1 for the Go servers,
# one UDP/TCP worker for Knot), waits until it really answers (a sample name
# must come back with all its addresses), waits for a quiet machine, then runs
# dnsperf pinned to CPU $CLIENT_CPU:
#
#   1. warm-up, WARMUP s:      dnsperf -e -c 16 -q 200 -T 1 -t 2 -S 1 -l WARMUP
#   2. measured, MEASURE s:    the same, -l MEASURE: QPS, average latency
#   3. latency, LAT_SECONDS s: -Q LAT_QPS -v; p50/p99/p99.9/max from the
#      per-query lines
#
# and records, per run, a TSV row in bench/results/dns-$TAG.tsv (appended;
# header written once): QPS, server CPU seconds (utime+stime) during the
# measured run and QPS per server core-second, the CPU used by everything
# else (foreign_pct, % of one core: the machine is shared; summarize.sh drops
# runs above DISTURBED_PCT), p50/p99/p99.9/max, VmRSS idle (before the
# warm-up), loaded (after the measured run) and its high-water mark,
# response size and rcodes. When the file's last header is not this
# version's, the header is appended again before the first row, so that
# summarize.sh reads old and new rows by their own columns.
#
# cairn is started with --dev, its data is applied over the HTTP API (cairn
# apply -f, then one POST /v1/services/{ns}/{svc}/instances per instance via
# bench/dns/drive), and it is measured once a sample name resolves with all 8
# addresses. If it does not answer (the DNS server is not there yet), its row
# is recorded as skipped and the peers still run.
#
# cairn-rrl is the same cairn with the UDP port's protections on, at a rate
# that limits nothing, to measure what they cost on the hot path (issue 13;
# docs/decisions.md, "DNS response-rate limiting and cookies"): it is
# started with `--dns-rrl-rate 100000000 --dns-cookies on` (on loopback
# both are off unless asked for), and dnsperf sends every query with an
# EDNS client cookie (-E 10:$CLIENT_COOKIE), so that each answer costs one
# rate-limit accounting and one server cookie made (SipHash). Before it is
# measured, the run checks that both are really on (dig +cookie gets a
# server cookie; /metrics says cairn_dns_rrl_enabled 1) and fails the row
# otherwise; after it, the row's note has the answers the limiter slipped
# or dropped (want 0) and the cookies it counted. Plain cairn's note says
# whether either was on (want neither). summarize.sh shows both runs side
# by side, with the ratios.
#
# MODE=flip runs cairn only, once per rate in FLIP_RATES (default 0 50 100)
# per round, over a smaller data set (FLIP_N services, default 50, so that
# the one-report-per-instance-per-second driver fits in the server's core)
# while bench/dns/drive flip churns health: half of every service's
# endpoints ready, FLIP_RATE% of them changing every second, the same
# number of reports at every rate. FLIP_STYLE chooses the driver
# (bench/dns/drive/main.go):
#
#   steady  (default) a swap's two reports land one evaluation round apart,
#           timed from cairn's rounds, so that the endpoint leaving and the
#           one coming back change in the same round: every service keeps
#           half its endpoints eligible at every round. An endpoint is out
#           for two rounds at least (admit_after > withdraw_after >= 1), so
#           100% a second needs two rounds a second: cairn runs with
#           --eval-interval FLIP_INTERVAL (500ms) and the services with the
#           quickest re-admission the store accepts (bench/dns/gen -churn
#           steady). The shrink cap still counts every withdrawal, so
#           above about 10% a second it defers some and the count rises:
#           the DNS check below shows whether the run was steady.
#   today   the driver as first written: each pair swapped within one
#           batch every second (FLIP_INTERVAL 1s, cairn's default rounds,
#           the default admission policy), whose eligible count drifts.
#
# The row carries the style, the driver's reports/s, the eligibility
# changes cairn published per second, the most withdrawals the shrink cap
# deferred at once, and the DNS check: the fewest and most A records in
# the answers the driver sampled for a few services, ten a second, and the
# share that differed from half the service.
#
# MODE=rollout: see bench/dns/rollout.sh. Its rows have a phase (rollout:
# the ROLLOUT_SECONDS from the end of the registrations; steady: the same
# server STEADY_AFTER s after them, and the peers), load_s (how long the
# registrations took) and start_s (seconds from their end to the run).
#
# Environment (defaults in brackets):
#   ROUNDS [3]  ROUND_BASE [0]  SERVERS [cairn cairn-rrl coredns knot; cairn knot for rollout]
#   MODE [main|flip|rollout]  TAG [main, or flip, or rollout]  N [1000]  SEED [1]
#   ROLLOUT_SECONDS [30]  STEADY_AFTER [60]  PROFILE [0]  TRACE_SECONDS [5]
#   WARMUP [3]  MEASURE [15]  LAT_SECONDS [15]  LAT_QPS [10000]  SETTLE [1]
#   FLIP_RATES [0 50 100]  FLIP_N [50]  FLIP_STYLE [steady|today]
#   FLIP_INTERVAL [500ms steady, 1s today]  FLIP_SETUP_TIMEOUT [60]
#   SERVER_CPU [1]  CLIENT_CPU [0]  DISTURBED_PCT [25]  QUIET_TRIES [10]
#   CAIRN_BIN [bin/cairn]  COREDNS_BIN [$PEERS_DIR/coredns]  KNOTD [knotd]
#   PEERS_DIR [/tmp/cairn-bench-peers]  READY_TIMEOUT [30]  KEEP_WORK [0]
#   COREDNS_PORT [15353]  KNOT_PORT [15354]  CAIRN_DNS_PORT [15355]
#   CAIRN_HTTP_PORT [18480]  (raft and gRPC use the next two ports)
#   CLIENT_COOKIE [0123456789abcdef]  (cairn-rrl's dnsperf -E 10:, 16 hex digits)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

MODE=${MODE:-main}
case $MODE in
main) TAG=${TAG:-main} ;;
flip) TAG=${TAG:-flip} ;;
rollout)
	TAG=${TAG:-rollout}
	SERVERS=${SERVERS:-cairn knot}
	;;
*)
	echo "run.sh: MODE=$MODE: want main, flip or rollout" >&2
	exit 2
	;;
esac
ROUNDS=${ROUNDS:-3}
ROUND_BASE=${ROUND_BASE:-0}
SERVERS=${SERVERS:-cairn cairn-rrl coredns knot}
N=${N:-1000}
SEED=${SEED:-1}
WARMUP=${WARMUP:-3}
MEASURE=${MEASURE:-15}
LAT_SECONDS=${LAT_SECONDS:-15}
LAT_QPS=${LAT_QPS:-10000}
SETTLE=${SETTLE:-1}
FLIP_RATES=${FLIP_RATES:-0 50 100}
FLIP_N=${FLIP_N:-50}
FLIP_STYLE=${FLIP_STYLE:-steady}
case $FLIP_STYLE in
steady) FLIP_INTERVAL=${FLIP_INTERVAL:-500ms} ;;
today) FLIP_INTERVAL=${FLIP_INTERVAL:-1s} ;;
*)
	echo "run.sh: FLIP_STYLE=$FLIP_STYLE: want steady or today" >&2
	exit 2
	;;
esac
if [[ ! $FLIP_INTERVAL =~ ^[0-9]+(ms|s)$ ]]; then
	echo "run.sh: FLIP_INTERVAL=$FLIP_INTERVAL: want a duration such as 500ms or 1s" >&2
	exit 2
fi
FLIP_SETUP_TIMEOUT=${FLIP_SETUP_TIMEOUT:-60}
ROLLOUT_SECONDS=${ROLLOUT_SECONDS:-30}
STEADY_AFTER=${STEADY_AFTER:-60}
PROFILE=${PROFILE:-0}
TRACE_SECONDS=${TRACE_SECONDS:-5}
SERVER_CPU=${SERVER_CPU:-1}
CLIENT_CPU=${CLIENT_CPU:-0}
DISTURBED_PCT=${DISTURBED_PCT:-25}
QUIET_TRIES=${QUIET_TRIES:-10}
READY_TIMEOUT=${READY_TIMEOUT:-30}
KEEP_WORK=${KEEP_WORK:-0}
PEERS_DIR=${PEERS_DIR:-/tmp/cairn-bench-peers}
CAIRN_BIN=${CAIRN_BIN:-bin/cairn}
COREDNS_BIN=${COREDNS_BIN:-$PEERS_DIR/coredns}
KNOTD=${KNOTD:-knotd}
COREDNS_PORT=${COREDNS_PORT:-15353}
KNOT_PORT=${KNOT_PORT:-15354}
CAIRN_DNS_PORT=${CAIRN_DNS_PORT:-15355}
CAIRN_HTTP_PORT=${CAIRN_HTTP_PORT:-18480}
CLIENT_COOKIE=${CLIENT_COOKIE:-0123456789abcdef}
# cairn-rrl's flags: RRL and cookies on, at a rate that limits nothing.
CAIRN_RRL_FLAGS=(--dns-rrl-rate 100000000 --dns-cookies on)
DOMAIN=cairn.internal.
NAMESPACE=bench
RESULTS_DIR=$root/bench/results
RESULTS=$RESULTS_DIR/dns-$TAG.tsv

for v in ROUNDS ROUND_BASE N WARMUP MEASURE LAT_SECONDS LAT_QPS SETTLE FLIP_N FLIP_SETUP_TIMEOUT ROLLOUT_SECONDS STEADY_AFTER PROFILE TRACE_SECONDS SERVER_CPU CLIENT_CPU QUIET_TRIES READY_TIMEOUT; do
	if [[ ! ${!v} =~ ^[0-9]+$ ]]; then
		echo "run.sh: $v=${!v}: want a whole number" >&2
		exit 2
	fi
done
if ((ROUNDS < 1 || ROUNDS > 20 || MEASURE < 1 || LAT_SECONDS < 1 || QUIET_TRIES > 120 || READY_TIMEOUT > 600 || FLIP_SETUP_TIMEOUT > 600)); then
	echo "run.sh: want 1 <= ROUNDS <= 20, MEASURE >= 1, LAT_SECONDS >= 1, QUIET_TRIES <= 120, READY_TIMEOUT and FLIP_SETUP_TIMEOUT <= 600" >&2
	exit 2
fi
if [[ ! $CLIENT_COOKIE =~ ^[0-9a-fA-F]{16}$ ]]; then
	echo "run.sh: CLIENT_COOKIE=$CLIENT_COOKIE: want 16 hex digits (an 8-octet client cookie)" >&2
	exit 2
fi
if (($(nproc) < 2)) || ((SERVER_CPU == CLIENT_CPU)); then
	echo "run.sh: needs two CPUs, the server's and dnsperf's (SERVER_CPU=$SERVER_CPU CLIENT_CPU=$CLIENT_CPU, $(nproc) CPUs)" >&2
	exit 2
fi
for tool in dnsperf dig taskset ss; do
	command -v "$tool" >/dev/null || {
		echo "run.sh: $tool missing: run bench/dns/install-peers.sh" >&2
		exit 1
	}
done

WORK=$(mktemp -d /tmp/cairn-dnsbench.XXXXXX)
server_pid=
driver_pid=
prof_pids=()

# stop_pid PID: SIGTERM, up to 5 s, then SIGKILL. Only our own children.
stop_pid() {
	local pid=$1 i
	[[ -n $pid ]] || return 0
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local p
	for p in "${prof_pids[@]}"; do stop_pid "$p"; done
	stop_pid "$driver_pid"
	stop_pid "$server_pid"
	driver_pid='' server_pid=''
	if [[ $KEEP_WORK == 1 ]]; then
		echo "run.sh: work files kept in $WORK" >&2
	else
		rm -rf "$WORK"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log() { printf '%s %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# ---------------------------------------------------------------- measuring

CLK_TCK=$(getconf CLK_TCK)

# cpu_ticks PID: utime+stime of the process (all threads), in clock ticks.
cpu_ticks() {
	local stat rest f
	stat=$(<"/proc/$1/stat") || return 1
	rest=${stat##*) } # the command name may hold spaces and parentheses
	read -r -a f <<<"$rest"
	echo $((f[11] + f[12]))
}

# busy_ticks: user+nice+system of the whole machine, in clock ticks (irq and
# softirq time, the loopback stack, are left out, as they are of the server).
busy_ticks() {
	local user nice system
	read -r _ user nice system _ </proc/stat
	echo $((user + nice + system))
}

# status_kib PID FIELD: a VmRSS-style field of /proc/PID/status, in KiB
# ("-" when the process is gone).
status_kib() {
	local k v _
	[[ -r /proc/$1/status ]] || {
		echo -
		return 0
	}
	while read -r k v _; do
		if [[ $k == "$2:" ]]; then
			echo "$v"
			return 0
		fi
	done <"/proc/$1/status"
	echo -
}

now() { echo "$EPOCHREALTIME"; }

# fdiv A B [SCALE]: A/B with SCALE decimals (awk; bash has no floats).
fdiv() { awk -v a="$1" -v b="$2" -v s="${3:-1}" 'BEGIN { if (b == 0) print "-"; else printf "%.*f\n", s, a / b }'; }

# quiet_gate: wait until the machine's CPU use, with the server idle, stays
# under DISTURBED_PCT of one core for a second; at most QUIET_TRIES seconds,
# after which the run goes ahead and foreign_pct tells how disturbed it was.
quiet_gate() {
	local i b0 b1 pct=0
	((QUIET_TRIES > 0)) || return 0
	for ((i = 0; i < QUIET_TRIES; i++)); do
		b0=$(busy_ticks)
		sleep 1
		b1=$(busy_ticks)
		pct=$(((b1 - b0) * 100 / CLK_TCK))
		if ((pct < DISTURBED_PCT)); then
			return 0
		fi
	done
	log "  machine busy ($pct% of a core for the last second); measuring anyway"
}

# dnsperf_run OUT ARGS...: dnsperf pinned to CLIENT_CPU against the current
# server, output to OUT; prints the CPU ticks dnsperf used.
dnsperf_run() {
	local out=$1 t
	shift
	# `times` in the subshell reports the CPU of the children it waited for.
	t=$( (taskset -c "$CLIENT_CPU" dnsperf -s 127.0.0.1 -p "$port" -d "$queries" "$@" >"$out" 2>&1 || true; times) | tail -n 1)
	awk -v t="$t" -v hz="$CLK_TCK" 'BEGIN {
		n = split(t, f, " "); s = 0
		for (i = 1; i <= n; i++) { split(f[i], ms, /[ms]/); s += ms[1] * 60 + ms[2] }
		printf "%d\n", s * hz + 0.5 }'
}

# stat_of FILE LABEL: a figure from dnsperf's summary.
stat_of() {
	local v
	case $2 in
	qps) v=$(awk '/Queries per second:/ { print $4 }' "$1") ;;
	completed) v=$(awk '/Queries completed:/ { print $3 }' "$1") ;;
	lost) v=$(awk '/Queries lost:/ { print $3 }' "$1") ;;
	avg_lat_ms) v=$(awk '/Average Latency \(s\):/ { printf "%.3f", $4 * 1000 }' "$1") ;;
	run_s) v=$(awk '/Run time \(s\):/ { print $4 }' "$1") ;;
	resp_bytes) v=$(awk '/Average packet size:/ { print $NF }' "$1") ;;
	noerror) v=$(awk '/Response codes:/ { for (i = 1; i <= NF; i++) if ($i ~ /^NOERROR/) print $(i + 1) }' "$1") ;;
	nxdomain) v=$(awk '/Response codes:/ { for (i = 1; i <= NF; i++) if ($i ~ /^NXDOMAIN/) print $(i + 1) }' "$1") ;;
	esac
	echo "${v:--}"
}

# percentiles FILE: "p50 p99 p99.9 max" in ms from dnsperf -v lines
# ("> NOERROR name type 0.000123"), nearest rank over answered queries.
# At 10,000 queries a second for 8 s, p99.9 is the 80th slowest answer.
percentiles() {
	awk '$1 == ">" && $NF ~ /^[0-9.]+$/ { print $NF * 1000 }' "$1" | sort -n |
		awk 'function rank(q,  i) { i = int(NR * q); if (i < NR * q) i++; return i }
		{ v[NR] = $1 } END {
			if (NR == 0) { print "- - - -"; exit }
			printf "%.3f %.3f %.3f %.3f\n", v[rank(0.50)], v[rank(0.99)], v[rank(0.999)], v[NR] }'
}

# ---------------------------------------------------------------- servers

# answers NAME TYPE: the records of the answer from the current server.
answers() {
	dig +short +norec +time=1 +tries=1 -p "$port" @127.0.0.1 "$1" "$2" 2>/dev/null || true
}

# count_a NAME: how many IPv4 addresses the current server answers for NAME
# (dig +short prints error lines too; only addresses count).
count_a() { answers "$1" A | grep -cE '^[0-9]+(\.[0-9]+){3}$' || true; }

# wait_full NAME WANT TIMEOUT: until NAME has WANT addresses (any: at
# least one); fails after
# TIMEOUT seconds or when the server exits.
wait_full() {
	local name=$1 want=$2 deadline got=0
	deadline=$(awk -v n="$(now)" -v t="$3" 'BEGIN { printf "%.3f", n + t }')
	while awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n < d) }'; do
		kill -0 "$server_pid" 2>/dev/null || {
			last_seen="the server exited"
			return 1
		}
		got=$(count_a "$name")
		if [[ $got == "$want" ]] || { [[ $want == any ]] && ((got > 0)); }; then
			return 0
		fi
		sleep 0.1
	done
	last_seen="$name: $got of $want addresses after $3 s"
	return 1
}

port_free() {
	[[ -z $(ss -Hlnu "sport = :$1") && -z $(ss -Hlnt "sport = :$1") ]]
}

# start_server NAME DATA_DIR: starts NAME pinned to SERVER_CPU; sets
# server_pid, port and version. The pid is the server's own (exec).
start_server() {
	local name=$1 data=$2 dir=$WORK/$1
	# A fresh directory every start: cairn would otherwise resume the last
	# run's raft state (its instances, their flap history and quarantine).
	rm -rf "$dir"
	mkdir -p "$dir"
	case $name in
	coredns)
		port=$COREDNS_PORT
		version=$("$COREDNS_BIN" -version | head -n 1)
		cat >"$dir/Corefile" <<-EOF
			$DOMAIN:$port {
			    bind 127.0.0.1
			    file $data/cairn.internal.zone
			}
		EOF
		set -- "$COREDNS_BIN" -conf "$dir/Corefile"
		;;
	knot)
		port=$KNOT_PORT
		version=$("$KNOTD" --version | head -n 1)
		mkdir -p "$dir/db"
		# One UDP and one TCP worker, as the research ran it. zonefile-sync -1
		# and journal-content none keep Knot from writing the zone back.
		cat >"$dir/knot.conf" <<-EOF
			server:
			    rundir: "$dir"
			    listen: 127.0.0.1@$port
			    udp-workers: 1
			    tcp-workers: 1
			    background-workers: 1
			database:
			    storage: "$dir/db"
			log:
			  - target: stderr
			    any: warning
			template:
			  - id: default
			    storage: "$data"
			    zonefile-sync: -1
			    zonefile-load: whole
			    journal-content: none
			    semantic-checks: off
			zone:
			  - domain: $DOMAIN
			    file: cairn.internal.zone
		EOF
		set -- "$KNOTD" -c "$dir/knot.conf"
		;;
	cairn | cairn-rrl)
		port=$CAIRN_DNS_PORT
		version="cairn $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD 2>/dev/null || echo -dirty)"
		# The tree's commit says what bin/cairn was built from only if
		# it was built here last; another binary is named as well.
		[[ $CAIRN_BIN == bin/cairn ]] || version+=" ($CAIRN_BIN)"
		# --probe-workers 0: the benchmark services have no checks, and this
		# makes sure nothing probes their 10.x addresses whatever the data.
		set -- "$CAIRN_BIN" server --dev --data-dir "$dir/data" \
			--http-addr "127.0.0.1:$CAIRN_HTTP_PORT" --raft-addr "127.0.0.1:$((CAIRN_HTTP_PORT + 1))" \
			--grpc-addr "127.0.0.1:$((CAIRN_HTTP_PORT + 2))" --dns-addr "127.0.0.1:$port" \
			--domain "$DOMAIN" --region bench --zone bench-a --probe-workers 0 --log-level warn
		# The steady churn driver sends one batch per evaluation round,
		# so the rounds run at its tick (see FLIP_STYLE above).
		[[ $MODE == flip ]] && set -- "$@" --eval-interval "$FLIP_INTERVAL"
		[[ $name == cairn-rrl ]] && set -- "$@" "${CAIRN_RRL_FLAGS[@]}"
		# MODE=rollout PROFILE=1: Go's profiles (bench/dns/rollout.sh).
		[[ $PROFILE == 1 ]] && set -- "$@" --debug-addr "127.0.0.1:$((CAIRN_HTTP_PORT + 3))"
		;;
	esac
	local p
	for p in "$port" $([[ $name == cairn* ]] && echo "$CAIRN_HTTP_PORT $((CAIRN_HTTP_PORT + 1)) $((CAIRN_HTTP_PORT + 2))"); do
		port_free "$p" || {
			echo "run.sh: port $p is in use; set the *_PORT variables" >&2
			return 1
		}
	done
	start_t=$(now)
	bash -c 'exec "$@"' _ taskset -c "$SERVER_CPU" env GOMAXPROCS=1 "$@" >"$dir/log" 2>&1 &
	server_pid=$!
}

stop_server() {
	stop_pid "$server_pid"
	server_pid=
}

# metric NAME: the sum of a metric's series on the current cairn's
# /metrics ("-" when it has none: a binary older than the metric).
metric() {
	curl -sf "http://127.0.0.1:$CAIRN_HTTP_PORT/metrics" 2>/dev/null |
		awk -v m="$1" '$1 == m || index($1, m "{") == 1 { s += $2; n++ } END { if (n) printf "%.0f\n", s; else print "-" }'
}

# protection_state: "rrl=R cookies=C server_cookie=yes|no" of the current
# cairn: its cairn_dns_rrl_enabled and cairn_dns_cookies_enabled gauges,
# and whether dig +cookie gets a server cookie back (a COOKIE of 48 hex
# digits: the client's 16 and the server's 32).
protection_state() {
	local sc=no
	if dig +cookie +norec +time=1 +tries=1 -p "$port" @127.0.0.1 "$DOMAIN" SOA 2>/dev/null |
		grep -qE '^; COOKIE: [0-9a-f]{48} '; then
		sc=yes
	fi
	echo "rrl=$(metric cairn_dns_rrl_enabled) cookies=$(metric cairn_dns_cookies_enabled) server_cookie=$sc"
}

# protection_counts: the current cairn's answers slipped and dropped by
# RRL and the cookies it counted, as note fields.
protection_counts() {
	echo "rrl_slipped=$(metric cairn_dns_rrl_slipped_total) rrl_dropped=$(metric cairn_dns_rrl_dropped_total) cookies=$(metric cairn_dns_cookies_total)"
}

# load_cairn DATA_DIR NAME: apply the definitions, register every instance.
load_cairn() {
	local data=$1 name=$2 addr=http://127.0.0.1:$CAIRN_HTTP_PORT i
	for ((i = 0; i < 100; i++)); do
		curl -sf -o /dev/null "$addr/readyz" && break
		kill -0 "$server_pid" 2>/dev/null || return 1
		sleep 0.1
	done
	((i < 100)) || {
		last_seen="/readyz never answered 200"
		return 1
	}
	"$CAIRN_BIN" --addr "$addr" apply -f "$data/services.yaml" >/dev/null || {
		last_seen="cairn apply failed"
		return 1
	}
	taskset -c "$CLIENT_CPU" "$WORK/drive" load -addr "$addr" -f "$data/registrations.jsonl" \
		-out "$data/instances.jsonl" >"$WORK/$name/load.json" || {
		last_seen="registration failed"
		return 1
	}
}

# ---------------------------------------------------------------- one run

header="time	tag	round	mode	flip_pct	server	version	n	qps	completed	lost	avg_lat_ms	run_s	server_cpu_s	server_busy_pct	qps_per_core_s	dnsperf_busy_pct	foreign_pct	p50_ms	p99_ms	p999_ms	max_ms	lat_qps	lat_lost	lat_foreign_pct	rss_idle_kib	rss_loaded_kib	rss_hwm_kib	resp_bytes	noerror	nxdomain	start_s	load_s	flip_style	flip_interval	flip_reports_per_s	flip_change_pct	flip_quarantined	flip_deferred	flip_dns_a_min	flip_dns_a_max	flip_dns_off_pct	phase	status	note"
header_checked=0

# row FIELD=VALUE...: appends one TSV row; absent fields are "-". Before
# the first row it appends this version's header unless the file's last
# header is already it (summarize.sh switches columns at each header).
row() {
	local -A f=()
	local kv col line=
	for kv in "$@"; do f[${kv%%=*}]=${kv#*=}; done
	for col in $header; do
		line+=${line:+$'\t'}${f[$col]:--}
	done
	mkdir -p "$RESULTS_DIR"
	if ((header_checked == 0)); then
		if [[ ! -s $RESULTS ]] || [[ $(grep $'^time\t' "$RESULTS" | tail -n 1) != "$header" ]]; then
			echo "$header" >>"$RESULTS"
		fi
		header_checked=1
	fi
	echo "$line" >>"$RESULTS"
}

# fail_run NAME WHY: records a failed run (common, version: run_one's) and
# stops the server and the driver.
fail_run() {
	log "$1: $2; log: $(tail -n 3 "$WORK/$1/log" | tr '\n' ' ')"
	row "${common[@]}" version="$version" status=failed note="$2"
	stop_pid "$driver_pid"
	driver_pid=''
	stop_server
}

# run_one ROUND SERVER DATA_DIR FLIP_PCT ("-" outside MODE=flip)
run_one() {
	local round=$1 name=$2 data=$3 flip=$4
	local common=(time="$(date -u +%Y-%m-%dT%H:%M:%SZ)" tag="$TAG" round="$round" mode="$MODE" flip_pct="$flip" server="$name" n="$n_services")
	[[ $MODE == flip ]] && common+=(flip_style="$FLIP_STYLE" flip_interval="$FLIP_INTERVAL")
	local sample=svc0.$NAMESPACE.svc.$DOMAIN last=svc$((n_services - 1)).$NAMESPACE.svc.$DOMAIN
	local want=8 load_s=- start_s
	last_seen=
	# The flip driver keeps half of each service ready (4 of 8), and under
	# the today style's churn (or a deferred withdrawal) answers drift:
	# any answer will do. The driver's DNS check counts them.
	[[ $MODE == flip ]] && want=any
	start_server "$name" "$data" || return 1
	if [[ $name == cairn* ]]; then
		if ! load_cairn "$data" "$name"; then
			log "$name: could not load the data ($last_seen), skipped; log: $(tail -n 3 "$WORK/$name/log" | tr '\n' ' ')"
			row "${common[@]}" version="$version" status=skipped note="load: $last_seen"
			stop_server
			return 0
		fi
		load_s=$(awk -v a="$start_t" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
		if [[ $MODE == flip ]]; then
			rm -f "$WORK/flip.ready"
			# Bounded: setup + settle + quiet gate + the three dnsperf runs, plus slack.
			local dur=$((FLIP_SETUP_TIMEOUT + READY_TIMEOUT + SETTLE + QUIET_TRIES + WARMUP + MEASURE + LAT_SECONDS + 30))
			taskset -c "$CLIENT_CPU" "$WORK/drive" flip -addr "http://127.0.0.1:$CAIRN_HTTP_PORT" \
				-f "$data/instances.jsonl" -style "$FLIP_STYLE" -pct "$flip" -interval "$FLIP_INTERVAL" -duration "${dur}s" \
				-dns "127.0.0.1:$CAIRN_DNS_PORT" -domain "$DOMAIN" \
				-ready-file "$WORK/flip.ready" >"$WORK/flip.json" 2>"$WORK/flip.err" &
			driver_pid=$!
			local i
			for ((i = 0; i < FLIP_SETUP_TIMEOUT * 10; i++)); do
				[[ -e $WORK/flip.ready ]] && break
				kill -0 "$driver_pid" 2>/dev/null || break
				sleep 0.1
			done
			if [[ ! -e $WORK/flip.ready ]]; then
				stop_pid "$driver_pid" # on SIGTERM it says how far the setup got
				driver_pid=''
				log "cairn: the flip driver's setup did not finish in ${FLIP_SETUP_TIMEOUT}s: $(tr '\n' ' ' <"$WORK/flip.err")"
				row "${common[@]}" version="$version" status=skipped note="flip setup did not finish"
				stop_server
				return 0
			fi
		fi
	fi
	if ! wait_full "$sample" "$want" "$READY_TIMEOUT" || ! wait_full "$last" "$want" 5; then
		log "$name: no DNS answer, skipped ($last_seen)"
		row "${common[@]}" version="$version" load_s="$load_s" status=skipped note="no DNS answer: $last_seen"
		stop_pid "$driver_pid"
		driver_pid=
		stop_server
		return 0
	fi
	start_s=$(awk -v a="$start_t" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
	# cairn-rrl must measure RRL and cookies on, plain cairn both off:
	# a binary whose flags do not do what this script asks would
	# otherwise measure the wrong thing and say nothing.
	local protection=
	if [[ $name == cairn* ]]; then
		protection=$(protection_state)
		if [[ $name == cairn-rrl && $protection != "rrl=1 cookies=1 server_cookie=yes" ]]; then
			fail_run "$name" "RRL and cookies not both on ($protection): does $CAIRN_BIN take ${CAIRN_RRL_FLAGS[*]}?"
			return 0
		fi
	fi
	# Pin every thread, including any the server made with its own mask.
	taskset -a -p -c "$SERVER_CPU" "$server_pid" >/dev/null
	sleep "$SETTLE"
	quiet_gate
	local rss_idle
	rss_idle=$(status_kib "$server_pid" VmRSS)

	local dnsperf_args=(-e -c 16 -q 200 -T 1 -t 2 -S 1) cookie_args=()
	# cairn-rrl: every query with a client cookie (EDNS option 10).
	[[ $name == cairn-rrl ]] && cookie_args=(-E "10:$CLIENT_COOKIE")
	dnsperf_args+=("${cookie_args[@]}")
	dnsperf_run "$WORK/warmup.out" "${dnsperf_args[@]}" -l "$WARMUP" >/dev/null

	local s0 s1 b0 b1 d0=0 d1=0 t0 t1 dp
	s0=$(cpu_ticks "$server_pid") || {
		fail_run "$name" "server exited during the warm-up"
		return 0
	}
	b0=$(busy_ticks)
	[[ -n $driver_pid ]] && d0=$(cpu_ticks "$driver_pid")
	t0=$(now)
	dp=$(dnsperf_run "$WORK/measure.out" "${dnsperf_args[@]}" -l "$MEASURE")
	t1=$(now)
	s1=$(cpu_ticks "$server_pid") || {
		fail_run "$name" "server exited during the measured run"
		return 0
	}
	b1=$(busy_ticks)
	[[ -n $driver_pid ]] && d1=$(cpu_ticks "$driver_pid")
	local rss_loaded
	rss_loaded=$(status_kib "$server_pid" VmRSS)

	local el server_ticks foreign qps completed
	el=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print b - a }')
	server_ticks=$((s1 - s0))
	foreign=$((b1 - b0 - server_ticks - dp - (d1 - d0)))
	((foreign < 0)) && foreign=0
	qps=$(stat_of "$WORK/measure.out" qps)
	completed=$(stat_of "$WORK/measure.out" completed)
	if [[ $qps == - || $completed == - ]] || ((server_ticks == 0)); then
		fail_run "$name" "dnsperf measured nothing: $(tail -n 2 "$WORK/measure.out" | tr '\n\t' '  ')"
		return 0
	fi

	# Latency at a fixed rate, below every server's capacity.
	local l0 l1 lb0 lb1 ld0=0 ld1=0 lt0 lt1 ldp
	l0=$(cpu_ticks "$server_pid")
	lb0=$(busy_ticks)
	[[ -n $driver_pid ]] && ld0=$(cpu_ticks "$driver_pid")
	lt0=$(now)
	ldp=$(dnsperf_run "$WORK/latency.out" -e -c 16 -q 200 -T 1 -t 2 "${cookie_args[@]}" -Q "$LAT_QPS" -l "$LAT_SECONDS" -v)
	lt1=$(now)
	l1=$(cpu_ticks "$server_pid" || echo "$l0")
	lb1=$(busy_ticks)
	[[ -n $driver_pid ]] && ld1=$(cpu_ticks "$driver_pid" || echo "$ld0")
	local lf p50 p99 p999 pmax
	lf=$((lb1 - lb0 - (l1 - l0) - ldp - (ld1 - ld0)))
	((lf < 0)) && lf=0
	read -r p50 p99 p999 pmax < <(percentiles "$WORK/latency.out")

	local hwm flip_rps=- flip_change=- flip_q=- flip_def=- dns_min=- dns_max=- dns_off=- note=
	hwm=$(status_kib "$server_pid" VmHWM)
	if [[ $name == cairn* ]]; then
		# What the protections did over the whole run: for cairn-rrl
		# nothing limited and every query's cookie counted.
		note="$protection $(protection_counts)"
	fi
	if [[ -n $driver_pid ]]; then
		stop_pid "$driver_pid" # SIGTERM: it prints its result and exits
		driver_pid=
		if [[ -s $WORK/flip.json ]]; then
			local flip_note
			read -r flip_rps flip_change flip_q flip_def dns_min dns_max dns_off flip_note < <(awk '
				# num KEY: the number after "KEY": in the one-line JSON object.
				function num(k) { if (!match($0, "\"" k "\":-?[0-9.e+]+")) return "-"; return substr($0, RSTART + length(k) + 3, RLENGTH - length(k) - 3) }
				{
				o = num("overruns"); f = num("failed"); l = num("late_batches"); p = ($0 ~ /"phase_locked":true/) ? "yes" : "no"
				m = num("dns_a_min"); x = num("dns_a_max"); d = num("dns_off_pct")
				if (m < 0) { m = "-"; x = "-"; d = "-" } else d = sprintf("%.1f", d)
				printf "%.0f %.1f %s %s %s %s %s overruns=%s,failed_reports=%s,late_batches=%s,phase_locked=%s\n",
					num("reports_per_s"), num("observed_change_per_s_pct"), num("observed_quarantined"), num("observed_deferred_max"),
					m, x, d, o, f, l, p }' "$WORK/flip.json")
			note+="${note:+; }$flip_note"
		else
			note+="${note:+; }flip driver printed nothing: $(tr '\n' ' ' <"$WORK/flip.err")"
		fi
		cp "$WORK/flip.json" "$RESULTS_DIR/dns-$TAG-r$round-flip$flip.json" 2>/dev/null || true
	fi
	stop_server

	# Busy shares are of dnsperf's own run time: after its time limit it
	# waits up to -t 2 s for lost queries, while the server idles.
	local run_s lat_run_s core_ticks per_core foreign_pct
	run_s=$(stat_of "$WORK/measure.out" run_s)
	[[ $run_s == - ]] && run_s=$el
	lat_run_s=$(stat_of "$WORK/latency.out" run_s)
	[[ $lat_run_s == - ]] && lat_run_s=$(awk -v a="$lt0" -v b="$lt1" 'BEGIN { print b - a }')
	core_ticks=$(awk -v e="$run_s" -v h="$CLK_TCK" 'BEGIN { print e * h }')
	per_core=$(fdiv "$((completed * CLK_TCK))" "$server_ticks" 0)
	foreign_pct=$(fdiv "$((foreign * 100))" "$core_ticks" 1)
	row "${common[@]}" version="$version" qps="$qps" completed="$completed" \
		lost="$(stat_of "$WORK/measure.out" lost)" avg_lat_ms="$(stat_of "$WORK/measure.out" avg_lat_ms)" \
		run_s="$run_s" server_cpu_s="$(fdiv "$server_ticks" "$CLK_TCK" 2)" \
		server_busy_pct="$(fdiv "$((server_ticks * 100))" "$core_ticks" 1)" qps_per_core_s="$per_core" \
		dnsperf_busy_pct="$(fdiv "$((dp * 100))" "$core_ticks" 1)" foreign_pct="$foreign_pct" \
		p50_ms="$p50" p99_ms="$p99" p999_ms="$p999" max_ms="$pmax" lat_qps="$(stat_of "$WORK/latency.out" qps)" lat_lost="$(stat_of "$WORK/latency.out" lost)" \
		lat_foreign_pct="$(fdiv "$((lf * 100))" "$(awk -v e="$lat_run_s" -v h="$CLK_TCK" 'BEGIN { print e * h }')" 1)" \
		rss_idle_kib="$rss_idle" rss_loaded_kib="$rss_loaded" rss_hwm_kib="$hwm" \
		resp_bytes="$(stat_of "$WORK/measure.out" resp_bytes)" noerror="$(stat_of "$WORK/measure.out" noerror)" \
		nxdomain="$(stat_of "$WORK/measure.out" nxdomain)" start_s="$start_s" load_s="$load_s" \
		flip_reports_per_s="$flip_rps" flip_change_pct="$flip_change" flip_quarantined="$flip_q" \
		flip_deferred="$flip_def" flip_dns_a_min="$dns_min" flip_dns_a_max="$dns_max" flip_dns_off_pct="$dns_off" \
		status=ok note="$note"
	log "$name$([[ $flip == - ]] || echo " flip $flip% ($FLIP_STYLE)"): $qps QPS, $per_core per server core-s," \
		"p50/p99/p99.9 $p50/$p99/$p999 ms at $LAT_QPS QPS, foreign $foreign_pct%" \
		"$([[ $flip == - ]] || echo "; A records per answer $dns_min-$dns_max, $flip_change% changed/s, $flip_def deferred")"
}

# ---------------------------------------------------------------- main

log "building the data generator and the API driver"
go build -o "$WORK/gen" ./bench/dns/gen
go build -o "$WORK/drive" ./bench/dns/drive

churn=today # the services' policy; no health changes in MODE=main
if [[ $MODE == rollout ]]; then
	# shellcheck source=bench/dns/rollout.sh
	source "$root/bench/dns/rollout.sh"
	n_services=$N
	FLIP_RATES=-
	churn=rollout
elif [[ $MODE == flip ]]; then
	SERVERS=cairn
	n_services=$FLIP_N
	churn=$FLIP_STYLE
else
	n_services=$N
	FLIP_RATES=-
fi
data=$WORK/data
queries=$data/queries.txt
"$WORK/gen" -n "$n_services" -seed "$SEED" -namespace "$NAMESPACE" -domain "$DOMAIN" -churn "$churn" -out "$data"

for name in $SERVERS; do
	case $name in
	cairn | cairn-rrl)
		if [[ $MODE == rollout && $name == cairn-rrl ]]; then
			echo "run.sh: MODE=rollout runs cairn, knot and coredns, not cairn-rrl" >&2
			exit 2
		fi
		[[ -x $CAIRN_BIN ]] || {
			echo "run.sh: $CAIRN_BIN missing: make build (or set CAIRN_BIN)" >&2
			exit 1
		}
		;;
	coredns) [[ -x $COREDNS_BIN ]] || {
		echo "run.sh: $COREDNS_BIN missing: bench/dns/install-peers.sh" >&2
		exit 1
	} ;;
	knot) command -v "$KNOTD" >/dev/null || {
		echo "run.sh: $KNOTD missing: bench/dns/install-peers.sh" >&2
		exit 1
	} ;;
	*)
		echo "run.sh: unknown server $name: want cairn, cairn-rrl, coredns or knot" >&2
		exit 2
		;;
	esac
done

log "MODE=$MODE$([[ $MODE == flip ]] && echo " FLIP_STYLE=$FLIP_STYLE FLIP_INTERVAL=$FLIP_INTERVAL") TAG=$TAG rounds $((ROUND_BASE + 1))-$((ROUND_BASE + ROUNDS)), servers: $SERVERS; $n_services services; results in ${RESULTS#"$root"/}"
# rotate K WORDS...: the words, starting from the K-th (mod their number).
# Each round measures the servers, and the churn rates, in an order
# rotated by one from the round before: this host's speed drifts within
# a round (docs/benchmarks/churn.md), and a fixed order would hand the drift to the
# same server, or the same rate, every round.
rotate() {
	local k=$1
	shift
	local n=$# i
	for ((i = 0; i < n; i++)); do
		local j=$(((k + i) % n + 1))
		printf '%s ' "${!j}"
	done
}

for ((r = ROUND_BASE + 1; r <= ROUND_BASE + ROUNDS; r++)); do
	# shellcheck disable=SC2086 # word lists
	for name in $(rotate $((r - 1)) $SERVERS); do
		# shellcheck disable=SC2086
		for rate in $(rotate $((r - 1)) $FLIP_RATES); do
			if [[ $rate == - ]]; then log "round $r: $name"; else log "round $r: $name, flip $rate%"; fi
			# Every run gets the data as generated: cairn's load writes
			# instances.jsonl beside it, the peers only read it.
			if [[ $MODE == rollout && $name == cairn ]]; then
				run_rollout "$r" "$data"
			elif [[ $MODE == rollout ]]; then
				run_fixed "$r" "$name" "$data"
			else
				run_one "$r" "$name" "$data" "$rate"
			fi
		done
	done
done
log "done: bench/dns/summarize.sh $TAG"
