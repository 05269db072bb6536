#!/usr/bin/env bash
# Data-size series (issue #17): kvd (bolt), kvd (badger) and etcd v3.7.3, for
# each size a fresh single member on loopback filled with 1 KiB values to the
# size, then per server and size:
#
#   - put p99 and 1-key linearizable range p99 under a fixed load: a fixed
#     number of closed-loop clients (--clients, default 16, over 4
#     connections; tools/bench has no fixed-rate mode for put and range), for
#     --duration after --warmup. The puts overwrite random keys of the filled
#     key space (1 KiB values); the range reads one filled key.
#   - RSS: VmRSS of /proc/PID/status right after the load, and its parts
#     RssAnon (heap, stacks: memory the process owns) and RssFile (mapped
#     files' pages: page cache the kernel can drop, as Badger's SSTs and
#     bolt's file).
#   - db size: dbSize of etcdctl endpoint status, after the fill and after
#     the load.
#   - restart time: SIGTERM, wait for the exit, start again on the same data
#     dir; seconds from the start until a linearizable 1-key range succeeds.
#   - catch-up time: `etcdctl member add` of a second member, started with an
#     empty data dir and --initial-cluster-state existing; seconds from its
#     start until its revision (endpoint status) reaches the leader's.
#
# Sizes are interleaved: for each size, every server in turn (rotated per
# round). A step that fails is "failed" for that server and size; the run
# goes on. Prints a markdown table on stdout; progress on stderr; --json
# writes schema kvd-bench-scale/1 (tools/benchplot -in FILE draws it as
# line charts, picked by the schema; make plots does docs/bench/scale.json).
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-scale.sh [options]

      --sizes LIST     data sizes, each N followed by M or G (MiB, GiB of
                       1 KiB values) (default "100M 1G 4G 8G"; 16G and more is
                       run for kvd-badger only; env BENCH_SIZES)
  -s, --servers LIST   servers (default "kvd-bolt kvd-badger etcd"; env BENCH_SERVERS)
  -r, --rounds N       fill and measure every server and size N times, servers
                       in rotated order, and report medians (default 1;
                       env BENCH_ROUNDS)
  -c, --clients N      closed-loop clients of the put and range load
                       (default 16; env BENCH_CLIENTS)
  -d, --duration D     measure each load for D (default 10s; env BENCH_DURATION)
  -w, --warmup D       unrecorded warm-up before each load (default 2s)
      --fill-clients N clients of the fill (default 64)
      --port P         member 1 client port P, peer P+1; the added member
                       P+10 and P+11 (default 24790; env BENCH_PORT)
      --step-timeout S seconds a fill, restart or catch-up may take before
                       it counts as failed (default 1800)
  -o, --out FILE       also write the table to FILE
      --json FILE      also write the results as JSON (schema
                       "kvd-bench-scale/1") to FILE
      --keep-logs DIR  copy the server logs to DIR
      --diag DIR       for each put and range load, write to DIR what the
                       member did in its window: /proc/PID/io, the
                       machine's /proc/stat and /proc/diskstats and the
                       server's /metrics before and after, and for kvd a
                       CPU profile of the window (kvd runs with
                       --enable-pprof, --log-level debug, which logs
                       Badger's flushes, compactions and stalls, and
                       GODEBUG=gctrace=1, a line per collection: use
                       --keep-logs too)
  -h, --help

Binaries: kvd is built from ./cmd/kvd and etcd from e2e/cmd/etcd into bin/,
unless KVD_BIN or ETCD_BIN name one; etcdctl is bin/etcdctl unless ETCDCTL_BIN.
The quota (--quota-backend-bytes) is twice the size plus 1 GiB for every
server. On two shared cores the fill runs at roughly 5,000-10,000 puts/s:
about 2-4 minutes per GiB and server.
EOF
}

sizes=${BENCH_SIZES:-"100M 1G 4G 8G"}
servers=${BENCH_SERVERS:-"kvd-bolt kvd-badger etcd"}
rounds=${BENCH_ROUNDS:-1}
clients=${BENCH_CLIENTS:-16}
duration=${BENCH_DURATION:-10s}
warmup=2s
fill_clients=64
conns=4
port=${BENCH_PORT:-24790}
step_timeout=1800
out=""
json_out=""
keep_logs=""
diag=""

