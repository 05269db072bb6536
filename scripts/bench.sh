#!/usr/bin/env bash
# Side-by-side benchmark: kvd (bolt), kvd (badger) and etcd v3.7.3, each a
# fresh single member (or, with --members N, a fresh N-member cluster) on
# loopback, driven one at a time by tools/bench with the same settings. Prints
# a markdown table and the kvd/etcd ratios on stdout; progress goes to stderr.
# See docs/benchmarks.md.
#
# A server that cannot be built or started gets "failed" rows; the others run.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench.sh [options]

  -d, --duration D     measure each workload for D (default 4s; env BENCH_DURATION)
  -n, --total N        measure N requests per workload instead of a duration
                       (env BENCH_TOTAL)
  -w, --warmup D       unrecorded warm-up before each workload (default 1s;
                       env BENCH_WARMUP)
  -r, --rounds N       run every server N times, in rotated order, and report
                       medians; evens out a machine whose load drifts
                       (default 1; env BENCH_ROUNDS)
  -c, --clients N      concurrent request loops of a workload without its own
                       count (default 100; env BENCH_CLIENTS)
      --conns N        gRPC connections (default 10, with --members N: 4N;
                       env BENCH_CONNS)
  -m, --members N      start each server as an N-member cluster and spread the
                       connections over all members (default 1; env BENCH_MEMBERS)
  -s, --servers LIST   servers to run, in order (default "kvd-bolt kvd-badger etcd";
                       env BENCH_SERVERS)
      --workloads LIST workloads to run (default "put range-key-s range-key-l
                       range-prefix-s txn", with --members N > 1: "put@1 put@16
                       put@100 range-key-l range-key-s"; env BENCH_WORKLOADS);
                       W@C runs workload W with C clients
      --port P         member i gets client port P+10i, peer port P+10i+1
                       (default 23790; env BENCH_PORT)
  -o, --out FILE       also write the tables to FILE
      --json FILE      also write the results as JSON to FILE (schema
                       "kvd-bench/1": run metadata, then per server and
                       workload the medians and every round's figures;
                       tools/benchplot draws SVG plots from it); like -o,
                       relative to the repository root
      --keep-logs DIR  copy the server logs (one per member and round) to DIR
  -h, --help

Binaries: bin/kvd is built from ./cmd/kvd and bin/etcd from e2e/cmd/etcd,
unless KVD_BIN or ETCD_BIN name one to use.
A quick run (the defaults) takes about a minute and a half.
EOF
}

duration=${BENCH_DURATION:-4s}
members=${BENCH_MEMBERS:-1}
total=${BENCH_TOTAL:-}
warmup=${BENCH_WARMUP:-1s}
rounds=${BENCH_ROUNDS:-1}
clients=${BENCH_CLIENTS:-100}
conns=${BENCH_CONNS:-}
servers=${BENCH_SERVERS:-"kvd-bolt kvd-badger etcd"}
workloads=${BENCH_WORKLOADS:-}
port=${BENCH_PORT:-23790}
out=""
json_out=""
keep_logs=""
# A hung server must not hang the script: each tool run gets this long.
run_timeout=${BENCH_RUN_TIMEOUT:-300}

while [ $# -gt 0 ]; do
	case $1 in
	-d | --duration) duration=$2; total=""; shift 2 ;;
	-n | --total) total=$2; shift 2 ;;
	-w | --warmup) warmup=$2; shift 2 ;;
	-r | --rounds) rounds=$2; shift 2 ;;
	-c | --clients) clients=$2; shift 2 ;;
	--conns) conns=$2; shift 2 ;;
	-m | --members) members=$2; shift 2 ;;
	-s | --servers) servers=$2; shift 2 ;;
	--workloads) workloads=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	-o | --out) out=$2; shift 2 ;;
	--json) json_out=$2; shift 2 ;;
	--keep-logs) keep_logs=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench.sh: unknown option $1" >&2; usage >&2; exit 1 ;;
	esac
done

case $members in
'' | *[!0-9]* | 0) echo "bench.sh: --members must be a positive integer, got '$members'" >&2; exit 1 ;;
esac
if [ -z "$conns" ]; then
	conns=10
	# A multiple of the member count gives every member the same share.
	[ "$members" -gt 1 ] && conns=$((4 * members))
