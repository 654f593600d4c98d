# rollout.sh: MODE=rollout of bench/dns/run.sh, sourced by it (its helpers
# and variables: start_server, dnsperf_run, quiet_gate, row, ...).
#
# The DNS tail through a rollout (issue 31): cairn starts empty, gets the
# definitions (cairn apply, services with the default policy: slow start
# 30 s), then the N × 8 instances through the API as fast as a deploy tool
# would send them (bench/dns/drive load: 16 requests in flight, pinned to
# dnsperf's CPU). From the moment the last registration is answered,
# dnsperf runs at a fixed LAT_QPS for ROLLOUT_SECONDS (30): the "rollout"
# row, every instance slow-starting. Then, STEADY_AFTER s (60) after the
# last registration, the same server at the same rate for ROLLOUT_SECONDS
# again: the "steady" row. Knot, started afresh in the same round, gets
# the same fixed-rate run: its "steady" row. No throughput run: the rate
# is fixed, and the figures are p50/p99/p99.9/max, the server's CPU and,
# in cairn's note, the collections Go's GC ran during the phase
# (gc_cycles, from go_gc_duration_seconds_count on /metrics).
#
# PROFILE=1 also records where cairn's core goes during each phase: it
# starts cairn with --debug-addr (port CAIRN_HTTP_PORT+3) and keeps a CPU
# profile of each phase (/debug/pprof/profile, the whole phase) and an
# execution trace of its first TRACE_SECONDS (5; 0: none), beside the
# results: bench/results/dns-TAG-rR-PHASE.{pprof,trace}; read them with
# go tool pprof -top and go tool trace. Profiling costs the server a
# little: profiled rows say so in their note and compare with each other.

# prof_start PHASE ROUND: starts the phase's profiles when PROFILE=1.
prof_start() {
	prof_pids=()
	[[ $PROFILE == 1 && $name == cairn ]] || return 0
	local base=http://127.0.0.1:$((CAIRN_HTTP_PORT + 3))/debug/pprof out=$RESULTS_DIR/dns-$TAG-r$2-$1
	mkdir -p "$RESULTS_DIR"
	taskset -c "$CLIENT_CPU" curl -sf -o "$out.pprof" "$base/profile?seconds=$ROLLOUT_SECONDS" &
	prof_pids+=($!)
	if ((TRACE_SECONDS > 0)); then
		taskset -c "$CLIENT_CPU" curl -sf -o "$out.trace" "$base/trace?seconds=$TRACE_SECONDS" &
		prof_pids+=($!)
	fi
}

# prof_stop: waits for the profiles (they end with the phase).
prof_stop() {
	local p
	for p in "${prof_pids[@]}"; do wait "$p" || log "  a profile failed (does $CAIRN_BIN take --debug-addr?)"; done
	prof_pids=()
}

# fixed_rate NAME ROUND PHASE SECONDS COMMON...: one fixed-rate dnsperf run
# against the current server, as a row with the server's CPU over it.
fixed_rate() {
	local name=$1 round=$2 phase=$3 secs=$4
	shift 4
	local s0 s1 b0 b1 t0 t1 dp p50 p99 p999 pmax el foreign gc0=- gc1=- gcs=
	# cairn's collections during the run (Go's collector on the one core).
	[[ $name == cairn ]] && gc0=$(metric go_gc_duration_seconds_count)
	s0=$(cpu_ticks "$server_pid") || return 1
	b0=$(busy_ticks)
	prof_start "$phase" "$round"
	t0=$(now)
	dp=$(dnsperf_run "$WORK/$phase.out" -e -c 16 -q 200 -T 1 -t 2 -Q "$LAT_QPS" -l "$secs" -v)
	t1=$(now)
	s1=$(cpu_ticks "$server_pid") || return 1
	b1=$(busy_ticks)
	prof_stop
	[[ $name == cairn ]] && gc1=$(metric go_gc_duration_seconds_count)
	[[ $gc0 != - && $gc1 != - ]] && gcs="gc_cycles=$((gc1 - gc0))"
	el=$(awk -v a="$t0" -v b="$t1" 'BEGIN { print (b - a) * '"$CLK_TCK"' }')
	foreign=$((b1 - b0 - (s1 - s0) - dp))
	((foreign < 0)) && foreign=0
	read -r p50 p99 p999 pmax < <(percentiles "$WORK/$phase.out")
	row "$@" version="$version" phase="$phase" lat_qps="$(stat_of "$WORK/$phase.out" qps)" \
		lat_lost="$(stat_of "$WORK/$phase.out" lost)" p50_ms="$p50" p99_ms="$p99" p999_ms="$p999" max_ms="$pmax" \
		server_cpu_s="$(fdiv $((s1 - s0)) "$CLK_TCK" 2)" server_busy_pct="$(fdiv $(((s1 - s0) * 100)) "$el" 1)" \
		lat_foreign_pct="$(fdiv $((foreign * 100)) "$el" 1)" foreign_pct="$(fdiv $((foreign * 100)) "$el" 1)" \
		rss_loaded_kib="$(status_kib "$server_pid" VmRSS)" rss_hwm_kib="$(status_kib "$server_pid" VmHWM)" \
		noerror="$(stat_of "$WORK/$phase.out" noerror)" nxdomain="$(stat_of "$WORK/$phase.out" nxdomain)" \
		status=ok note="${rollout_note:-}${gcs:+${rollout_note:+; }$gcs}$([[ $PROFILE == 1 ]] && echo "; profiled")"
	log "$name $phase: p50/p99/p99.9/max $p50/$p99/$p999/$pmax ms at $LAT_QPS QPS, server $(fdiv $(((s1 - s0) * 100)) "$el" 1)% of its core${gcs:+, $gcs}"
}