while [ $# -gt 0 ]; do
	case $1 in
	--sizes) sizes=$2; shift 2 ;;
	-s | --servers) servers=$2; shift 2 ;;
	-r | --rounds) rounds=$2; shift 2 ;;
	-c | --clients) clients=$2; shift 2 ;;
	-d | --duration) duration=$2; shift 2 ;;
	-w | --warmup) warmup=$2; shift 2 ;;
	--fill-clients) fill_clients=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	--step-timeout) step_timeout=$2; shift 2 ;;
	-o | --out) out=$2; shift 2 ;;
	--json) json_out=$2; shift 2 ;;
	--keep-logs) keep_logs=$2; shift 2 ;;
	--diag) diag=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench-scale.sh: unknown option $1" >&2; usage >&2; exit 1 ;;
	esac
done
for v in rounds clients fill_clients port step_timeout; do
	case ${!v} in
	'' | *[!0-9]* | 0) echo "bench-scale.sh: $v must be a positive integer, got '${!v}'" >&2; exit 1 ;;
	esac
done
if [ -n "$diag" ]; then
	[[ $duration =~ ^[0-9]+s$ && $warmup =~ ^[0-9]+s$ ]] ||
		{ echo "bench-scale.sh: --diag wants --duration and --warmup in whole seconds (e.g. 10s)" >&2; exit 1; }
	mkdir -p "$diag"
fi
read -ra server_list <<<"$servers"
read -ra size_list <<<"$sizes"
[ ${#server_list[@]} -gt 0 ] || { echo "bench-scale.sh: no servers" >&2; exit 1; }
[ ${#size_list[@]} -gt 0 ] || { echo "bench-scale.sh: no sizes" >&2; exit 1; }
for s in "${server_list[@]}"; do
	case $s in
	kvd-bolt | kvd-badger | etcd) ;;
	*) echo "bench-scale.sh: unknown server $s (want kvd-bolt, kvd-badger, etcd)" >&2; exit 1 ;;
	esac
done

# size_mib SIZE: the size in MiB ("100M" -> 100, "4G" -> 4096), or fail.
size_mib() {
	case $1 in
	[1-9]*M) [[ ${1%M} =~ ^[0-9]+$ ]] && echo "${1%M}" ;;
	[1-9]*G) [[ ${1%G} =~ ^[0-9]+$ ]] && echo $((${1%G} * 1024)) ;;
	*) return 1 ;;
	esac
}
for z in "${size_list[@]}"; do
	size_mib "$z" >/dev/null || { echo "bench-scale.sh: bad size '$z' (want e.g. 100M or 4G)" >&2; exit 1; }
done

# runs SERVER SIZE: whether SERVER runs at SIZE (16 GiB and up: kvd-badger only).
runs() { [ "$(size_mib "$2")" -lt $((16 * 1024)) ] || [ "$1" = kvd-badger ]; }

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. "$root/scripts/lib/stats.sh"
. "$root/scripts/lib/json.sh"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvd-bench-scale.XXXXXX")
pid1="" pid2=""
ep1=http://127.0.0.1:$port peer1=http://127.0.0.1:$((port + 1))
ep2=http://127.0.0.1:$((port + 10)) peer2=http://127.0.0.1:$((port + 11))

log() { printf 'bench-scale.sh: %s\n' "$*" >&2; }

# stop PID: SIGTERM, SIGKILL after 60s; waits for the exit.
stop() {
	[ -n "$1" ] || return 0
	kill "$1" 2>/dev/null || true
	for _ in $(seq 600); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$1" 2>/dev/null || true
	wait "$1" 2>/dev/null || true
}

stop_all() {
	stop "$pid2"
	pid2=""
	stop "$pid1"
	pid1=""
}

