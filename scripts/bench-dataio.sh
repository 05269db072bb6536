#!/usr/bin/env bash
# Times of data in and out on one data set: etcdutl snapshot restore, kvd
# snapshot restore (bolt, Badger), kvd migrate both ways and a plain copy of
# the data dir, interleaved over rounds (docs/data.md, docs/benchmarks.md).
#
#   scripts/bench-dataio.sh SNAPSHOT DATA_DIR [ROUNDS]
#
# SNAPSHOT is an etcdctl snapshot save file (e.g. of an etcd filled with
# tools/bench put --val-size 1024 --key-space-size 1000000 --sequential-keys);
# DATA_DIR a stopped kvd member's data dir (e.g. kvd snapshot restore of it),
# migrated back and forth. Needs etcdutl v3.7.3 on PATH or in ETCDUTL.
set -euo pipefail
snap=${1:?usage: $0 SNAPSHOT DATA_DIR [ROUNDS]}
data=${2:?usage: $0 SNAPSHOT DATA_DIR [ROUNDS]}
rounds=${3:-3}
etcdutl=${ETCDUTL:-etcdutl}
root=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
(cd "$root" && go build -o "$tmp/kvd" ./cmd/kvd)
kvd=$tmp/kvd
r=(--name n1 --initial-cluster n1=http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380)
# secs CMD...: the seconds CMD took, or "failed (exit N)" if it failed.
secs() {
	local s e rc=0
	s=$(date +%s.%N)
	"$@" >/dev/null 2>&1 || rc=$?
	e=$(date +%s.%N)
	if [ "$rc" -ne 0 ]; then
		echo "failed (exit $rc)"
		return
	fi
	echo "$e - $s" | bc
}
for i in $(seq "$rounds"); do
	rm -rf "$tmp"/o1 "$tmp"/o2 "$tmp"/o3 "$tmp"/copy
	echo "round $i:" \
		"etcdutl $(secs "$etcdutl" snapshot restore "$snap" --data-dir "$tmp/o1" "${r[@]}")" \
		"kvd-bolt $(secs "$kvd" snapshot restore "$snap" --data-dir "$tmp/o2" "${r[@]}")" \
		"kvd-badger $(secs "$kvd" snapshot restore "$snap" --data-dir "$tmp/o3" "${r[@]}" --backend badger)" \
		"migrate-to-bolt $(secs "$kvd" migrate --data-dir "$data" --to bolt)" \
		"migrate-to-badger $(secs "$kvd" migrate --data-dir "$data" --to badger)" \
		"cp+sync $(secs sh -c "cp -a '$data' '$tmp/copy' && sync")"
done
