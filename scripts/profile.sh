#!/usr/bin/env bash
# Where the CPU goes per request: kvd on bolt, kvd on Badger and etcd v3.7.3,
# each a fresh single member on loopback with --enable-pprof, one at a time,
# under bench.sh's workloads (put, 1-key range serializable and
# linearizable; 100 clients over 10 connections). While tools/bench runs, it
# takes a CPU profile and a delta allocation profile of the server over the
# same window and counts the requests the server handled in it (the
# grpc_server_handled_total counter of /metrics, before and after), the
# server's CPU time (/proc/PID/stat) and its mallocs and allocated bytes
# (runtime.MemStats from /debug/pprof/heap?debug=1).
#
#   scripts/profile.sh [OUTDIR]     (default /tmp/kvd-profile-<date>)
#
# Env: SECONDS_PROFILE (20), SERVERS ("kvd-bolt kvd-badger etcd"),
# WORKLOADS ("put range-s range-l"; also txn), PORT (24890), KVD_BIN (built from
# ./cmd/kvd into OUTDIR), ETCD_BIN (bin/etcd, built from e2e/cmd/etcd if
# missing). OUTDIR gets, per server and workload, <server>-<workload>.cpu.pb.gz
# and .allocs.pb.gz, the pprof -top tables (flat and -cum), the CPU charged
# to subsystems (scripts/lib/pprof-subsystems.py, <name>.subsystems.txt) and
# the tool's JSON; summary.tsv has one line per run. Read the profiles with
#   go tool pprof -top -cum OUTDIR/kvd-bolt-put.cpu.pb.gz
# See docs/benchmarks.md, "Where the CPU goes per request".
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-/tmp/kvd-profile-$(date -u +%Y%m%dT%H%M%S)}
secs=${SECONDS_PROFILE:-20}
servers=${SERVERS:-"kvd-bolt kvd-badger etcd"}
workloads=${WORKLOADS:-"put range-s range-l"}
port=${PORT:-24890}
mkdir -p "$out"
out=$(cd "$out" && pwd)
kvd=${KVD_BIN:-$out/kvd}
[ -n "${KVD_BIN:-}" ] || go build -o "$kvd" ./cmd/kvd
etcd=${ETCD_BIN:-bin/etcd}
[ -x "$etcd" ] || (cd e2e && go build -o ../bin/etcd ./cmd/etcd)
go build -o "$out/bench" ./tools/bench
bench=$out/bench
url=http://127.0.0.1:$port
peer=http://127.0.0.1:$((port + 1))
hz=$(getconf CLK_TCK)
work=$(mktemp -d)
pid=""
bpid=""
trap '[ -n "$bpid" ] && kill "$bpid" 2>/dev/null; [ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

{
	echo "# $(date -u +%FT%TZ) kvd $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo -dirty) $(go env GOVERSION)"
	echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-), load $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "# kvd binary $kvd: $("$kvd" --version 2>&1 | head -1); etcd binary $etcd: $("$etcd" --version 2>&1 | sed -n 's/^etcd Version: //p')"
} >"$out/README"

start() { # server
	local bin=$kvd extra=()
	case $1 in
	kvd-bolt) extra=(--backend bolt) ;;
	kvd-badger) extra=(--backend badger) ;;
	etcd) bin=$etcd ;;
	esac
	rm -rf "$work/data"
	"$bin" --name b --data-dir "$work/data" --listen-client-urls "$url" --advertise-client-urls "$url" \
		--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "b=$peer" \
		--enable-pprof "${extra[@]}" >"$out/$1.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		"$bench" --endpoints "$url" --clients 1 --conns 1 --total 1 range --key ready --consistency l >/dev/null 2>&1 && return 0
		sleep 0.2
	done
	echo "$1 did not start: $(tail -1 "$out/$1.log")" >&2
	return 1
}

