#!/usr/bin/env bash
# Watch event latency (issue #17's watch p99 target): kvd (bolt), kvd (badger)
# and etcd v3.7.3, each a fresh single member on loopback per run, driven by
# `bin/bench watch`: W watchers over 10 streams, each on its own key, then
# PUTS puts on the watched keys at 1,000 a second; the latency of an event is
# from its put's send to its receipt; the puts' own latency (send to answer)
# is shown beside it, the part of an event's latency that is the write's.
#   scripts/watch-latency.sh          ROUNDS=3 PUTS=20000 WATCHERS="1000 100000"
# The p99 of 2,000 events (the 20th-worst) moved 2-5x between runs of one
# server, so the default takes 20,000 events per run and the median over
# ROUNDS rounds, the servers in rotated order. A run that misses or
# duplicates an event fails the script. Prints per-run figures and a markdown
# table of medians and ratios to etcd on stdout.
# Binaries: bin/kvd and bin/bench are built; etcd is ETCD_BIN or bin/etcd
# (build it with: cd e2e && go build -o ../bin/etcd ./cmd/etcd).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
ROUNDS=${ROUNDS:-3}
PUTS=${PUTS:-20000}
WATCHERS=${WATCHERS:-"1000 100000"}
# shellcheck source=scripts/single-member.sh
. "$root/scripts/single-member.sh" watch-latency
if [ ! -x "$etcd_bin" ]; then
	echo "no etcd binary at $etcd_bin" >&2
	exit 1
fi

servers=(kvd-bolt kvd-badger etcd)
results=$work/results.jsonl

run() { # SERVER WATCHERS ROUND
	local name=$1 n=$2 round=$3
	case $name in
	kvd-bolt) start_member "$name" bin/kvd --backend bolt ;;
	kvd-badger) start_member "$name" bin/kvd --backend badger ;;
	etcd) start_member "$name" "$etcd_bin" --log-level warn ;;
	esac
	local out
	out=$(bin/bench --endpoints 127.0.0.1:25379 --conns 10 --json watch --watchers "$n" --streams 10 \
		--puts "$PUTS" --put-rate 1000 --timeout 5m)
	stop_member
	printf '{"server":"%s","watchers":%d,"round":%d,"result":%s}\n' "$name" "$n" "$round" "$out" >>"$results"
	python3 - "$name" "$n" "$round" "$out" <<'EOF'
import json, sys
name, n, rnd, r = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
bad = r["events"] != r["events_expected"] or r["duplicates"] or r["foreign"] or r["put_errors"]
print(f"round {rnd} {name} {n} watchers: p50 {r['latency_ms']['p50']:.2f} p99 {r['latency_ms']['p99']:.2f} "
      f"p99.9 {r['latency_ms']['p99_9']:.2f} ms (the puts' own p50 {r['put_latency_ms']['p50']:.2f} "
      f"p99 {r['put_latency_ms']['p99']:.2f} ms), create {r['create_sec']:.2f} s, "
      f"events {r['events']}/{r['events_expected']}, duplicates {r['duplicates']}", file=sys.stderr)
sys.exit(1 if bad else 0)
EOF
}

for round in $(seq "$ROUNDS"); do
	for n in $WATCHERS; do
		for i in 0 1 2; do
			run "${servers[$(((i + round - 1) % 3))]}" "$n" "$round"
		done
	done
done

python3 - "$results" "$ROUNDS" "$PUTS" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"Watch event latency, {sys.argv[3]} puts at 1,000/s per run, medians of {sys.argv[2]} rounds (min-max in brackets).\n")
print("| watchers | server | p50 ms | p99 ms | p99.9 ms | put p50 ms | put p99 ms | create s | p99 / etcd's |")
print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
by = {}
for r in rows:
    by.setdefault((r["watchers"], r["server"]), []).append(r["result"])
for n in sorted({k[0] for k in by}):
    etcd99 = statistics.median(x["latency_ms"]["p99"] for x in by[(n, "etcd")])
    for s in ("kvd-bolt", "kvd-badger", "etcd"):
        rs = by.get((n, s))
        if not rs:
            continue
        def med(f): return statistics.median(f(x) for x in rs)
        p99s = [x["latency_ms"]["p99"] for x in rs]
        p99 = statistics.median(p99s)
        print(f"| {n:,} | {s} | {med(lambda x: x['latency_ms']['p50']):.2f} | {p99:.2f} ({min(p99s):.2f}-{max(p99s):.2f}) "
              f"| {med(lambda x: x['latency_ms']['p99_9']):.2f} | {med(lambda x: x['put_latency_ms']['p50']):.2f} "
              f"| {med(lambda x: x['put_latency_ms']['p99']):.2f} | {med(lambda x: x['create_sec']):.2f} | {p99 / etcd99:.2f} |")
EOF
