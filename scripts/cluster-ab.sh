#!/usr/bin/env bash
# Interleaved A/B of kvd builds or engines on a fresh 3-member cluster per
# run: each round starts every variant in turn, runs one put workload with
# tools/bench and prints req/s, p50, p99 and the three members' CPU per 1,000
# requests (user+system from /proc); means per variant at the end. Between
# runs it syncs and waits, so one run's writeback does not land on the next.
#
#   scripts/cluster-ab.sh [-r ROUNDS] [-c CLIENTS] [-d DURATION] LABEL=BINARY:ENGINE...
#
# ENGINE is bolt or badger; BINARY a kvd binary (or an etcd binary with
# ENGINE etcd). One client goes through a follower, as in scripts/bench.sh;
# more clients are spread over the three members.
# Example: scripts/cluster-ab.sh -r 5 old=/tmp/kvd-old:badger new=bin/kvd:badger
set -euo pipefail

rounds=3 clients=1 duration=5s port=24700
while getopts "r:c:d:p:" o; do
	case $o in
	r) rounds=$OPTARG ;;
	c) clients=$OPTARG ;;
	d) duration=$OPTARG ;;
	p) port=$OPTARG ;;
	*) sed -n 2,13p "$0" >&2; exit 1 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -ge 1 ] || { sed -n 2,13p "$0" >&2; exit 1; }

root=$(cd "$(dirname "$0")/.." && pwd)
bench=$root/bin/bench
(cd "$root" && go build -o "$bench" ./tools/bench)
work=$(mktemp -d)
pids=()
stop() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	pids=()
}
trap 'stop; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT

cpu_ticks() { # summed utime+stime of $pids, in clock ticks
	local t=0 p
	for p in "${pids[@]}"; do t=$((t + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done
	echo "$t"
}

# run LABEL BINARY ENGINE: one fresh cluster, one measured workload.
run() {
	local label=$1 bin=$2 engine=$3 i ic="" eps="" lead="" fol
	for i in 1 2 3; do ic+="${ic:+,}m$i=http://127.0.0.1:$((port + 10 * i + 1))"; done
	for i in 1 2 3; do
		local extra=()
		[ "$engine" != etcd ] && extra=(--backend "$engine")
		"$bin" --name "m$i" --data-dir "$work/$label.m$i" \
			--listen-client-urls "http://127.0.0.1:$((port + 10 * i))" --advertise-client-urls "http://127.0.0.1:$((port + 10 * i))" \
			--listen-peer-urls "http://127.0.0.1:$((port + 10 * i + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((port + 10 * i + 1))" \
			--initial-cluster "$ic" --initial-cluster-state new --initial-cluster-token "ab-$label" \
			"${extra[@]}" >"$work/$label.m$i.log" 2>&1 &
		pids+=($!)
		eps+="${eps:+,}http://127.0.0.1:$((port + 10 * i))"
	done
	for _ in $(seq 60); do
		lead=$(for i in 1 2 3; do curl -s "http://127.0.0.1:$((port + 10 * i))/metrics" | grep '^etcd_server_is_leader 1' >/dev/null && echo "$i"; done || true)
		[ -n "$lead" ] && "$bench" --endpoints "$eps" --clients 1 --conns 3 --total 3 --request-timeout 1s range --key ab >/dev/null 2>&1 && break
		sleep 0.5
	done
	for i in 0 1 2; do
		kill -0 "${pids[i]}" 2>/dev/null || lead=""
	done
	[ -n "$lead" ] || { echo "$label: no leader or a member exited; see $work/$label.m*.log (KEEP=1 keeps them)" >&2; stop; return 1; }
	fol=$((lead % 3 + 1))
	[ "$clients" -eq 1 ] && eps="http://127.0.0.1:$((port + 10 * fol))"
	local c0 c1 out
	c0=$(cpu_ticks)
	out=$("$bench" --json --endpoints "$eps" --clients "$clients" --conns $((clients < 12 ? clients : 12)) --warmup 1s --duration "$duration" put)
	c1=$(cpu_ticks)
	stop
	rm -rf "$work/$label".m?
	python3 -c '
import json, os, sys
r = json.loads(sys.argv[1]); ticks = int(sys.argv[3]); hz = os.sysconf("SC_CLK_TCK")
cpu = ticks / hz * 1e6 / max(r["requests"], 1)
lat = r["latency_ms"]
print("%s\t%.0f\t%.2f\t%.2f\t%.0f" % (sys.argv[2], r["rps"], lat["p50"], lat["p99"], cpu))
' "$out" "$label" $((c1 - c0))
}

results=$work/results.tsv
echo -e "variant\treq/s\tp50 ms\tp99 ms\tCPU ms per 1,000 req" >&2
for ((r = 1; r <= rounds; r++)); do
	for spec in "$@"; do
		label=${spec%%=*} rest=${spec#*=}
		sync
		sleep 2
		run "$label" "${rest%:*}" "${rest##*:}" >>"$results"
		tail -n 1 "$results"
	done
done
echo "means over $rounds rounds, $clients client(s), $duration each:"
awk -F'\t' '{n[$1]++; q[$1]+=$2; p[$1]+=$4; c[$1]+=$5} END {for (k in n) printf "%s\t%.0f req/s\tp99 %.2f ms\tCPU %.0f\n", k, q[k]/n[k], p[k]/n[k], c[k]/n[k]}' "$results" | sort
