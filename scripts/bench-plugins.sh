#!/usr/bin/env bash
# bench-plugins.sh: what kvd's out-of-process auth plugins cost, against the
# same kvd with its built-in auth only, with the same load tool
# (tools/bench), workloads and client counts as scripts/bench-auth.sh; one
# fresh single member (bolt, real fsync) per configuration and round, on
# loopback. Modeled on scripts/bench-auth.sh (build, start, wait, median and
# table code).
#
# Configurations (auth enabled in each; role tenant-alice has readwrite on
# /tenants/alice/, every key the load touches is under it):
#   builtin         kvd user alice with role tenant-alice; no plugin
#   htpasswd        plugins/htpasswd: alice only in its htpasswd file, in
#                   group tenant-alice (the group is the kvd role); the
#                   tool logs in once per connection as with kvd's users
#   prefix          plugins/prefix --root /tenants/ (authorizer), kvd user
#                   alice; default cache-ttl (5s)
#   oidc            plugins/oidc (authenticator): a raw RS256 JWT of a key
#                   made for the run, groups [tenant-alice], sent as the
#                   token of every request (bench --token); default cache-ttl
#   prefix-nocache  as prefix with cache-ttl: 0: every KV request asks the
#                   plugin (the cost of a cache miss)
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-plugins.sh [options]

  -d, --duration D     measure each workload for D (default 4s; env BENCH_DURATION)
  -w, --warmup D       unrecorded warm-up before each workload (default 1s; env BENCH_WARMUP)
  -r, --rounds N       run everything N times, the configuration order rotated
                       each round; the tables show medians (default 3; env BENCH_ROUNDS)
  -c, --clients N      concurrent request loops (default 100; env BENCH_CLIENTS)
      --conns N        gRPC connections (default 10; env BENCH_CONNS)
      --configs LIST   space-separated, from: builtin htpasswd prefix oidc
                       prefix-nocache (default all five; env BENCH_CONFIGS)
      --workloads LIST space-separated, from: put range-key-s range-key-l lat
                       (default all four; env BENCH_WORKLOADS); lat is
                       range-key-s from 1 client over 1 connection, the
                       latency a plugin adds without queueing
      --put-keys N     the put workload's key space (default 10000, bench-auth.sh's;
                       env BENCH_PUT_KEYS); the prefix authorizer's allows are
                       cached per key (at most 8192 per plugin, for cache-ttl)
      --pprof DIR      also take a CPU profile of kvd (--enable-pprof,
                       /debug/pprof/profile for the measuring time) of every
                       workload into DIR
      --kvd-rev REV    build kvd, the plugins and the tools from git commit
                       REV (git archive into the scratch dir) instead of the
                       working tree (env KVD_REV)
      --port P         client port P, peer port P+1 (default 23890; env BENCH_PORT)
  -o, --out FILE       also write the tables to FILE
      --keep-logs DIR  copy the server logs (one per configuration and round) to DIR
  -h, --help

Binaries are built into the scratch directory: kvd (./cmd/kvd), the three
plugins (./plugins/...), tools/bench, tools/benchcreds (the htpasswd line
and the OIDC key set and token); etcdctl v3.7.3 (for setting up auth) from
the e2e module, unless ETCDCTL_BIN names one. bcrypt cost 10 everywhere.
Plugins run with their defaults (timeout 2s for an authenticator, 500ms
for an authorizer, on-failure deny, cache-ttl 5s) but for (e)'s cache-ttl
0; env BENCH_HTPASSWD_TIMEOUT sets the htpasswd plugin's timeout.
EOF
}

duration=${BENCH_DURATION:-4s}
warmup=${BENCH_WARMUP:-1s}
rounds=${BENCH_ROUNDS:-3}
clients=${BENCH_CLIENTS:-100}
conns=${BENCH_CONNS:-10}
configs=${BENCH_CONFIGS:-"builtin htpasswd prefix oidc prefix-nocache"}
workloads=${BENCH_WORKLOADS:-"put range-key-s range-key-l lat"}
port=${BENCH_PORT:-23890}
put_keys=${BENCH_PUT_KEYS:-10000}
kvd_rev=${KVD_REV:-}
pprof_dir=""
out=""
keep_logs=""
# A hung server must not hang the script: each tool run gets this long.
run_timeout=${BENCH_RUN_TIMEOUT:-300}

