#!/usr/bin/env bash
# Server CPU per request, kvd beside etcd v3.7.3: the servers (kvd on bolt,
# kvd on Badger, etcd) serve the same fixed number of requests from
# tools/bench, and each one's user+system CPU time (from /proc) is divided by
# them. Unlike req/s on a shared 2-core machine, CPU per request barely moves
# with the load from other processes.
#
#   scripts/bench-cpu.sh [rounds]     (default 2; N=requests, default 30000)
#
# Every round starts every server afresh, on its own ports, and measures each
# workload on all of them back to back, in an order rotated every round: the
# figures compared are seconds apart, not minutes, because this VM's speed
# drifts by tens of percent over minutes for every process alike. Idle
# servers wait meanwhile (their CPU is not counted). After the rows a
# summary gives, per server and workload, the medians over the rounds and
# the median of each round's ratio to etcd.
#
# SERVERS picks the servers (default "kvd-bolt kvd-badger etcd"); an entry
# SERVER@BIN runs that server from the binary BIN, so two kvd builds can be
# compared in the same run: SERVERS="kvd-bolt kvd-bolt@/tmp/kvd-new" (the
# ratios are then to the first server). WORKLOADS (default put,
# serializable and linearizable range, txn; ";" between workloads) picks the
# tool commands.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/stats.sh
. scripts/lib/stats.sh
rounds=${1:-2}
n=${N:-30000}
mkdir -p bin
go build -o bin/bench ./tools/bench
go build -o bin/kvd ./cmd/kvd
[ -x bin/etcd ] || (cd e2e && go build -o ../bin/etcd ./cmd/etcd)
work=$(mktemp -d)
read -ra servers <<<"${SERVERS:-kvd-bolt kvd-badger etcd}"
declare -A pid=() url=()
stop_all() {
	local s
	for s in "${!pid[@]}"; do
		kill "${pid[$s]}" 2>/dev/null || true
		wait "${pid[$s]}" 2>/dev/null || true
	done
	pid=()
}
trap 'stop_all; rm -rf "$work"' EXIT
hz=$(getconf CLK_TCK)

start() { # server[@bin] index
	local bin=bin/kvd extra=() port=$((24790 + 10 * $2)) d=$work/$2
	case $1 in *@*) bin=${1#*@} ;; esac
	case ${1%%@*} in
	kvd-bolt) extra=(--backend bolt) ;;
	kvd-badger) extra=(--backend badger) ;;
	etcd) [[ $1 == *@* ]] || bin=bin/etcd ;;
	esac
	rm -rf "$d"
	mkdir -p "$d"
	url[$1]=http://127.0.0.1:$port
	local peer=http://127.0.0.1:$((port + 1))
	"$bin" --name b --data-dir "$d/data" --listen-client-urls "${url[$1]}" --advertise-client-urls "${url[$1]}" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "b=$peer" \
		"${extra[@]}" >"$d/log" 2>&1 &
	pid[$1]=$!
	for _ in $(seq 100); do
		bin/bench --endpoints "${url[$1]}" --clients 1 --conns 1 --total 1 range --key ready --consistency l >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "$1 did not start: $(tail -1 "$d/log")" >&2
	kill "${pid[$1]}" 2>/dev/null || true
	unset "pid[$1]"
	return 1
}

cpu() { awk -v hz="$hz" '{ printf "%d", ($14 + $15) * 1000000 / hz }' "/proc/$1/stat"; } # µs

# The ranges read one key that exists (put by the tool first, 256 bytes), so
# the engine's read is in the cost.
IFS=';' read -ra wls <<<"${WORKLOADS:-put;range --key k --preload 1 --consistency s;range --key k --preload 1 --consistency l;txn}"

# res[server|workload|field] holds the rounds' values, space-separated.
declare -A res=()
echo "| round | server | workload | req/s | p99 ms | server CPU µs/request |"
echo "| ---: | --- | --- | ---: | ---: | ---: |"
for ((r = 0; r < rounds; r++)); do
	# Rotate the order, so no server is always measured first.
	order=()
	for i in "${!servers[@]}"; do
		order+=("${servers[$(((i + r) % ${#servers[@]}))]}")
	done
	for i in "${!order[@]}"; do
		start "${order[$i]}" "$i" || true
	done
	for w in "${wls[@]}"; do
		for s in "${order[@]}"; do
			[ -n "${pid[$s]:-}" ] || continue
			# shellcheck disable=SC2086
			bin/bench --endpoints "${url[$s]}" --total 5000 $w >/dev/null 2>&1 || true # warm up
			c0=$(cpu "${pid[$s]}")
			# shellcheck disable=SC2086
			out=$(bin/bench --endpoints "${url[$s]}" --total "$n" --json $w 2>/dev/null || true)
			c1=$(cpu "${pid[$s]}")
			rps=$(sed -n 's/.*"rps":\([^,}]*\).*/\1/p' <<<"$out")
			p99=$(sed -n 's/.*"p99":\([^,}]*\).*/\1/p' <<<"$out")
			us=$(awk -v c="$((c1 - c0))" -v n="$n" 'BEGIN { printf "%.1f", c / n }')
			printf '| %d | %s | %s | %.0f | %.1f | %s |\n' "$((r + 1))" "$s" "$w" "${rps:-0}" "${p99:-0}" "$us"
			res[$s|$w|rps]+=" ${rps:-}"
			res[$s|$w|p99]+=" ${p99:-}"
			res[$s|$w|us]+=" $us"
		done
	done
	stop_all
done

# Per-round ratios to the reference (etcd when it ran, else the first
# server), then their medians.
ref=${servers[0]}
for s in "${servers[@]}"; do [ "${s%%@*}" = etcd ] && ref=$s; done
roundratio() { # server workload field
	local a b out="" i
	read -ra a <<<"${res[$1|$2|$3]:-}"
	read -ra b <<<"${res[$ref|$2|$3]:-}"
	for i in "${!a[@]}"; do
		[ -n "${b[$i]:-}" ] && out+=" $(ratio "${a[$i]}" "${b[$i]}")"
	done
	out=$(median "$out")
	[ -n "$out" ] && printf '%.2f' "$out"
}
echo
echo "Medians of $rounds rounds; ratios are medians of each round's ratio to $ref."
echo
echo "| server | workload | req/s | p99 ms | CPU µs/request (spread) | CPU / $ref | req/s / $ref | p99 / $ref |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for w in "${wls[@]}"; do
	for s in "${servers[@]}"; do
		[ -n "${res[$s|$w|us]:-}" ] || continue
		cpu_r=- rps_r=- p99_r=-
		if [ "$s" != "$ref" ]; then
			cpu_r=$(roundratio "$s" "$w" us) rps_r=$(roundratio "$s" "$w" rps) p99_r=$(roundratio "$s" "$w" p99)
		fi
		printf '| %s | %s | %.0f | %.1f | %.1f%s | %s | %s | %s |\n' "$s" "$w" \
			"$(median "${res[$s|$w|rps]}")" "$(median "${res[$s|$w|p99]}")" \
			"$(median "${res[$s|$w|us]}")" "$(spread "${res[$s|$w|us]}")" "${cpu_r:-n/a}" "${rps_r:-n/a}" "${p99_r:-n/a}"
	done
done
