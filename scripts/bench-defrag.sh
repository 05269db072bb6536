#!/usr/bin/env bash
# Put latency with and without a concurrent defragment (issue #15): kvd
# (bolt), kvd (badger) and etcd v3.7.3, each a fresh single member on
# loopback, filled to about BENCH_DEFRAG_MB MiB of 1 KiB values, then driven
# by tools/bench with a steady put load twice: once alone ("no defrag"), once
# while `etcdctl defrag` runs back to back for the whole measured window
# ("defrag"). Prints a markdown table on stdout (medians over the rounds);
# progress goes to stderr. See docs/benchmarks.md, "Online defragment".
#
# The load is closed-loop (each client waits for its answer), so a server
# that stops writes for a defragment shows it as fewer requests per second
# and a slowest request as long as the defragment, more than in its p99: a
# stall holds only one request per client.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-defrag.sh [options]

  -s, --size MB        fill each server to about MB MiB of values (default
                       1024; env BENCH_DEFRAG_MB)
  -d, --duration D     measure each phase for D (default 30s; env BENCH_DURATION)
  -c, --clients N      put loops of the load (default 16; env BENCH_CLIENTS)
  -r, --rounds N       run every server N times, in rotated order, and report
                       medians (default 1; env BENCH_ROUNDS)
      --servers LIST   servers to run, in order (default "kvd-bolt kvd-badger
                       etcd"; env BENCH_SERVERS)
      --port P         client port P, peer port P+1 (default 23890; env BENCH_PORT)
  -o, --out FILE       also write the table to FILE
  -h, --help

Binaries: kvd is built from ./cmd/kvd into a temporary directory unless
KVD_BIN names one; etcd and etcdctl are bin/etcd and bin/etcdctl (v3.7.3)
unless ETCD_BIN and ETCDCTL_BIN name others.
At 1024 MiB a round takes about ten minutes on two cores.
EOF
}

size_mb=${BENCH_DEFRAG_MB:-1024}
duration=${BENCH_DURATION:-30s}
clients=${BENCH_CLIENTS:-16}
rounds=${BENCH_ROUNDS:-1}
servers=${BENCH_SERVERS:-"kvd-bolt kvd-badger etcd"}
port=${BENCH_PORT:-23890}
out=""
warmup=2s

while [ $# -gt 0 ]; do
	case $1 in
	-s | --size) size_mb=$2; shift 2 ;;
	-d | --duration) duration=$2; shift 2 ;;
	-c | --clients) clients=$2; shift 2 ;;
	-r | --rounds) rounds=$2; shift 2 ;;
	--servers) servers=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	-o | --out) out=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench-defrag.sh: unknown option $1" >&2; usage >&2; exit 1 ;;
	esac
done
for v in size_mb clients rounds port; do
	case ${!v} in
	'' | *[!0-9]* | 0) echo "bench-defrag.sh: $v must be a positive integer, got '${!v}'" >&2; exit 1 ;;
	esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. "$root/scripts/lib/stats.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvd-bench-defrag.XXXXXX")
server_pid=""
defrag_pid=""
endpoint=http://127.0.0.1:$port

log() { printf 'bench-defrag.sh: %s\n' "$*" >&2; }

stop_server() {
	[ -n "$server_pid" ] || return 0
	kill "$server_pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	server_pid=""
}