while [ $# -gt 0 ]; do
	case $1 in
	-d | --duration) duration=$2; shift 2 ;;
	-w | --warmup) warmup=$2; shift 2 ;;
	-r | --rounds) rounds=$2; shift 2 ;;
	-c | --clients) clients=$2; shift 2 ;;
	--conns) conns=$2; shift 2 ;;
	--configs) configs=$2; shift 2 ;;
	--workloads) workloads=$2; shift 2 ;;
	--pprof) pprof_dir=$2; shift 2 ;;
	--put-keys) put_keys=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	--kvd-rev) kvd_rev=$2; shift 2 ;;
	-o | --out) out=$2; shift 2 ;;
	--keep-logs) keep_logs=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench-plugins.sh: unknown option $1" >&2; usage >&2; exit 1 ;;
	esac
done

for v in rounds clients conns put_keys; do
	case ${!v} in
	'' | *[!0-9]* | 0) echo "bench-plugins.sh: --${v//_/-} must be a positive integer, got '${!v}'" >&2; exit 1 ;;
	esac
done
case $duration in *[!0-9]*s | '' | s) echo "bench-plugins.sh: --duration must be whole seconds (e.g. 4s), got '$duration'" >&2; exit 1 ;; esac
case $warmup in *[!0-9]*s | '' | s) echo "bench-plugins.sh: --warmup must be whole seconds (e.g. 1s), got '$warmup'" >&2; exit 1 ;; esac
read -ra config_list <<<"$configs"
for c in "${config_list[@]}"; do
	case $c in
	builtin | htpasswd | prefix | oidc | prefix-nocache) ;;
	*) echo "bench-plugins.sh: unknown config $c (want builtin, htpasswd, prefix, oidc, prefix-nocache)" >&2; exit 1 ;;
	esac
done
for w in $workloads; do
	case $w in
	put | range-key-s | range-key-l | lat) ;;
	*) echo "bench-plugins.sh: unknown workload $w (want put, range-key-s, range-key-l, lat)" >&2; exit 1 ;;
	esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvd-bench-plugins.XXXXXX")
server_pid=""
pprof_pid=""
reason=""

user=alice
user_pass=alice-pw
root_pass=root-pw
role=tenant-alice
tenant=/tenants/alice/
oidc_issuer=https://sso.bench.test
oidc_audience=kvd
# The tool logs in on its 10 connections at once: 10 bcrypt checks (cost
# 10) in the plugin at the same time take over the default 500ms on 2
# CPUs, and a timed-out login is refused (on-failure: deny). Logins are not
# measured; the per-request path does not call this plugin.
htpasswd_timeout=${BENCH_HTPASSWD_TIMEOUT:-}

log() { printf 'bench-plugins.sh: %s\n' "$*" >&2; }

# stop_server: SIGTERM, SIGKILL whatever is left after 10s (kvd stops its
# plugins on the way out; they are killed too if kvd was).
stop_server() {
	[ -n "$pprof_pid" ] && { kill "$pprof_pid" 2>/dev/null || true; wait "$pprof_pid" 2>/dev/null || true; pprof_pid=""; }
	[ -n "$server_pid" ] || return 0
	local kids
	kids=$(plugin_pids)
	kill "$server_pid" 2>/dev/null || true
	for _ in $(seq 100); do
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -9 "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	local k
	for k in $kids; do kill -9 "$k" 2>/dev/null || true; done
	server_pid=""
}