cleanup() {
	stop_all
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The commit the binaries were built from: others may commit during a long run.
commit=$(git rev-parse HEAD 2>/dev/null || echo "")
dirty=false kvd_bin=""
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && dirty=true
mkdir -p bin
log "building bin/bench"
go build -o bin/bench ./tools/bench
bench=$root/bin/bench
declare -A bin_of
if [[ " $servers " == *" kvd-"* ]]; then
	if [ -n "${KVD_BIN:-}" ]; then
		bin_of[kvd]=$KVD_BIN
		# Not this checkout's build: its commit says nothing about it.
		kvd_bin=$KVD_BIN commit="" dirty=false
	else
		log "building bin/kvd"
		go build -o bin/kvd ./cmd/kvd
		bin_of[kvd]=$root/bin/kvd
	fi
fi
if [[ " $servers " == *" etcd "* ]]; then
	if [ -n "${ETCD_BIN:-}" ]; then
		bin_of[etcd]=$ETCD_BIN
	else
		log "building bin/etcd (v3.7.3, from the e2e module)"
		(cd e2e && go build -o ../bin/etcd ./cmd/etcd)
		bin_of[etcd]=$root/bin/etcd
	fi
fi
etcdctl=${ETCDCTL_BIN:-$root/bin/etcdctl}
[ -x "$etcdctl" ] || { echo "bench-scale.sh: no etcdctl at $etcdctl (set ETCDCTL_BIN)" >&2; exit 1; }

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
for p in "$port" $((port + 1)) $((port + 10)) $((port + 11)); do
	if port_busy "$p"; then echo "bench-scale.sh: port $p already in use (--port)" >&2; exit 1; fi
done

# status_field ENDPOINT NAME: a number of etcdctl endpoint status -w json;
# nothing while the client port is closed. As in serving (below), the port
# is polled first and the dial then waits: a refused dial's one-second
# backoff would make the catch-up time up to a second late.
status_field() {
	port_busy "${1##*:}" || return 0
	"$etcdctl" --endpoints "$1" --dial-timeout 60s --command-timeout 2s endpoint status -w json 2>/dev/null |
		sed -n "s/.*\"$2\":\([0-9]*\).*/\1/p" || true
}

# serving ENDPOINT: a linearizable 1-key range succeeds. The client port is
# polled first: a dial refused backs off for a second (gRPC's reconnect
# backoff), which made restart times up to a second late. etcd listens
# before it serves; the long dial then waits on the accepted connection.
serving() {
	port_busy "${1##*:}" || return 1
	"$bench" --endpoints "$1" --clients 1 --conns 1 --total 1 --dial-timeout 60s \
		--request-timeout 60s range --key bench/ready --consistency l >/dev/null 2>&1
}

# now: seconds since the epoch, with nanoseconds.
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }

# launch SERVER NAME DATA CLIENT PEER CLUSTER STATE LOG: start one member in
# the background; its pid in $launched.
launch() {
	local s=$1 bin=${bin_of[${1%%-*}]}
	local args=(--name "$2" --data-dir "$3" --quota-backend-bytes "$quota"
		--listen-client-urls "$4" --advertise-client-urls "$4"
		--listen-peer-urls "$5" --initial-advertise-peer-urls "$5"
		--initial-cluster "$6" --initial-cluster-state "$7" --initial-cluster-token "scale-$s")
	case $s in
	kvd-bolt) args+=(--backend bolt) ;;
	kvd-badger) args+=(--backend badger) ;;
	esac
	local env=()
	if [ -n "$diag" ] && [ "$s" != etcd ]; then
		args+=(--enable-pprof --log-level debug)
		env=(GODEBUG=gctrace=1)
	fi
	env "${env[@]}" "$bin" "${args[@]}" >>"$8" 2>&1 &
	launched=$!
}

# wait_serving PID ENDPOINT SECONDS: until a linearizable range succeeds;
# 1 when the process exits or the time runs out.
wait_serving() {
	local deadline=$((SECONDS + $3))
	while [ "$SECONDS" -lt "$deadline" ]; do
		serving "$2" && return 0
		kill -0 "$1" 2>/dev/null || return 1
		sleep 0.02
	done
	return 1
}

# The figures of a run, in JSON and table order.
fields=(db_size_bytes db_size_after_load_bytes fill_seconds fill_rps put_rps put_p99_ms range_rps range_p99_ms rss_bytes rss_anon_bytes rss_file_bytes restart_seconds catchup_seconds)
# The steps, each covering some fields: a failed step fails them.
declare -A step_fields=(
	[start]="${fields[*]}"
	[fill]="${fields[*]}"
	[put]="put_rps put_p99_ms"
	[range]="range_rps range_p99_ms"
	[rss]="rss_bytes rss_anon_bytes rss_file_bytes db_size_after_load_bytes"
	[restart]="restart_seconds catchup_seconds"
	[catchup]="catchup_seconds"
)