fi
if [ -z "$workloads" ]; then
	workloads="put range-key-s range-key-l range-prefix-s txn"
	[ "$members" -gt 1 ] && workloads="put@1 put@16 put@100 range-key-l range-key-s"
fi

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

# Member i listens for clients on P+10i and for peers on P+10i+1.
client_urls=() peer_urls=() names=()
initial_cluster=""
for ((i = 0; i < members; i++)); do
	client_urls+=("http://127.0.0.1:$((port + 10 * i))")
	peer_urls+=("http://127.0.0.1:$((port + 10 * i + 1))")
	if [ "$members" -eq 1 ]; then names+=(b); else names+=("m$i"); fi
	initial_cluster+="${initial_cluster:+,}${names[i]}=${peer_urls[i]}"
done

work=$(mktemp -d "${TMPDIR:-/tmp}/kvd-bench.XXXXXX")
server_pids=()
reason=""
# The client endpoints of the running server, followers first, leader last.
endpoints=""

log() { printf 'bench.sh: %s\n' "$*" >&2; }

# stop_server: SIGTERM every member, SIGKILL whatever is left after 10s.
stop_server() {
	[ ${#server_pids[@]} -gt 0 ] || return 0
	local pid alive
	for pid in "${server_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
	for _ in $(seq 100); do
		alive=""
		for pid in "${server_pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
		[ -n "$alive" ] || break
		sleep 0.1
	done
	for pid in "${server_pids[@]}"; do
		kill -9 "$pid" 2>/dev/null || true
		wait "$pid" 2>/dev/null || true
	done
	server_pids=()
}

cleanup() {
	stop_server
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# workload_args NAME[@CLIENTS]: the tool's command line for one workload.
workload_args() {
	case ${1%@*} in
	put) echo "put --key-size 8 --val-size 256 --key-space-size 10000" ;;
	range-key-s) echo "range --key bench/key --preload 1 --val-size 256 --consistency s" ;;
	range-key-l) echo "range --key bench/key --preload 1 --val-size 256 --consistency l" ;;
	range-prefix-s) echo "range --prefix bench/prefix/ --preload 1000 --val-size 256 --consistency s" ;;
	txn) echo "txn --txn-ops 1 --key-size 8 --val-size 256 --key-space-size 10000" ;;
	*) return 1 ;;
	esac
}

workload_label() {
	local label
	case ${1%@*} in
	put) label="put" ;;
	range-key-s) label="range 1 key, serializable" ;;
	range-key-l) label="range 1 key, linearizable" ;;
	range-prefix-s) label="range 1,000-key prefix, serializable" ;;
	txn) label="txn compare-and-put" ;;
	esac
	case $1 in
	*@1) label+=", 1 client" ;;
	*@*) label+=", ${1##*@} clients" ;;
	esac
	echo "$label"
}

# workload_clients NAME[@CLIENTS]: the client count of one workload.
workload_clients() {
	if [ "$1" != "${1%@*}" ]; then echo "${1##*@}"; else echo "$clients"; fi
}

case $rounds in
'' | *[!0-9]* | 0) echo "bench.sh: --rounds must be a positive integer, got '$rounds'" >&2; exit 1 ;;
esac
read -ra server_list <<<"$servers"
for s in "${server_list[@]}"; do
	case $s in
	kvd-bolt | kvd-badger | etcd) ;;
	*) echo "bench.sh: unknown server $s (want kvd-bolt, kvd-badger, etcd)" >&2; exit 1 ;;
	esac
done
for w in $workloads; do
	workload_args "$w" >/dev/null || { echo "bench.sh: unknown workload $w" >&2; exit 1; }
	case $(workload_clients "$w") in
	'' | *[!0-9]* | 0) echo "bench.sh: bad client count in workload $w" >&2; exit 1 ;;
	esac
done

bound=(--duration "$duration")
[ -n "$total" ] && bound=(--total "$total")

mkdir -p bin
log "building bin/bench"
go build -o bin/bench ./tools/bench
bench=$root/bin/bench

declare -A bin_of missing
want() { case " $servers " in *" $1"*) return 0 ;; esac; return 1; }

