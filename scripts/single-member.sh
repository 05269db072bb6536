# Sourced by the single-member watch scripts: start one fresh member (kvd or
# etcd, same flags) on 127.0.0.1:25379 and wait for /health; stop it.
# Needs $work (a scratch directory); sets $pid.

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
