#!/usr/bin/env bash
# Memory per idle watcher: the server's peak RSS while tools/bench holds N
# idle watchers (and one client puts), minus its RSS before, divided by N; for
# kvd (bolt), kvd (badger) and etcd v3.7.3, each a fresh single member on
# loopback.
#   scripts/watch-mem.sh            N=100000 by default (env N)
# Binaries: bin/kvd and bin/bench are built; etcd is ETCD_BIN or bin/etcd
# (build it with: cd e2e && go build -o ../bin/etcd ./cmd/etcd).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
N=${N:-100000}
# shellcheck source=scripts/single-member.sh
. "$root/scripts/single-member.sh" watch-mem

rss() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

run() {
	local name=$1
	shift
	start_member "$name" "$@"
	local base peak r
	base=$(rss "$pid")
	bin/bench --endpoints 127.0.0.1:25379 --clients 1 --conns 1 --duration 12s --idle-watchers "$N" put >"$work/$name.bench" 2>&1 &
	local bp=$!
	peak=$base
	while kill -0 "$bp" 2>/dev/null; do
		r=$(rss "$pid")
		[ "$r" -gt "$peak" ] && peak=$r
		sleep 0.5
	done
	wait "$bp"
	printf '| %s | %d | %d | %d |\n' "$name" "$base" "$peak" $(((peak - base) * 1024 / N))
	stop_member
}

echo "| server | RSS before, kB | peak RSS with $N idle watchers, kB | bytes per watcher |"
echo "| --- | ---: | ---: | ---: |"
run kvd-bolt bin/kvd --backend bolt
run kvd-badger bin/kvd --backend badger
if [ -x "$etcd_bin" ]; then
	run etcd "$etcd_bin" --log-level warn
else
	echo "| etcd | no binary at $etcd_bin | | |"
fi