if want kvd; then
	if [ -n "${KVD_BIN:-}" ]; then
		bin_of[kvd]=$KVD_BIN
	elif [ ! -d cmd/kvd ] || [ -z "$(ls cmd/kvd/*.go 2>/dev/null)" ]; then
		missing[kvd]="no ./cmd/kvd to build"
	else
		log "building bin/kvd"
		if go build -o bin/kvd ./cmd/kvd 2>"$work/kvd-build.log"; then
			bin_of[kvd]=$root/bin/kvd
		else
			missing[kvd]="build failed: $(head -1 "$work/kvd-build.log")"
		fi
	fi
fi
if want etcd; then
	if [ -n "${ETCD_BIN:-}" ]; then
		bin_of[etcd]=$ETCD_BIN
	elif [ ! -f e2e/cmd/etcd/main.go ]; then
		missing[etcd]="no e2e/cmd/etcd to build (set ETCD_BIN)"
	else
		log "building bin/etcd (v3.7.3, from the e2e module)"
		if (cd e2e && go build -o ../bin/etcd ./cmd/etcd) 2>"$work/etcd-build.log"; then
			bin_of[etcd]=$root/bin/etcd
		else
			missing[etcd]="build failed: $(head -1 "$work/etcd-build.log")"
		fi
	fi
fi

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# metric URL NAME: the value of an unlabelled Prometheus metric, empty if
# the member does not answer.
metric() {
	curl -s --max-time 2 "$1/metrics" 2>/dev/null | sed -n "s/^$2 \([0-9.e+-]*\)\$/\1/p" | head -1
}

# members_alive SERVER ROUND: 0 when every member still runs; else 1 with the
# reason (and the dead member's last log line) in $reason.
members_alive() {
	local i
	for i in "${!server_pids[@]}"; do
		if ! kill -0 "${server_pids[i]}" 2>/dev/null; then
			reason="member ${names[i]} exited: $(tail -1 "$work/$1.r$2.${names[i]}.log")"
			return 1
		fi
	done
}

# start_server SERVER ROUND: start a fresh cluster of $members members and
# wait until every member serves a linearizable read and exactly one member
# is leader with the others following it. Sets $endpoints (followers first,
# leader last: a one-client workload goes through a follower, as it would for
# two clients in three). Returns 1 with the reason in $reason. Not for a
# subshell: it sets $server_pids for the cleanup.
start_server() {
	local s=$1 r=$2 kind=${1%%-*} data=$work/$1.data i
	if [ -n "${missing[$kind]:-}" ]; then
		reason=${missing[$kind]}
		return 1
	fi
	for ((i = 0; i < members; i++)); do
		if port_busy "$((port + 10 * i))" || port_busy "$((port + 10 * i + 1))"; then
			reason="port $((port + 10 * i)) or $((port + 10 * i + 1)) already in use"
			return 1
		fi
	done
	for ((i = 0; i < members; i++)); do
		local args=(--name "${names[i]}" --data-dir "$data/${names[i]}"
			--listen-client-urls "${client_urls[i]}" --advertise-client-urls "${client_urls[i]}"
			--listen-peer-urls "${peer_urls[i]}" --initial-advertise-peer-urls "${peer_urls[i]}"
			--initial-cluster "$initial_cluster")
		[ "$members" -gt 1 ] && args+=(--initial-cluster-state new --initial-cluster-token "bench-$s-$r")
		case $s in
		kvd-bolt) args+=(--backend bolt) ;;
		kvd-badger) args+=(--backend badger) ;;
		esac
		"${bin_of[$kind]}" "${args[@]}" >"$work/$s.r$r.${names[i]}.log" 2>&1 &
		server_pids+=($!)
	done
	local deadline=$((SECONDS + 30 + 10 * members)) ready leaders leader followers
	while [ "$SECONDS" -lt "$deadline" ]; do
		if ! members_alive "$s" "$r"; then
			stop_server
			reason="at start, $reason"
			return 1
		fi
		ready=1
		for ((i = 0; i < members; i++)); do
			if ! "$bench" --endpoints "${client_urls[i]}" --clients 1 --conns 1 --total 1 --dial-timeout 1s \
				--request-timeout 1s range --key bench/ready --consistency l >/dev/null 2>&1; then
				ready=""
				break
			fi
		done
		if [ -n "$ready" ] && [ "$members" -eq 1 ]; then
			endpoints=${client_urls[0]}
			return 0
		fi
		if [ -n "$ready" ]; then
			leaders=0 leader="" followers=""
			for ((i = 0; i < members; i++)); do
				case "$(metric "${client_urls[i]}" etcd_server_has_leader)/$(metric "${client_urls[i]}" etcd_server_is_leader)" in
				1/1) leaders=$((leaders + 1)); leader=${client_urls[i]} ;;
				1/0) followers+="${client_urls[i]}," ;;
				esac
			done
			if [ "$leaders" -eq 1 ] && [ -n "$leader" ] &&
				[ "$(tr -cd , <<<"$followers" | wc -c)" -eq $((members - 1)) ]; then
				endpoints=$followers$leader
				log "$s: leader ${leader}"
				return 0
			fi
		fi
		sleep 0.5
	done
	stop_server
	reason="not serving with one leader after $((30 + 10 * members))s: $(tail -1 "$work/$s.r$r.${names[0]}.log")"
	return 1
}

