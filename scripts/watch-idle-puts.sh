#!/usr/bin/env bash
# Put throughput (100 clients) without and with 10,000 idle watchers, in six
# alternating pairs of runs on one fresh single member, for kvd (bolt) and
# etcd v3.7.3; prints a markdown row per server with the median ratio.
#   ETCD_BIN=/path/to/etcd scripts/watch-idle-puts.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
# shellcheck source=scripts/single-member.sh
. "$root/scripts/single-member.sh" watch-idle

med() { printf '%s\n' "$@" | sort -n | awk '{a[NR]=$1} END {print (a[int((NR+1)/2)]+a[int((NR+2)/2)])/2}'; }
reqs() { bin/bench --endpoints 127.0.0.1:25379 --clients 100 --conns 10 --duration 4s --warmup 1s "$@" put 2>&1 | awk '/Requests\/sec/ {printf "%d", $2}'; }

run() {
	local name=$1
	shift
	start_member "$name" "$@"
	local none=() with=()
	for _ in 1 2 3 4 5 6; do
		none+=("$(reqs)")
		with+=("$(reqs --idle-watchers 10000)")
	done
	stop_member
	local mn mw
	mn=$(med "${none[@]}")
	mw=$(med "${with[@]}")
	echo "| $name | ${none[*]} (median $mn) | ${with[*]} (median $mw) | $(awk -v a="$mw" -v b="$mn" 'BEGIN {printf "%.2f", a/b}') |"
}

echo "| server | no watchers, req/s | 10,000 idle watchers, req/s | with / without (medians) |"
echo "| --- | --- | --- | ---: |"
run kvd-bolt bin/kvd --backend bolt
if [ -x "$etcd_bin" ]; then
	run etcd "$etcd_bin" --log-level warn
fi
