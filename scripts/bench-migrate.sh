#!/usr/bin/env bash
# How long `kvd migrate` takes to move a member's data between engines
# (issue #15), next to a plain copy of the same data dir and to rebuilding a
# member from a snapshot (`kvd snapshot restore`, etcdutl's restore). A
# fresh single kvd member on bolt is filled with about BENCH_MIGRATE_MB MiB
# of 1 KiB values (tools/bench), snapshotted with etcdctl and stopped; then
# each operation is timed on its data dir, bolt -> badger -> bolt. Prints a
# markdown table on stdout; progress goes to stderr. See docs/data.md.
#
# The data is in the page cache (it was just written): the times are those
# of a warm cache, the same for every row.
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-migrate.sh [options]

  -s, --size MB     fill the member to about MB MiB of values (default 1024;
                    env BENCH_MIGRATE_MB)
      --port P      client port P, peer port P+1 (default 23990; env BENCH_PORT)
  -o, --out FILE    also write the table to FILE
  -h, --help

Binaries: kvd is built from ./cmd/kvd into a temporary directory unless
KVD_BIN names one; etcdctl is bin/etcdctl unless ETCDCTL_BIN names another.
At 1024 MiB it takes about five minutes on two cores, most of it the fill.
EOF
}

size_mb=${BENCH_MIGRATE_MB:-1024}
port=${BENCH_PORT:-23990}
out=""
while [ $# -gt 0 ]; do
	case $1 in
	-s | --size) size_mb=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	-o | --out) out=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench-migrate.sh: unknown option $1" >&2; usage >&2; exit 1 ;;
	esac
done
for v in size_mb port; do
	case ${!v} in
	'' | *[!0-9]* | 0) echo "bench-migrate.sh: $v must be a positive integer, got '${!v}'" >&2; exit 1 ;;
	esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
work=$(mktemp -d "${TMPDIR:-/tmp}/kvd-bench-migrate.XXXXXX")
server_pid=""
endpoint=http://127.0.0.1:$port
peer=http://127.0.0.1:$((port + 1))

log() { printf 'bench-migrate.sh: %s\n' "$*" >&2; }

stop_server() {
	[ -n "$server_pid" ] || return 0
	kill "$server_pid" 2>/dev/null || true
	for _ in $(seq 300); do
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	server_pid=""
}

cleanup() {
	stop_server
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

log "building the load tool"
go build -o "$work/bench" ./tools/bench
bench=$work/bench
kvd=${KVD_BIN:-}
if [ -z "$kvd" ]; then
	log "building kvd"
	go build -o "$work/kvd" ./cmd/kvd
	kvd=$work/kvd
fi
etcdctl=${ETCDCTL_BIN:-$root/bin/etcdctl}
[ -x "$etcdctl" ] || { echo "bench-migrate.sh: no etcdctl at $etcdctl (set ETCDCTL_BIN)" >&2; exit 1; }

data=$work/data
"$kvd" --name b --data-dir "$data" --backend bolt --quota-backend-bytes $((16 << 30)) \
	--listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
	--listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" --initial-cluster "b=$peer" \
	>"$work/kvd.log" 2>&1 &
server_pid=$!
for _ in $(seq 60); do
	if "$bench" --endpoints "$endpoint" --clients 1 --conns 1 --total 1 --dial-timeout 1s \
		--request-timeout 1s range --key bench/ready --consistency l >/dev/null 2>&1; then
		break
	fi
	kill -0 "$server_pid" 2>/dev/null || { log "kvd did not start: $(tail -3 "$work/kvd.log")"; exit 1; }
	sleep 0.5
done
keys=$((size_mb * 1024))
log "filling $keys keys of 1 KiB"
"$bench" --endpoints "$endpoint" --clients 64 --conns 8 --total "$keys" --request-timeout 60s --json \
	put --key-size 8 --val-size 1024 --key-space-size "$keys" --sequential-keys --key-prefix fill/ >/dev/null
log "taking a snapshot with etcdctl"
"$etcdctl" --endpoints "$endpoint" --command-timeout 600s snapshot save "$work/snap.db" >/dev/null 2>&1
stop_server
sync

# timed NAME CMD...: runs CMD, appends its wall time in seconds to times.
declare -A secs
timed() {
	local name=$1 t0 t1
	shift
	t0=$(date +%s.%N)
	"$@"
	t1=$(date +%s.%N)
	secs[$name]=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	log "$name: ${secs[$name]} s"
}

du_mb() { du -sm "$1" | cut -f1; }

copy_dir() { cp -a "$data" "$work/data.cp" && sync; }
timed "cp -a data dir + sync" copy_dir
rm -rf "$work/data.cp"

migrate() { "$kvd" migrate --data-dir "$data" --to "$1" >"$work/migrate-$1.out" 2>"$work/migrate-$1.err"; }
bolt_mb=$(du_mb "$data/member/snap/bolt")
timed "kvd migrate --to badger" migrate badger
badger_mb=$(du_mb "$data/member/snap/badger")
cat "$work/migrate-badger.out" >&2
timed "kvd migrate --to bolt" migrate bolt
cat "$work/migrate-bolt.out" >&2

restore() {
	"$kvd" snapshot restore "$work/snap.db" --data-dir "$work/restored-$1" --backend "$1" >/dev/null 2>&1
}
timed "kvd snapshot restore --backend badger" restore badger
timed "kvd snapshot restore --backend bolt" restore bolt

{
	echo "| operation ($size_mb MiB of 1 KiB values; bolt $bolt_mb MiB, badger $badger_mb MiB on disk) | seconds |"
	echo "|---|---|"
	for name in "cp -a data dir + sync" "kvd migrate --to badger" "kvd migrate --to bolt" \
		"kvd snapshot restore --backend badger" "kvd snapshot restore --backend bolt"; do
		echo "| $name | ${secs[$name]} |"
	done
} | tee ${out:+"$out"}