cleanup() {
	stop_server
	rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# plugin_pids: the server's child processes (its plugins).
plugin_pids() {
	[ -n "$server_pid" ] || return 0
	pgrep -P "$server_pid" 2>/dev/null || true
}

# cpu_ticks PID...: user + system clock ticks the processes used so far.
cpu_ticks() {
	local p t=0 st
	for p in "$@"; do
		st=$(cat "/proc/$p/stat" 2>/dev/null) || continue
		st=${st##*) }
		# Fields after the command: state is 3, utime 14, stime 15.
		t=$((t + $(awk '{ print $12 + $13 }' <<<"$st")))
	done
	echo "$t"
}
clk_tck=$(getconf CLK_TCK)

# plugin_calls: the calls kvd made to its plugins so far (its /metrics).
plugin_calls() {
	curl -s --max-time 5 "http://127.0.0.1:$port/metrics" |
		awk '/^kvd_auth_plugin_calls_total/ { n += $NF } END { printf "%d\n", n }'
}

# workload_args NAME: the tool's command line for one workload
# (bench-auth.sh's, with every key under the tenant's prefix).
workload_args() {
	case $1 in
	put) echo "put --key-prefix $tenant --key-size 8 --val-size 256 --key-space-size $put_keys" ;;
	range-key-s | lat) echo "range --key ${tenant}key --preload 1 --val-size 256 --consistency s" ;;
	range-key-l) echo "range --key ${tenant}key --preload 1 --val-size 256 --consistency l" ;;
	esac
}

workload_label() {
	case $1 in
	put) echo "put" ;;
	range-key-s) echo "range 1 key, serializable" ;;
	range-key-l) echo "range 1 key, linearizable" ;;
	lat) echo "range 1 key, serializable, 1 client" ;;
	esac
}

config_label() {
	case $1 in
	builtin) echo "(a) built-in auth only" ;;
	htpasswd) echo "(b) htpasswd authenticator" ;;
	prefix) echo "(c) prefix authorizer, cache-ttl 5s" ;;
	oidc) echo "(d) oidc authenticator, raw JWT" ;;
	prefix-nocache) echo "(e) prefix authorizer, cache-ttl 0" ;;
	esac
}

# load_flags WORKLOAD: the client counts of a workload.
load_flags() {
	if [ "$1" = lat ]; then
		echo "--clients 1 --conns 1"
	else
		echo "--clients $clients --conns $conns"
	fi
}

# cred_flags CONFIG: who the load runs as.
cred_flags() {
	if [ "$1" = oidc ]; then
		echo "--token $(cat "$work/oidc.token")"
	else
		echo "--user $user:$user_pass"
	fi
}

bin=$work/bin
mkdir -p "$bin"
src=$root
if [ -n "$kvd_rev" ]; then
	kvd_rev=$(git rev-parse --short "$kvd_rev^{commit}")
	log "building from git commit $kvd_rev"
	src=$work/src
	mkdir -p "$src"
	git archive "$kvd_rev" | tar -x -C "$src"
fi
log "building kvd, the plugins, tools/bench and tools/benchcreds"
(cd "$src" && for p in ./cmd/kvd ./plugins/htpasswd ./plugins/oidc ./plugins/prefix ./tools/bench ./tools/benchcreds; do
	go build -o "$bin/$(basename "$p")" "$p" || exit 1
done)
bench=$bin/bench
etcdctl=${ETCDCTL_BIN:-}
if [ -z "$etcdctl" ]; then
	log "building etcdctl (v3.7.3, from the e2e module)"
	(cd e2e && go build -o "$bin/etcdctl" go.etcd.io/etcd/etcdctl/v3)
	etcdctl=$bin/etcdctl
fi

# The plugins' files: alice in the htpasswd file and group tenant-alice; an
# RSA key set and a JWT for alice in group tenant-alice, valid for 2 hours.
creds=$work/creds
mkdir -p "$creds"
"$bin/benchcreds" htpasswd "$user" "$user_pass" >"$creds/htpasswd"
echo "$role: $user" >"$creds/groups"
"$bin/benchcreds" oidc --issuer "$oidc_issuer" --audience "$oidc_audience" --sub "$user" \
	--groups "$role" --ttl 2h --jwks "$creds/jwks.json" >"$work/oidc.token"

# plugin_config CONFIG: the kvd config file of CONFIG (empty for builtin).
plugin_config() {
	local f=$work/$1.yaml
	case $1 in
	builtin) return 0 ;;
	htpasswd)
		cat >"$f" <<EOF