# Per server,size: vals[$key,field] space-separated round values;
# fails[$key] "step: why" lines; rjson[$key] the rounds as JSON.
declare -A vals fails rjson
declare -A cur curfail

# fail_step STEP WHY: this round's STEP failed.
fail_step() {
	log "$s $z: $1 failed: $2"
	[ -n "${curfail[$1]:-}" ] || curfail[$1]=$2
}

# diag_snap FILE: member 1's I/O counters (its write_bytes counts far more
# than reaches the disk: the disks' own counters follow), the machine's CPU
# and disks, and the member's metrics.
diag_snap() {
	{
		echo "# $(now)"
		cat "/proc/$pid1/io" 2>/dev/null || true
		head -1 /proc/stat
		awk '$3 !~ /^(loop|ram|zram)/ { print "diskstats", $0 }' /proc/diskstats
		grep -E '^(ctxt|procs_running|procs_blocked) ' /proc/stat || true
		awk '{ print "server_utime_stime_ticks", $14, $15 }' "/proc/$pid1/stat" 2>/dev/null || true
	} >"$1.proc"
	curl -fsS --max-time 5 "$ep1/metrics" >"$1.metrics" 2>/dev/null || true
}

# load_run NAME ARGS...: one measured load on member 1; sets cur[NAME_rps]
# and cur[NAME_p99_ms] or fails the step.
load_run() {
	local name=$1 json rc=0 d="" ppid=""
	shift
	if [ -n "$diag" ]; then
		d=$diag/$s.$z.r$r.$name
		diag_snap "$d.before"
		if [ "$s" != etcd ]; then
			curl -fsS --max-time 60 -o "$d.cpu.pb.gz" \
				"$ep1/debug/pprof/profile?seconds=$(( ${duration%s} + ${warmup%s} ))" 2>/dev/null &
			ppid=$!
		fi
	fi
	json=$(timeout --foreground --kill-after=5 $((step_timeout)) "$bench" --endpoints "$ep1" --clients "$clients" \
		--conns "$conns" --duration "$duration" --warmup "$warmup" --request-timeout 60s --json "$@" 2>"$work/run.err") || rc=$?
	if [ -n "$d" ]; then
		diag_snap "$d.after"
		printf '%s\n' "$json" >"$d.json"
		[ -z "$ppid" ] || wait "$ppid" || true
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
		fail_step "$name" "load tool exit $rc: $(tail -1 "$work/run.err")"
		return
	fi
	if [ "$rc" -eq 2 ]; then
		log "$s $z $name: $(jfield "$json" errors) errors, first: $(jfield "$json" first_error)"
	fi
	cur[${name}_rps]=$(jfield "$json" rps)
	cur[${name}_p99_ms]=$(jfield "$json" p99)
}