cpu() { awk -v hz="$hz" '{ printf "%d", ($14 + $15) * 1000000 / hz }' "/proc/$pid/stat"; } # µs
handled() { # gRPC method: requests the server answered so far
	curl -s "$url/metrics" | awk -v m="$1" '/^grpc_server_handled_total\{/ && index($0, "grpc_method=\"" m "\"") { s += $NF } END { printf "%d", s }'
}
memstats() { # runtime.MemStats' Mallocs and TotalAlloc, on one line
	curl -s "$url/debug/pprof/heap?debug=1" | awk '/^# Mallocs = / { m = $NF } /^# TotalAlloc = / { b = $NF } END { print m, b }'
}

printf 'server\tworkload\trequests\tcpu_us_proc\tus_per_req\tmallocs_per_req\tbytes_per_req\ttool_rps\n' >"$out/summary.tsv"
for s in $servers; do
	start "$s" || continue
	for w in $workloads; do
		case $w in
		put) method=Put args=(put --key-size 8 --val-size 256 --key-space-size 10000) ;;
		range-s) method=Range args=(range --key bench/key --preload 1 --val-size 256 --consistency s) ;;
		range-l) method=Range args=(range --key bench/key --preload 1 --val-size 256 --consistency l) ;;
		txn) method=Txn args=(txn --key-size 8 --val-size 256 --key-space-size 10000) ;;
		*) echo "unknown workload $w" >&2; exit 1 ;;
		esac
		name=$s-$w
		echo "$name ..." >&2
		"$bench" --endpoints "$url" --clients 100 --conns 10 --warmup 3s --duration $((secs + 12))s --json "${args[@]}" \
			>"$out/$name.bench.json" 2>"$out/$name.bench.err" &
		bpid=$!
		sleep 6 # preload and warm-up done, load running
		read -r m0 b0 < <(memstats)
		r0=$(handled $method) c0=$(cpu)
		curl -s -o "$out/$name.allocs.pb.gz" "$url/debug/pprof/allocs?seconds=$secs" &
		apid=$!
		curl -s -o "$out/$name.cpu.pb.gz" "$url/debug/pprof/profile?seconds=$secs"
		c1=$(cpu) r1=$(handled $method)
		read -r m1 b1 < <(memstats)
		wait "$apid" || true
		kill -0 "$bpid" 2>/dev/null || echo "warning: $name: the load ended before the profile did" >&2
		wait "$bpid" || echo "warning: $name: tool exit $? ($(tail -1 "$out/$name.bench.err"))" >&2
		bpid=""
		n=$((r1 - r0))
		rps=$(sed -n 's/.*"rps":\([^,}]*\).*/\1/p' "$out/$name.bench.json")
		awk -v s="$s" -v w="$w" -v n=$n -v c=$((c1 - c0)) -v m=$((m1 - m0)) -v b=$((b1 - b0)) -v rps="${rps:-0}" \
			'BEGIN { d = n > 0 ? n : 1; printf "%s\t%s\t%d\t%d\t%.1f\t%.1f\t%.0f\t%.0f\n", s, w, n, c, c / d, m / d, b / d, rps }' >>"$out/summary.tsv"
		go tool pprof -top "$out/$name.cpu.pb.gz" >"$out/$name.cpu.top.txt" 2>/dev/null
		go tool pprof -top -cum "$out/$name.cpu.pb.gz" >"$out/$name.cpu.cum.txt" 2>/dev/null
		go tool pprof -top -cum -sample_index=alloc_space "$out/$name.allocs.pb.gz" >"$out/$name.allocs.space.txt" 2>/dev/null
		go tool pprof -top -cum -sample_index=alloc_objects "$out/$name.allocs.pb.gz" >"$out/$name.allocs.objects.txt" 2>/dev/null
		go tool pprof -traces "$out/$name.cpu.pb.gz" 2>/dev/null | python3 scripts/lib/pprof-subsystems.py "$n" --other 20 --detail 12 >"$out/$name.subsystems.txt"
	done
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
done
column -t "$out/summary.tsv"
echo "profiles in $out; tables: scripts/lib/profile-tables.py $out [more runs...]" >&2