auth-plugins:
  - name: htpasswd
    kind: authenticator
    command: $bin/htpasswd
    args: [--file, $creds/htpasswd, --groups, $creds/groups]
EOF
		if [ -n "$htpasswd_timeout" ]; then
			echo "    timeout: $htpasswd_timeout" >>"$f"
		fi
		;;
	oidc)
		cat >"$f" <<EOF
auth-plugins:
  - name: oidc
    kind: authenticator
    command: $bin/oidc
    args: [--issuer, $oidc_issuer, --audience, $oidc_audience, --jwks-file, $creds/jwks.json]
EOF
		;;
	prefix | prefix-nocache)
		cat >"$f" <<EOF
auth-plugins:
  - name: prefix
    kind: authorizer
    command: $bin/prefix
    args: [--root, /tenants/]
EOF
		[ "$1" = prefix-nocache ] && echo "    cache-ttl: 0s" >>"$f"
		;;
	esac
	echo "$f"
}

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# start_server CONFIG ROUND: a fresh single member (bolt, fsync on) with
# CONFIG's plugins, serving a linearizable read, auth set up and enabled.
# Returns 1 with the reason in $reason.
start_server() {
	local c=$1 r=$2 data=$work/data cfg
	local logf=$work/$c.r$r.log
	if port_busy "$port" || port_busy "$((port + 1))"; then
		reason="port $port or $((port + 1)) already in use"
		return 1
	fi
	local args=(--name b --data-dir "$data" --backend bolt
		--listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port"
		--listen-peer-urls "http://127.0.0.1:$((port + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))"
		--initial-cluster "b=http://127.0.0.1:$((port + 1))")
	cfg=$(plugin_config "$c")
	[ -n "$cfg" ] && args+=(--config "$cfg")
	[ -n "$pprof_dir" ] && args+=(--enable-pprof)
	"$bin/kvd" "${args[@]}" >"$logf" 2>&1 &
	server_pid=$!
	local deadline=$((SECONDS + 30))
	while [ "$SECONDS" -lt "$deadline" ]; do
		if ! kill -0 "$server_pid" 2>/dev/null; then
			server_pid=""
			reason="at start, exited: $(tail -1 "$logf")"
			return 1
		fi
		if "$bench" --endpoints "http://127.0.0.1:$port" --clients 1 --conns 1 --total 1 --dial-timeout 1s \
			--request-timeout 1s range --key ready --consistency l >/dev/null 2>&1; then
			if setup_auth "$c"; then return 0; fi
			stop_server
			reason="auth setup failed: $(tail -1 "$work/setup.log")"
			return 1
		fi
		sleep 0.5
	done
	stop_server
	reason="not serving after 30s: $(tail -1 "$logf")"
	return 1
}

# setup_auth CONFIG: root with the root role; role tenant-alice with
# readwrite on /tenants/alice/; kvd user alice with it unless an
# authenticator plugin vouches for alice; auth enable; then one put as the
# load will run, to prove it works. (That the plugins are asked shows in the
# table's plugin calls per request, from kvd's /metrics.)
setup_auth() {
	local c=$1
	local ctl=("$etcdctl" --endpoints "127.0.0.1:$port" --dial-timeout 5s --command-timeout 30s)
	local -a cf
	read -ra cf <<<"$(cred_flags "$c")"
	{
		"${ctl[@]}" user add root --new-user-password "$root_pass" --interactive=false &&
			{ "${ctl[@]}" role add root || "${ctl[@]}" role get root; } &&
			"${ctl[@]}" user grant-role root root &&
			"${ctl[@]}" role add "$role" &&
			"${ctl[@]}" role grant-permission "$role" readwrite "$tenant" --prefix &&
			case $c in
			htpasswd | oidc) true ;;
			*) "${ctl[@]}" user add "$user" --new-user-password "$user_pass" --interactive=false &&
				"${ctl[@]}" user grant-role "$user" "$role" ;;
			esac &&
			"${ctl[@]}" auth enable &&
			"$bench" --endpoints "http://127.0.0.1:$port" "${cf[@]}" --clients 1 --conns 1 --total 1 \
				put --key-prefix "$tenant" --key-space-size 1
	} >"$work/setup.log" 2>&1
}