# run_rollout ROUND DATA_DIR: cairn through a rollout, then steady.
run_rollout() {
	local round=$1 data=$2 addr=http://127.0.0.1:$CAIRN_HTTP_PORT i
	local common=(time="$(date -u +%Y-%m-%dT%H:%M:%SZ)" tag="$TAG" round="$round" mode="$MODE" server=cairn n="$n_services")
	rollout_note=
	start_server cairn "$data" || return 1
	for ((i = 0; i < 100; i++)); do
		curl -sf -o /dev/null "$addr/readyz" && break
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	if ((i == 100)) || ! "$CAIRN_BIN" --addr "$addr" apply -f "$data/services.yaml" >/dev/null; then
		fail_run cairn "did not start or take the definitions"
		return 0
	fi
	taskset -a -p -c "$SERVER_CPU" "$server_pid" >/dev/null
	sleep "$SETTLE"
	quiet_gate
	local r0 r1 reg_s
	r0=$(now)
	if ! taskset -c "$CLIENT_CPU" "$WORK/drive" load -addr "$addr" -f "$data/registrations.jsonl" \
		-out "$data/instances.jsonl" >"$WORK/cairn/load.json"; then
		fail_run cairn "registration failed"
		return 0
	fi
	r1=$(now)
	reg_s=$(awk -v a="$r0" -v b="$r1" 'BEGIN { printf "%.2f", b - a }')
	rollout_note="registered $(wc -l <"$data/registrations.jsonl") in ${reg_s}s"
	# From the moment the registrations end: no settle, no quiet gate.
	fixed_rate cairn "$round" rollout "$ROLLOUT_SECONDS" "${common[@]}" load_s="$reg_s" \
		start_s="$(awk -v a="$r1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')" || {
		fail_run cairn "server exited during the rollout phase"
		return 0
	}
	# The names must all be there by now (a check, not a wait).
	local last=svc$((n_services - 1)).$NAMESPACE.svc.$DOMAIN
	if [[ $(count_a "$last") != 8 ]]; then
		log "cairn: $last has not 8 addresses after the rollout phase"
		rollout_note+="; $last: $(count_a "$last") addresses after the rollout phase"
	fi
	local wait_s
	wait_s=$(awk -v a="$r1" -v b="$(now)" -v s="$STEADY_AFTER" 'BEGIN { w = a + s - b; printf "%.2f", (w > 0 ? w : 0) }')
	sleep "$wait_s"
	quiet_gate
	fixed_rate cairn "$round" steady "$ROLLOUT_SECONDS" "${common[@]}" load_s="$reg_s" \
		start_s="$(awk -v a="$r1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')" || {
		fail_run cairn "server exited during the steady phase"
		return 0
	}
	stop_server
}

# run_fixed ROUND NAME DATA_DIR: a peer at the fixed rate, as cairn's
# steady phase.
run_fixed() {
	local round=$1 name=$2 data=$3
	local common=(time="$(date -u +%Y-%m-%dT%H:%M:%SZ)" tag="$TAG" round="$round" mode="$MODE" server="$name" n="$n_services")
	rollout_note=
	start_server "$name" "$data" || return 1
	if ! wait_full "svc0.$NAMESPACE.svc.$DOMAIN" 8 "$READY_TIMEOUT"; then
		fail_run "$name" "no DNS answer: $last_seen"
		return 0
	fi
	taskset -a -p -c "$SERVER_CPU" "$server_pid" >/dev/null
	sleep "$SETTLE"
	quiet_gate
	fixed_rate "$name" "$round" steady "$ROLLOUT_SECONDS" "${common[@]}" || {
		fail_run "$name" "server exited during the run"
		return 0
	}
	stop_server
}