# leader_changes: the sum over members of etcd_server_leader_changes_seen_total.
leader_changes() {
	local i n sum=0
	for ((i = 0; i < members; i++)); do
		n=$(metric "${client_urls[i]}" etcd_server_leader_changes_seen_total)
		sum=$(awk -v a="$sum" -v b="${n:-0}" 'BEGIN { print a + b }')
	done
	echo "$sum"
}

# jfield, json_str, json_num
. "$root/scripts/lib/json.sh"

# Per server and workload: space-separated values, one per successful
# round; errs sums the failed requests; fail keeps the last failure;
# round_json collects one JSON object per round, measured or failed (--json).
declare -A rps p50 p99 p999 errs fail round_json

# failed SERVER WORKLOAD ROUND TEXT: record a failed round.
failed() {
	fail[$1,$2]=$4
	round_json[$1,$2]+="${round_json[$1,$2]:+,}{\"round\":$(($3 + 1)),\"failure\":$(json_str "$4")}"
}

run_workload() {
	local s=$1 w=$2 r=$3 json rc=0
	local -a wargs
	read -ra wargs <<<"$(workload_args "$w")"
	json=$(timeout --foreground --kill-after=5 "$run_timeout" "$bench" --endpoints "$endpoints" \
		--clients "$(workload_clients "$w")" --conns "$conns" "${bound[@]}" --warmup "$warmup" --json \
		"${wargs[@]}" 2>"$work/run.err") || rc=$?
	if ! members_alive "$s" "$r"; then
		failed "$s" "$w" "$r" "failed: $reason"
		return 1
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
		failed "$s" "$w" "$r" "failed (exit $rc): $(tail -1 "$work/run.err")"
		return
	fi
	local n v_rps v_p50 v_p99 v_p999
	v_rps=$(jfield "$json" rps) v_p50=$(jfield "$json" p50) v_p99=$(jfield "$json" p99) v_p999=$(jfield "$json" p99_9)
	rps[$s,$w]+="$v_rps "
	p50[$s,$w]+="$v_p50 "
	p99[$s,$w]+="$v_p99 "
	p999[$s,$w]+="$v_p999 "
	n=$(jfield "$json" errors)
	errs[$s,$w]=$((${errs[$s,$w]:-0} + n))
	round_json[$s,$w]+="${round_json[$s,$w]:+,}{\"round\":$((r + 1)),\"rps\":$(json_num "$v_rps"),\"p50_ms\":$(json_num "$v_p50"),\"p99_ms\":$(json_num "$v_p99"),\"p99_9_ms\":$(json_num "$v_p999"),\"errors\":$(json_num "$n")}"
	if [ "$n" != 0 ]; then
		log "$s $w: $n errors, first: $(jfield "$json" first_error)"
	fi
}

# save_logs SERVER ROUND: copy the members' logs to --keep-logs.
save_logs() {
	[ -n "$keep_logs" ] || return 0
	mkdir -p "$keep_logs"
	cp "$work/$1.r$2."*.log "$keep_logs/" 2>/dev/null || true
}