# one SERVER SIZE ROUND: fill, measure, restart, catch up; records the round.
one() {
	local s=$1 z=$2 r=$3 mib keys data=$work/data.1 lg t0 json rc rev got
	mib=$(size_mib "$z")
	keys=$((mib * 1024))
	quota=$(((2 * mib + 1024) * 1048576))
	cur=() curfail=()
	rm -rf "$work/data.1" "$work/data.2"
	lg=$work/$s.$z.r$r
	: >"$lg.m1.log"
	log "round $r, $z, $s: starting"
	launch "$s" m1 "$data" "$ep1" "$peer1" "m1=$peer1" new "$lg.m1.log"
	pid1=$launched
	if ! wait_serving "$pid1" "$ep1" 60; then
		fail_step start "not serving within 60s: $(tail -1 "$lg.m1.log")"
	fi
	if [ -z "${curfail[start]:-}" ]; then
		log "$s $z: filling $keys keys of 1 KiB with $fill_clients clients"
		t0=$(now)
		rc=0
		json=$(timeout --foreground --kill-after=5 "$step_timeout" "$bench" --endpoints "$ep1" --clients "$fill_clients" \
			--conns 8 --total "$keys" --request-timeout 60s --json \
			put --key-size 8 --val-size 1024 --key-space-size "$keys" --sequential-keys --key-prefix fill/ 2>"$work/run.err") || rc=$?
		if [ "$rc" -ne 0 ]; then
			fail_step fill "load tool exit $rc: $(tail -1 "$work/run.err")"
		else
			cur[fill_seconds]=$(since "$t0")
			cur[fill_rps]=$(jfield "$json" rps)
			cur[db_size_bytes]=$(status_field "$ep1" dbSize)
			log "$s $z: filled in ${cur[fill_seconds]}s at ${cur[fill_rps]} puts/s, db size ${cur[db_size_bytes]}"
		fi
	fi
	if [ -z "${curfail[start]:-}${curfail[fill]:-}" ]; then
		log "$s $z: put load"
		load_run put put --key-size 8 --val-size 1024 --key-space-size "$keys" --key-prefix fill/
		log "$s $z: range load"
		load_run range range --key fill/00000001 --consistency l
		if kill -0 "$pid1" 2>/dev/null; then
			cur[rss_bytes]=$(awk '/^VmRSS:/ { print $2 * 1024 }' "/proc/$pid1/status")
			cur[rss_anon_bytes]=$(awk '/^RssAnon:/ { print $2 * 1024 }' "/proc/$pid1/status")
			cur[rss_file_bytes]=$(awk '/^RssFile:/ { print $2 * 1024 }' "/proc/$pid1/status")
			cur[db_size_after_load_bytes]=$(status_field "$ep1" dbSize)
		else
			fail_step rss "the server exited: $(tail -1 "$lg.m1.log")"
		fi
		log "$s $z: put p99 ${cur[put_p99_ms]:-?} ms, range p99 ${cur[range_p99_ms]:-?} ms, RSS ${cur[rss_bytes]:-?}"
	fi
	if [ -z "${curfail[start]:-}${curfail[fill]:-}${curfail[rss]:-}" ]; then
		log "$s $z: restart"
		stop "$pid1"
		t0=$(now)
		launch "$s" m1 "$data" "$ep1" "$peer1" "m1=$peer1" new "$lg.m1.log"
		pid1=$launched
		if wait_serving "$pid1" "$ep1" "$step_timeout"; then
			cur[restart_seconds]=$(since "$t0")
			log "$s $z: serving again after ${cur[restart_seconds]}s"
		else
			fail_step restart "not serving after ${step_timeout}s: $(tail -1 "$lg.m1.log")"
		fi
	fi
	if [ -z "${curfail[start]:-}${curfail[fill]:-}${curfail[rss]:-}${curfail[restart]:-}" ]; then
		catchup "$s" "$z" "$lg"
	fi
	stop_all
	if [ -n "$keep_logs" ]; then mkdir -p "$keep_logs" && cp "$lg".*.log "$keep_logs/" 2>/dev/null || true; fi
	rm -rf "$work/data.1" "$work/data.2"
	record "$s,$z" "$r"
}

# catchup SERVER SIZE LOGPREFIX: add member m2, time its catch-up.
catchup() {
	local s=$1 z=$2 lg=$3 rev got t0 deadline out rc
	rev=$(status_field "$ep1" revision)
	if [ -z "$rev" ]; then
		fail_step catchup "no revision from the leader's endpoint status"
		return
	fi
	log "$s $z: adding a member (leader revision $rev)"
	# Both refuse an add while the member has not been connected to enough
	# voters for a while; retry for 30s.
	deadline=$((SECONDS + 30))
	while :; do
		rc=0
		out=$("$etcdctl" --endpoints "$ep1" --command-timeout 10s member add m2 --peer-urls "$peer2" 2>&1) || rc=$?
		[ "$rc" -eq 0 ] && break
		if [ "$SECONDS" -ge "$deadline" ]; then
			fail_step catchup "member add: ${out##*$'\n'}"
			return
		fi
		sleep 0.5
	done
	: >"$lg.m2.log"
	t0=$(now)
	launch "$s" m2 "$work/data.2" "$ep2" "$peer2" "m1=$peer1,m2=$peer2" existing "$lg.m2.log"
	pid2=$launched
	deadline=$((SECONDS + step_timeout))
	while [ "$SECONDS" -lt "$deadline" ]; do
		got=$(status_field "$ep2" revision)
		if [ -n "$got" ] && [ "$got" -ge "$rev" ]; then
			cur[catchup_seconds]=$(since "$t0")
			log "$s $z: new member at revision $got after ${cur[catchup_seconds]}s"
			return
		fi
		if ! kill -0 "$pid2" 2>/dev/null; then
			fail_step catchup "the new member exited: $(tail -1 "$lg.m2.log")"
			return
		fi
		sleep 0.1
	done
	fail_step catchup "revision ${got:-none} < $rev after ${step_timeout}s"
}