# jfield JSON NAME: a top-level or nested field of the tool's one-line JSON.
jfield() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }

# Per config and workload: space-separated values, one per successful
# round; errs sums the failed requests; fail keeps the last failure.
declare -A rps p50 p99 cpu pcpu calls errs fail

run_workload() {
	local c=$1 w=$2 r=$3 json rc=0
	local -a wargs lflags cf
	read -ra wargs <<<"$(workload_args "$w")"
	read -ra lflags <<<"$(load_flags "$w")"
	read -ra cf <<<"$(cred_flags "$c")"
	if [ -n "$pprof_dir" ]; then
		mkdir -p "$pprof_dir"
		# Starts with the warm-up, so it ends about a second before measuring does.
		curl -s --max-time $((${duration%s} + 30)) -o "$pprof_dir/$c.$w.r$r.pb.gz" \
			"http://127.0.0.1:$port/debug/pprof/profile?seconds=${duration%s}" &
		pprof_pid=$!
	fi
	local -a kids
	read -ra kids <<<"$(plugin_pids | tr '\n' ' ')"
	local t0 c0
	t0=$(cpu_ticks "${kids[@]}")
	c0=$(plugin_calls)
	json=$(timeout --foreground --kill-after=5 "$run_timeout" "$bench" --endpoints "http://127.0.0.1:$port" \
		"${cf[@]}" "${lflags[@]}" --dial-timeout 60s --duration "$duration" --warmup "$warmup" --json --cpu-pid "$server_pid" \
		"${wargs[@]}" 2>"$work/run.err") || rc=$?
	local t1 c1
	t1=$(cpu_ticks "${kids[@]}")
	c1=$(plugin_calls)
	if [ -n "$pprof_pid" ]; then
		wait "$pprof_pid" 2>/dev/null || true
		pprof_pid=""
	fi
	if ! kill -0 "$server_pid" 2>/dev/null; then
		reason="exited: $(tail -1 "$work/$c.r$r.log")"
		fail[$c,$w]="failed: $reason"
		return 1
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
		fail[$c,$w]="failed (exit $rc): $(tail -1 "$work/run.err")"
		return
	fi
	local n x
	x=$(jfield "$json" rps)
	rps[$c,$w]+="$x "
	p50[$c,$w]+="$(jfield "$json" p50) "
	p99[$c,$w]+="$(jfield "$json" p99) "
	cpu[$c,$w]+="$(jfield "$json" server_cpu_us_per_req) "
	# The plugins' CPU and kvd's calls to them are read around the whole
	# tool run, warm-up included: per request of warm-up and measuring at
	# the measured rate.
	local reqs
	reqs=$(awk -v r="$x" -v d="${duration%s}" -v w="${warmup%s}" 'BEGIN { printf "%.0f", r * (d + w) }')
	if [ "${#kids[@]}" -gt 0 ] && [ "$reqs" -gt 0 ]; then
		pcpu[$c,$w]+="$(awk -v t=$((t1 - t0)) -v hz="$clk_tck" -v n="$reqs" 'BEGIN { printf "%.1f", t / hz * 1e6 / n }') "
		calls[$c,$w]+="$(awk -v k=$((c1 - c0)) -v n="$reqs" 'BEGIN { printf "%.3f", k / n }') "
	fi
	n=$(jfield "$json" errors)
	errs[$c,$w]=$((${errs[$c,$w]:-0} + n))
	if [ "$n" != 0 ]; then
		log "$c $w: $n errors, first: $(jfield "$json" first_error)"
	fi
}

save_logs() {
	[ -n "$keep_logs" ] || return 0
	mkdir -p "$keep_logs"
	cp "$work/$1.r$2.log" "$keep_logs/" 2>/dev/null || true
}