cleanup() {
	[ -z "$defrag_pid" ] || kill "$defrag_pid" 2>/dev/null || true
	stop_server
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building the load tool"
go build -o "$work/bench" ./tools/bench
bench=$work/bench
kvd=${KVD_BIN:-}
if [ -z "$kvd" ] && [[ " $servers " == *" kvd-"* ]]; then
	log "building kvd"
	go build -o "$work/kvd" ./cmd/kvd
	kvd=$work/kvd
fi
etcd=${ETCD_BIN:-$root/bin/etcd}
etcdctl=${ETCDCTL_BIN:-$root/bin/etcdctl}
[ -x "$etcdctl" ] || { echo "bench-defrag.sh: no etcdctl at $etcdctl (set ETCDCTL_BIN)" >&2; exit 1; }

ctl() { "$etcdctl" --endpoints "$endpoint" --command-timeout 600s "$@"; }

# db_size: the member's db size in bytes, from etcdctl endpoint status.
db_size() { ctl endpoint status -w json | sed -n 's/.*"dbSize":\([0-9]*\).*/\1/p'; }

start_server() {
	local s=$1 r=$2 data=$work/$1.data
	local args=(--name b --data-dir "$data" --quota-backend-bytes $((16 << 30))
		--listen-client-urls "$endpoint" --advertise-client-urls "$endpoint"
		--listen-peer-urls "http://127.0.0.1:$((port + 1))"
		--initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))"
		--initial-cluster "b=http://127.0.0.1:$((port + 1))")
	local bin=$kvd
	case $s in
	kvd-bolt) args+=(--backend bolt) ;;
	kvd-badger) args+=(--backend badger) ;;
	etcd) bin=$etcd ;;
	esac
	"$bin" "${args[@]}" >"$work/$s.r$r.log" 2>&1 &
	server_pid=$!
	for _ in $(seq 60); do
		if "$bench" --endpoints "$endpoint" --clients 1 --conns 1 --total 1 --dial-timeout 1s \
			--request-timeout 1s range --key bench/ready --consistency l >/dev/null 2>&1; then
			return 0
		fi
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.5
	done
	log "$s did not start: $(tail -3 "$work/$s.r$r.log")"
	return 1
}

# jfield JSON NAME: a field of the tool's one-line JSON.
jfield() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }

load() {
	"$bench" --endpoints "$endpoint" --clients "$clients" --conns 4 --duration "$duration" \
		--warmup "$warmup" --request-timeout 600s --json \
		put --key-size 8 --val-size 1024 --key-space-size 10000 --key-prefix load/
}

# Per server and phase: space-separated values, one per round.
declare -A rps p50 p99 p999 slowest ndefrag tdefrag size errs

record() {
	local key=$1 json=$2
	rps[$key]+="$(jfield "$json" rps) "
	p50[$key]+="$(jfield "$json" p50) "
	p99[$key]+="$(jfield "$json" p99) "
	p999[$key]+="$(jfield "$json" p99_9) "
	slowest[$key]+="$(jfield "$json" slowest) "
	local e
	e=$(jfield "$json" errors)
	# No JSON at all (the tool failed before printing) counts as one error.
	errs[$key]=$((${errs[$key]:-0} + ${e:-1}))
}

# server_took LOG FROM: the durations in seconds, one a line, of the
# defragments the server logged after line FROM of LOG (kvd: "bolt defrag
# done" / "badger defrag done"; etcd: "finished defragmenting directory").
server_took() {
	tail -n +"$(($2 + 1))" "$1" | grep -E '"msg":"(bolt defrag done|badger defrag done|finished defragmenting directory)"' |
		sed -n 's/.*"took":"\([^"]*\)".*/\1/p' | awk '{
			d = $0; t = 0
			if (d ~ /ms$/) { t = d / 1000 } else if (d ~ /(µs|us)$/) { t = d / 1e6 } else if (d ~ /ns$/) { t = d / 1e9 } else {
				if (d ~ /m/) { split(d, a, "m"); t = a[1] * 60; d = a[2] }
				sub(/s$/, "", d); t += d
			}
			printf "%.3f\n", t
		}'
}

# defrag_loop FILE: defragment back to back until killed, one duration in
# seconds per line of FILE.
defrag_loop() {
	local t0
	while :; do
		t0=$(date +%s.%N)
		ctl defrag >/dev/null 2>>"$work/defrag.err" || echo "defrag failed" >>"$work/defrag.err"
		awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.3f\n", b - a }' >>"$1"
	done
}