# record KEY ROUND: fold this round's figures and failures into the results.
record() {
	local key=$1 r=$2 f st v o="" failed_fields=" " fo=""
	for st in "${!curfail[@]}"; do
		failed_fields+="${step_fields[$st]} "
		fails[$key]+="round $r $st: ${curfail[$st]}"$'\n'
		fo+="${fo:+, }$(json_str "$st"): $(json_str "${curfail[$st]}")"
	done
	for f in "${fields[@]}"; do
		v=${cur[$f]:-}
		[[ $failed_fields == *" $f "* ]] && v=""
		[ -n "$v" ] && vals[$key,$f]+="$v "
		o+=", \"$f\": $(json_num "$v")"
	done
	rjson[$key]+="${rjson[$key]:+,
        }{\"round\": $r$o, \"failures\": {$fo}}"
}

start=$(date +%s)
start_date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
load_at_start=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
for z in "${size_list[@]}"; do
	for ((r = 1; r <= rounds; r++)); do
		n=${#server_list[@]}
		for ((i = 0; i < n; i++)); do
			s=${server_list[$(((i + r - 1) % n))]}
			runs "$s" "$z" || continue
			one "$s" "$z" "$r"
		done
	done
done
elapsed=$(($(date +%s) - start))
load_at_end=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
log "done in ${elapsed}s"

# cell KEY FIELD FORMAT [DIV]: the median (divided by DIV), or "failed".
cell() {
	local m
	m=$(median "${vals[$1,$2]:-}")
	if [ -z "$m" ]; then
		echo failed
	else
		awk -v v="$m" -v d="${4:-1}" -v f="$3" 'BEGIN { printf f, v / d }'
	fi
}

table() {
	local of_rounds="" s z k
	[ "$rounds" -gt 1 ] && of_rounds=", medians of $rounds rounds"
	echo "Single member filled with 1 KiB values (sequential keys, $fill_clients clients); load: $clients clients over $conns" \
		"connections, $duration per load after $warmup warm-up (put: 1 KiB over the filled keys at random;" \
		"range: one filled key, linearizable)$of_rounds; $(nproc 2>/dev/null || echo "?") CPUs (load average at start" \
		"$load_at_start, at end $load_at_end), $(go env GOVERSION), $([ -n "$kvd_bin" ] && echo "kvd from KVD_BIN=$kvd_bin" || echo "kvd ${commit:0:7}")$([ "$dirty" = true ] && echo " (tree not clean)")."
	echo
	echo "| size | server | db size MiB | fill s | put p99 ms | range p99 ms | RSS MiB | anon MiB | file MiB | restart s | catch-up s |"
	echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	for z in "${size_list[@]}"; do
		for s in "${server_list[@]}"; do
			runs "$s" "$z" || continue
			k=$s,$z
			echo "| $z | $s | $(cell "$k" db_size_bytes %.0f 1048576) | $(cell "$k" fill_seconds %.0f) |" \
				"$(cell "$k" put_p99_ms %.2f) | $(cell "$k" range_p99_ms %.2f) | $(cell "$k" rss_bytes %.0f 1048576) |" \
				"$(cell "$k" rss_anon_bytes %.0f 1048576) | $(cell "$k" rss_file_bytes %.0f 1048576) |" \
				"$(cell "$k" restart_seconds %.2f) | $(cell "$k" catchup_seconds %.2f) |"
		done
	done
	local any=""
	for z in "${size_list[@]}"; do
		for s in "${server_list[@]}"; do
			if [ -n "${fails[$s,$z]:-}" ]; then
				[ -n "$any" ] || { echo; echo "Failures:"; echo; any=1; }
				while IFS= read -r line; do
					if [ -n "$line" ]; then echo "- $s $z, ${line//|/-}"; fi
				done <<<"${fails[$s,$z]}"
			fi
		done
	done
	return 0
}

if [ -n "$out" ]; then
	table | tee "$out"
else
	table
fi

write_json() {
	local f=$1 tmp s z k sep first cpu ver m o fld
	cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo 2>/dev/null | head -1)
	mkdir -p "$(dirname "$f")"
	tmp=$f.tmp.$$
	{
		printf '{\n  "schema": "kvd-bench-scale/1",\n'
		printf '  "date": %s,\n' "$(json_str "$start_date")"
		printf '  "git_commit": %s,\n  "git_dirty": %s,\n  "kvd_bin": %s,\n' "$(json_str "$commit")" "$dirty" "$(json_str "$kvd_bin")"
		printf '  "go_version": %s,\n' "$(json_str "$(go env GOVERSION)")"
		printf '  "machine": {"cores": %s, "cpu_model": %s, "os": %s, "load_average_at_start": %s, "load_average_at_end": %s},\n' \
			"$(json_num "$(nproc 2>/dev/null)")" "$(json_str "$cpu")" "$(json_str "$(uname -sr)")" \
			"$(json_num "$load_at_start")" "$(json_num "$load_at_end")"
		sep=""
		printf '  "versions": {'
		for s in kvd etcd; do
			[ -n "${bin_of[$s]:-}" ] || continue
			ver=$("${bin_of[$s]}" --version 2>/dev/null) || ver=""
			ver=${ver%%$'\n'*}
			printf '%s%s: %s' "$sep" "$(json_str "$s")" "$(json_str "$ver")"
			sep=", "
		done
		printf '},\n'
		printf '  "rounds": %s,\n  "elapsed_seconds": %s,\n' "$rounds" "$elapsed"
		printf '  "load": {"clients": %s, "conns": %s, "duration": %s, "warmup": %s, "fill_clients": %s, "value_bytes": 1024,\n' \
			"$clients" "$conns" "$(json_str "$duration")" "$(json_str "$warmup")" "$fill_clients"
		printf '           "put": %s,\n           "range": %s},\n' \
			"$(json_str "put --key-size 8 --val-size 1024 --key-space-size KEYS --key-prefix fill/")" \
			"$(json_str "range --key fill/00000001 --consistency l")"
		printf '  "servers": ['
		sep=""
		for s in "${server_list[@]}"; do printf '%s%s' "$sep" "$(json_str "$s")"; sep=", "; done
		printf '],\n  "sizes": ['
		sep=""
		for z in "${size_list[@]}"; do
			printf '%s{"name": %s, "bytes": %s, "keys": %s}' "$sep" "$(json_str "$z")" \
				$(($(size_mib "$z") * 1048576)) $(($(size_mib "$z") * 1024))
			sep=", "
		done
		printf '],\n  "results": [\n'
		first=1
		for z in "${size_list[@]}"; do
			for s in "${server_list[@]}"; do
				runs "$s" "$z" || continue
				k=$s,$z
				[ -n "$first" ] || printf ',\n'
				first=""
				printf '    {"server": %s, "size": %s, "bytes": %s, "keys": %s,\n     "median": {' "$(json_str "$s")" \
					"$(json_str "$z")" $(($(size_mib "$z") * 1048576)) $(($(size_mib "$z") * 1024))
				sep=""
				for fld in "${fields[@]}"; do
					m=$(median "${vals[$k,$fld]:-}")
					printf '%s"%s": %s' "$sep" "$fld" "$(json_num "$m")"
					sep=", "
				done
				o=""
				if [ -n "${fails[$k]:-}" ]; then o=$(json_str "${fails[$k]%$'\n'}"); else o=null; fi
				printf '},\n     "failures": %s,\n     "per_round": [%s]}' "$o" "${rjson[$k]:-}"
			done
		done
		printf '\n  ]\n}\n'
	} >"$tmp"
	mv "$tmp" "$f"
	log "wrote $f"
}

[ -z "$json_out" ] || write_json "$json_out"