start=$(date +%s)
started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
load_at_start=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
nc=${#config_list[@]}
for ((r = 0; r < rounds; r++)); do
	for ((i = 0; i < nc; i++)); do
		c=${config_list[$(((i + r) % nc))]}
		log "round $((r + 1))/$rounds, $c: starting"
		if ! start_server "$c" "$r"; then
			log "$c: $reason"
			for w in $workloads; do fail[$c,$w]="failed: $reason"; done
			save_logs "$c" "$r"
			rm -rf "${work:?}/data"
			continue
		fi
		dead=""
		for w in $workloads; do
			if [ -n "$dead" ]; then
				fail[$c,$w]="failed: $dead"
				continue
			fi
			log "round $((r + 1))/$rounds, $c: $w"
			if ! run_workload "$c" "$w" "$r"; then
				dead=$reason
				log "$c: $reason"
			fi
		done
		stop_server
		save_logs "$c" "$r"
		rm -rf "${work:?}/data"
	done
done
log "done in $(($(date +%s) - start))s"

# median, spread, ratio
. "$root/scripts/lib/stats.sh"

# minus A B: A-B in ms to two decimals, or n/a.
minus() {
	if [ -z "$1" ] || [ -z "$2" ]; then
		echo "n/a"
	else
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.2f", a - b }'
	fi
}

tables() {
	local of_rounds=""
	[ "$rounds" -gt 1 ] && of_rounds=", medians of $rounds rounds (req/s: min–max in brackets)"
	echo "$clients clients over $conns connections (lat: 1 over 1), single kvd member (bolt, fsync on) on loopback," \
		"puts over $put_keys keys," \
		"$duration per workload after $warmup warm-up$of_rounds; bcrypt cost 10; started $started_at;" \
		"$(nproc 2>/dev/null || echo "?") CPUs (load average at start $load_at_start), $(go env GOVERSION)," \
		"kvd ${kvd_rev:-$(git rev-parse --short HEAD 2>/dev/null || echo "?") (working tree)}."
	echo
	echo "| config | workload | req/s | p50 ms | p99 ms | req/s vs (a) | kvd CPU µs/req | plugin CPU µs/req | plugin calls/req | errors |"
	echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
	declare -A mrps mp50 mp99
	local c w k
	for w in $workloads; do
		for c in "${config_list[@]}"; do
			k=$c,$w
			if [ -z "${rps[$k]:-}" ]; then
				echo "| $(config_label "$c") | $(workload_label "$w") | ${fail[$k]//|/-} | | | | | | | |"
				continue
			fi
			mrps[$k]=$(median "${rps[$k]}")
			mp50[$k]=$(median "${p50[$k]}")
			mp99[$k]=$(median "${p99[$k]}")
			local pc="—" cl="—"
			[ -n "${pcpu[$k]:-}" ] && pc=$(median "${pcpu[$k]}")
			[ -n "${calls[$k]:-}" ] && cl=$(median "${calls[$k]}")
			printf '| %s | %s | %.1f%s | %.2f | %.2f | %s | %.1f | %s | %s | %s |\n' "$(config_label "$c")" \
				"$(workload_label "$w")" "${mrps[$k]}" "$(spread "${rps[$k]}")" "${mp50[$k]}" "${mp99[$k]}" \
				"$(ratio "${mrps[$k]}" "${mrps[builtin,$w]:-}")" "$(median "${cpu[$k]}")" "$pc" "$cl" "${errs[$k]}"
		done
	done
	if [[ " $workloads " == *" lat "* ]] && [[ " $configs " == *" prefix-nocache "* ]]; then
		echo
		echo "Added on a cache miss (1 client, serializable 1-key range; (e) asks the plugin on every request):"
		echo
		echo "| against | p50 added ms | p99 added ms |"
		echo "| --- | ---: | ---: |"
		for c in prefix builtin; do
			[[ " $configs " == *" $c "* ]] || continue
			echo "| $(config_label "$c") | $(minus "${mp50[prefix-nocache,lat]:-}" "${mp50[$c,lat]:-}") | $(minus "${mp99[prefix-nocache,lat]:-}" "${mp99[$c,lat]:-}") |"
		done
	fi
}

if [ -n "$out" ]; then
	tables | tee "$out"
else
	tables
fi