read -ra server_list <<<"$servers"
keys=$((size_mb * 1024))
start=$(date +%s)
for ((r = 0; r < rounds; r++)); do
	n=${#server_list[@]}
	for ((i = 0; i < n; i++)); do
		s=${server_list[$(((i + r) % n))]}
		log "round $((r + 1))/$rounds, $s: starting"
		start_server "$s" "$r" || exit 1
		log "$s: filling $keys keys of 1 KiB"
		if ! json=$("$bench" --endpoints "$endpoint" --clients 64 --conns 8 --total "$keys" --request-timeout 60s --json \
			put --key-size 8 --val-size 1024 --key-space-size "$keys" --sequential-keys --key-prefix fill/); then
			# A server that cannot be filled gets no figures this round;
			# the others still run.
			log "$s: fill failed (load tool exit status $?); skipping this round of $s"
			stop_server
			rm -rf "${work:?}/$s.data"
			continue
		fi
		log "$s: filled at $(jfield "$json" rps) puts/s"
		size[$s]+="$(db_size) "
		log "$s: db size $(db_size); measuring puts without defrag"
		record "$s,none" "$(load)"
		log "$s: measuring puts with defragments back to back"
		: >"$work/defrag.times"
		mark=$(wc -l <"$work/$s.r$r.log")
		load >"$work/load.json" &
		load_pid=$!
		sleep "${warmup%s}"
		defrag_loop "$work/defrag.times" &
		defrag_pid=$!
		# The load tool fails when a server stalls past its request
		# timeout (etcd's stop-the-world defragment of a large file can):
		# record that and go on with the other servers.
		if ! wait "$load_pid"; then
			log "$s: the load tool failed during the defragments; its figures for this round are what it printed, if anything"
			errs[$s,defrag]=$((${errs[$s,defrag]:-0} + 1))
		fi
		kill "$defrag_pid" 2>/dev/null || true
		wait "$defrag_pid" 2>/dev/null || true
		defrag_pid=""
		# The defragment the kill interrupted goes on in the server; let it end.
		ctl defrag >/dev/null
		if [ -s "$work/load.json" ]; then record "$s,defrag" "$(cat "$work/load.json")"; fi
		# The server's own durations: a defragment longer than the window
		# (kvd's throttled copy) ends only after it. All but the last, which
		# ran after the load.
		server_took "$work/$s.r$r.log" "$mark" | sed '$d' >"$work/defrag.took"
		ndefrag[$s]+="$(wc -l <"$work/defrag.times") "
		tdefrag[$s]+="$(median "$(tr '\n' ' ' <"$work/defrag.took")") "
		log "$s: $(wc -l <"$work/defrag.times") defragments done in the window; server durations under load $(tr '\n' ' ' <"$work/defrag.took")"
		if [ -s "$work/defrag.err" ]; then log "$s: defrag errors: $(tail -2 "$work/defrag.err")"; fi
		stop_server
		rm -rf "${work:?}/$s.data"
	done
done
log "done in $(($(date +%s) - start))s"

table() {
	local of_rounds=""
	[ "$rounds" -gt 1 ] && of_rounds=", medians of $rounds rounds"
	echo "Single member filled with $keys keys of 1 KiB; load: put of 1 KiB values over 10,000 keys," \
		"$clients clients over 4 connections, $duration per phase after $warmup warm-up$of_rounds;" \
		"$(nproc 2>/dev/null || echo "?") CPUs, $(go env GOVERSION), kvd $(git rev-parse --short HEAD 2>/dev/null || echo "?")."
	echo
	echo "| server | db size MiB | phase | defrags in window (median s) | puts/s | p50 ms | p99 ms | p99.9 ms | slowest ms | errors | p99 defrag/none |"
	echo "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	local s ph d
	for s in "${server_list[@]}"; do
		for ph in none defrag; do
			d=""
			[ "$ph" = defrag ] && d="$(median "${ndefrag[$s]}") ($(median "${tdefrag[$s]}"))"
			printf '| %s | %.0f | %s | %s | %.0f | %.2f | %.2f | %.2f | %.0f | %s | %s |\n' "$s" \
				"$(awk -v b="$(median "${size[$s]}")" 'BEGIN { print b / 1048576 }')" "$ph" "$d" \
				"$(median "${rps[$s,$ph]}")" "$(median "${p50[$s,$ph]}")" "$(median "${p99[$s,$ph]}")" \
				"$(median "${p999[$s,$ph]}")" "$(median "${slowest[$s,$ph]}")" "${errs[$s,$ph]}" \
				"$([ "$ph" = defrag ] && ratio "$(median "${p99[$s,defrag]}")" "$(median "${p99[$s,none]}")")"
		done
	done
}

if [ -n "$out" ]; then
	table | tee "$out"
else
	table
fi