leader_notes=""
start=$(date +%s)
start_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_at_start=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
for ((r = 0; r < rounds; r++)); do
	n=${#server_list[@]}
	for ((i = 0; i < n; i++)); do
		s=${server_list[$(((i + r) % n))]}
		log "round $((r + 1))/$rounds, $s: starting"
		if ! start_server "$s" "$r"; then
			log "$s: $reason"
			for w in $workloads; do failed "$s" "$w" "$r" "failed: $reason"; done
			save_logs "$s" "$r"
			rm -rf "${work:?}/$s.data"
			continue
		fi
		changes=$(leader_changes)
		dead=""
		for w in $workloads; do
			if [ -n "$dead" ]; then
				failed "$s" "$w" "$r" "failed: $dead"
				continue
			fi
			log "round $((r + 1))/$rounds, $s: $w"
			if ! run_workload "$s" "$w" "$r"; then
				dead=$reason
				log "$s: $reason"
			fi
		done
		if [ -z "$dead" ] && [ "$members" -gt 1 ]; then
			changes=$(awk -v a="$(leader_changes)" -v b="$changes" 'BEGIN { print a - b }')
			if [ "$changes" != 0 ]; then
				log "$s: leader changes seen while measuring (summed over members): $changes"
				leader_notes+="round $((r + 1)) $s: $changes leader changes seen while measuring (summed over members). "
			fi
		fi
		stop_server
		save_logs "$s" "$r"
		rm -rf "${work:?}/$s.data"
	done
done
elapsed=$(($(date +%s) - start))
load_at_end=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
log "done in ${elapsed}s"

# median, spread, ratio
. "$root/scripts/lib/stats.sh"

tables() {
	local bound_text="${total:+$total requests}"
	bound_text=${bound_text:-$duration}
	local of_rounds=""
	[ "$rounds" -gt 1 ] && of_rounds=", medians of $rounds rounds (req/s: min–max in brackets)"
	local who="$clients clients over $conns connections"
	[ "$members" -gt 1 ] && who="$members-member clusters, clients as labelled over $conns connections spread over the members"
	echo "$who, $bound_text per workload after $warmup warm-up$of_rounds;" \
		"$(nproc 2>/dev/null || echo "?") CPUs (load average at start $load_at_start), $(go env GOVERSION)," \
		"kvd $(git rev-parse --short HEAD 2>/dev/null || echo "?")."
	echo
	if [ -n "$leader_notes" ]; then
		echo "$leader_notes"
		echo
	fi
	echo "| server | workload | req/s | p50 ms | p99 ms | p99.9 ms | errors |"
	echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
	declare -A mrps mp99
	for s in "${server_list[@]}"; do
		for w in $workloads; do
			if [ -z "${rps[$s,$w]:-}" ]; then
				echo "| $s | $(workload_label "$w") | ${fail[$s,$w]//|/-} | | | | |"
				continue
			fi
			mrps[$s,$w]=$(median "${rps[$s,$w]}")
			mp99[$s,$w]=$(median "${p99[$s,$w]}")
			printf '| %s | %s | %.0f%s | %.2f | %.2f | %.2f | %s |\n' "$s" "$(workload_label "$w")" \
				"${mrps[$s,$w]}" "$(spread "${rps[$s,$w]}")" "$(median "${p50[$s,$w]}")" "${mp99[$s,$w]}" \
				"$(median "${p999[$s,$w]}")" "${errs[$s,$w]}"
		done
	done
	want etcd || return 0
	local kvds=()
	for s in "${server_list[@]}"; do [ "$s" = etcd ] || kvds+=("$s"); done
	[ ${#kvds[@]} -gt 0 ] || return 0
	echo
	local head="| workload |" sep="| --- |"
	for s in "${kvds[@]}"; do
		head+=" $s/etcd req/s | $s/etcd p99 |"
		sep+=" ---: | ---: |"
	done
	echo "$head"
	echo "$sep"
	for w in $workloads; do
		local row="| $(workload_label "$w") |"
		for s in "${kvds[@]}"; do
			row+=" $(ratio "${mrps[$s,$w]:-}" "${mrps[etcd,$w]:-}") | $(ratio "${mp99[$s,$w]:-}" "${mp99[etcd,$w]:-}") |"
		done
		echo "$row"
	done
}

if [ -n "$out" ]; then
	tables | tee "$out"
else
	tables
fi

# write_json FILE: the run as JSON (schema kvd-bench/1, see
# docs/benchmarks.md). Medians are over the rounds that measured; latencies
# in ms; a round that failed has "failure" instead of figures.
write_json() {
	local f=$1 tmp s w first sep commit dirty=false cpu ver
	commit=$(git rev-parse HEAD 2>/dev/null || echo "")
	[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && dirty=true
	cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
	mkdir -p "$(dirname "$f")"
	tmp=$f.tmp.$$
	{
		printf '{\n  "schema": "kvd-bench/1",\n'
		printf '  "date": %s,\n' "$(json_str "$start_date")"
		printf '  "git_commit": %s,\n  "git_dirty": %s,\n' "$(json_str "$commit")" "$dirty"
		printf '  "go_version": %s,\n' "$(json_str "$(go env GOVERSION)")"
		printf '  "machine": {"cores": %s, "cpu_model": %s, "os": %s, "load_average_at_start": %s, "load_average_at_end": %s},\n' \
			"$(json_num "$(nproc 2>/dev/null)")" "$(json_str "$cpu")" "$(json_str "$(uname -sr)")" \
			"$(json_num "$load_at_start")" "$(json_num "$load_at_end")"
		sep=""
		printf '  "versions": {'
		for s in kvd etcd; do
			[ -n "${bin_of[$s]:-}" ] || continue
			# Not "| head -1": under pipefail, SIGPIPE would fail it.
			ver=$("${bin_of[$s]}" --version 2>/dev/null) || ver=""
			ver=${ver%%$'\n'*}
			printf '%s%s: %s' "$sep" "$(json_str "$s")" "$(json_str "$ver")"
			sep=", "
		done
		printf '},\n'
		printf '  "duration": %s,\n  "total": %s,\n  "warmup": %s,\n' \
			"$([ -n "$total" ] && echo null || json_str "$duration")" \
			"$([ -n "$total" ] && json_num "$total" || echo null)" "$(json_str "$warmup")"
		printf '  "rounds": %s,\n  "members": %s,\n  "conns": %s,\n  "elapsed_seconds": %s,\n' \
			"$rounds" "$members" "$conns" "$elapsed"
		printf '  "servers": ['
		sep=""
		for s in "${server_list[@]}"; do printf '%s%s' "$sep" "$(json_str "$s")"; sep=", "; done
		printf '],\n  "workloads": [\n'
		first=1
		for w in $workloads; do
			[ -n "$first" ] || printf ',\n'
			first=""
			printf '    {"name": %s, "label": %s, "clients": %s, "command": %s}' "$(json_str "$w")" \
				"$(json_str "$(workload_label "$w")")" "$(workload_clients "$w")" "$(json_str "$(workload_args "$w")")"
		done
		printf '\n  ],\n  "results": [\n'
		first=1
		for s in "${server_list[@]}"; do
			for w in $workloads; do
				[ -n "$first" ] || printf ',\n'
				first=""
				printf '    {"server": %s, "workload": %s, "label": %s, "clients": %s, "members": %s,\n' \
					"$(json_str "$s")" "$(json_str "$w")" "$(json_str "$(workload_label "$w")")" \
					"$(workload_clients "$w")" "$members"
				if [ -n "${rps[$s,$w]:-}" ]; then
					printf '     "median": {"rps": %s, "p50_ms": %s, "p99_ms": %s, "p99_9_ms": %s},\n' \
						"$(json_num "$(median "${rps[$s,$w]}")")" "$(json_num "$(median "${p50[$s,$w]}")")" \
						"$(json_num "$(median "${p99[$s,$w]}")")" "$(json_num "$(median "${p999[$s,$w]}")")"
				else
					printf '     "median": null,\n'
				fi
				printf '     "errors": %s,\n' "${errs[$s,$w]:-0}"
				printf '     "failure": %s,\n' "$([ -n "${fail[$s,$w]:-}" ] && json_str "${fail[$s,$w]}" || echo null)"
				printf '     "per_round": [%s]}' "${round_json[$s,$w]:-}"
			done
		done
		printf '\n  ],\n  "notes": %s\n}\n' "$([ -n "$leader_notes" ] && json_str "${leader_notes% }" || echo null)"
	} >"$tmp"
	mv "$tmp" "$f"
	log "wrote $f"
}

[ -z "$json_out" ] || write_json "$json_out"
