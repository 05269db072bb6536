# Sourced by the single-member watch scripts, from the repo root: builds
# bin/kvd and bin/bench, sets $etcd_bin (ETCD_BIN or bin/etcd) and $work (a
# scratch directory removed on exit, named after $1), and gives
# start_member/stop_member: one fresh member (kvd or etcd, same flags) on
# 127.0.0.1:25379, waited for on /health; $pid is the running one.

mkdir -p bin
go build -o bin/kvd ./cmd/kvd
go build -o bin/bench ./tools/bench
etcd_bin=${ETCD_BIN:-bin/etcd}
work=$(mktemp -d "${TMPDIR:-/tmp}/kvd-$1.XXXXXX")
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

start_member() { # NAME BINARY [ARGS...]
	local name=$1
	shift
	"$@" --data-dir "$work/$name" --listen-client-urls http://127.0.0.1:25379 --advertise-client-urls http://127.0.0.1:25379 \
		--listen-peer-urls http://127.0.0.1:25380 --initial-advertise-peer-urls http://127.0.0.1:25380 \
		--initial-cluster default=http://127.0.0.1:25380 >"$work/$name.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		curl -sf http://127.0.0.1:25379/health >/dev/null 2>&1 && return 0
		sleep 0.1
	done
	echo "$name did not become healthy; log: $(tail -1 "$work/$name.log")" >&2
	return 1
}

stop_member() {
	kill "$pid"
	wait "$pid" 2>/dev/null || true
	pid=""
}
