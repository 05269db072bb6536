#!/usr/bin/env bash
# Server CPU per request, kvd beside etcd v3.7.3: each server in turn (kvd on
# bolt, kvd on Badger, etcd) serves the same fixed number of requests from
# tools/bench, and its user+system CPU time (from /proc) is divided by them.
# Unlike req/s on a shared 2-core machine, CPU per request barely moves with
# the load from other processes. Rounds alternate the servers.
#
#   scripts/bench-cpu.sh [rounds]     (default 2; N=requests, default 30000)
#
# SERVERS picks the servers (default "kvd-bolt kvd-badger etcd"); an entry
# SERVER@BIN runs that server from the binary BIN, so two kvd builds can be
# compared in the same run: SERVERS="kvd-bolt kvd-bolt@/tmp/kvd-new".
# WORKLOADS (default put, serializable and linearizable range, txn; ";"
# between workloads) picks the tool commands.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
n=${N:-30000}
mkdir -p bin
go build -o bin/bench ./tools/bench
go build -o bin/kvd ./cmd/kvd
[ -x bin/etcd ] || (cd e2e && go build -o ../bin/etcd ./cmd/etcd)
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
url=http://127.0.0.1:24790
peer=http://127.0.0.1:24791
hz=$(getconf CLK_TCK)

start() { # server[@bin]
	local bin=bin/kvd extra=()
	case $1 in *@*) bin=${1#*@} ;; esac
	case ${1%%@*} in
	kvd-bolt) extra=(--backend bolt) ;;
	kvd-badger) extra=(--backend badger) ;;
	etcd) [[ $1 == *@* ]] || bin=bin/etcd ;;
	esac
	rm -rf "$work/data"
	"$bin" --name b --data-dir "$work/data" --listen-client-urls $url --advertise-client-urls $url \
		--listen-peer-urls $peer --initial-advertise-peer-urls $peer --initial-cluster b=$peer \
		"${extra[@]}" >"$work/log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		bin/bench --endpoints $url --clients 1 --conns 1 --total 1 range --key ready --consistency l >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "$1 did not start: $(tail -1 "$work/log")" >&2
	return 1
}

cpu() { awk -v hz="$hz" '{ printf "%d", ($14 + $15) * 1000000 / hz }' "/proc/$pid/stat"; } # µs

# The ranges read one key that exists (put by the tool first, 256 bytes), so
# the engine's read is in the cost.
IFS=';' read -ra wls <<<"${WORKLOADS:-put;range --key k --preload 1 --consistency s;range --key k --preload 1 --consistency l;txn}"

echo "| server | workload | req/s | p99 ms | server CPU µs/request |"
echo "| --- | --- | ---: | ---: | ---: |"
for ((r = 0; r < rounds; r++)); do
	for s in ${SERVERS:-kvd-bolt kvd-badger etcd}; do
		start "$s" || continue
		for w in "${wls[@]}"; do
			# shellcheck disable=SC2086
			bin/bench --endpoints $url --total 5000 $w >/dev/null 2>&1 || true # warm up
			c0=$(cpu)
			# shellcheck disable=SC2086
			out=$(bin/bench --endpoints $url --total "$n" --json $w 2>/dev/null || true)
			c1=$(cpu)
			rps=$(sed -n 's/.*"rps":\([^,}]*\).*/\1/p' <<<"$out")
			p99=$(sed -n 's/.*"p99":\([^,}]*\).*/\1/p' <<<"$out")
			printf '| %s | %s | %.0f | %.1f | %.1f |\n' "$s" "$w" "${rps:-0}" "${p99:-0}" "$(awk -v c="$((c1 - c0))" -v n="$n" 'BEGIN { print c / n }')"
		done
		kill "$pid"
		wait "$pid" 2>/dev/null || true
		pid=""
	done
done
