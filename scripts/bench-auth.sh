#!/usr/bin/env bash
# bench-auth.sh: the cost of auth and TLS, kvd (bolt, Badger) against etcd
# v3.7.3, with the same load tool (tools/bench) and the same settings, one
# single-member server at a time on loopback. Modeled on scripts/bench.sh
# (same build, start, wait, median and table code, single member only).
#
# Modes, each on a fresh member:
#   plain  auth disabled, plaintext
#   auth   auth enabled, simple tokens; the load runs as the non-root user
#          "bench" whose role has readwrite on the benchmark keys' prefixes
#          (bench/ and 0000); the auth workload (Authenticate/s) runs here too
#   tls    mutual TLS (client-cert-auth, CN=bench), auth disabled
set -euo pipefail

usage() {
	cat <<'EOF'
usage: scripts/bench-auth.sh [options]

  -d, --duration D     measure each workload for D (default 4s; env BENCH_DURATION)
  -w, --warmup D       unrecorded warm-up before each workload (default 1s; env BENCH_WARMUP)
  -r, --rounds N       run everything N times, the server order and the mode
                       order rotated each round; the tables show medians
                       (default 1; env BENCH_ROUNDS)
  -c, --clients N      concurrent request loops (default 100; env BENCH_CLIENTS)
      --conns N        gRPC connections (default 10; env BENCH_CONNS)
  -s, --servers LIST   space-separated, from: kvd-bolt kvd-badger etcd
                       (default all three; env BENCH_SERVERS)
      --modes LIST     space-separated, from: plain auth tls (default all three;
                       env BENCH_MODES)
      --workloads LIST space-separated, from: put range-key-s range-key-l
                       (default all three; env BENCH_WORKLOADS); the auth
                       mode also runs the auth workload (Authenticate/s)
                       unless --no-auth-workload
      --no-auth-workload
      --skip LIST      server:mode pairs not to run, e.g. "kvd-bolt:tls"
                       (env BENCH_SKIP); their rows say "skipped"
      --etcd-split-http
                       give etcd --listen-client-http-urls on port P+2, so
                       its client URL serves gRPC alone (natively, not
                       through net/http as when gRPC and HTTP share the
                       port: etcd's slow path over TLS); kvd is unchanged
      --pprof DIR      kvd only: also take a CPU profile of the server
                       (--enable-pprof, /debug/pprof/profile for the
                       measuring time) of every kvd workload into DIR
      --kvd-rev REV    build kvd from git commit REV (git archive into the
                       scratch dir) instead of the working tree (env KVD_REV)
      --port P         client port P, peer port P+1, P+2 kept free (default
                       23790; env BENCH_PORT)
  -o, --out FILE       also write the tables to FILE
      --keep-logs DIR  copy the server logs (one per server, mode and round) to DIR
  -h, --help

Binaries: bin/kvd is built from ./cmd/kvd, bin/etcd from e2e/cmd/etcd and
bin/etcdctl (v3.7.3, for setting up auth) from the e2e module, unless
KVD_BIN, ETCD_BIN or ETCDCTL_BIN name one to use. Certificates are made
with openssl in the scratch directory (ECDSA P-256: a CA, a server
certificate for 127.0.0.1 and localhost, a client certificate with CN=bench).
bcrypt-cost is left at its default, 10, on every server.
EOF
}

duration=${BENCH_DURATION:-4s}
warmup=${BENCH_WARMUP:-1s}
rounds=${BENCH_ROUNDS:-1}
clients=${BENCH_CLIENTS:-100}
conns=${BENCH_CONNS:-10}
servers=${BENCH_SERVERS:-"kvd-bolt kvd-badger etcd"}
modes=${BENCH_MODES:-"plain auth tls"}
workloads=${BENCH_WORKLOADS:-"put range-key-s range-key-l"}
skip=${BENCH_SKIP:-}
port=${BENCH_PORT:-23790}
kvd_rev=${KVD_REV:-}
auth_workload=1
etcd_split=""
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
	-s | --servers) servers=$2; shift 2 ;;
	--modes) modes=$2; shift 2 ;;
	--workloads) workloads=$2; shift 2 ;;
	--no-auth-workload) auth_workload=""; shift ;;
	--skip) skip=$2; shift 2 ;;
	--etcd-split-http) etcd_split=1; shift ;;
	--pprof) pprof_dir=$2; shift 2 ;;
	--port) port=$2; shift 2 ;;
	--kvd-rev) kvd_rev=$2; shift 2 ;;
	-o | --out) out=$2; shift 2 ;;
	--keep-logs) keep_logs=$2; shift 2 ;;
	-h | --help) usage; exit 0 ;;
	*) echo "bench-auth.sh: unknown option $1" >&2; usage >&2; exit 1 ;;
	esac
done

for v in rounds clients conns; do
	case ${!v} in
	'' | *[!0-9]* | 0) echo "bench-auth.sh: --$v must be a positive integer, got '${!v}'" >&2; exit 1 ;;
	esac
done
read -ra server_list <<<"$servers"
read -ra mode_list <<<"$modes"
for s in "${server_list[@]}"; do
	case $s in
	kvd-bolt | kvd-badger | etcd) ;;
	*) echo "bench-auth.sh: unknown server $s (want kvd-bolt, kvd-badger, etcd)" >&2; exit 1 ;;
	esac
done
for m in "${mode_list[@]}"; do
	case $m in
	plain | auth | tls) ;;
	*) echo "bench-auth.sh: unknown mode $m (want plain, auth, tls)" >&2; exit 1 ;;
	esac
done
for w in $workloads; do
	case $w in
	put | range-key-s | range-key-l) ;;
	*) echo "bench-auth.sh: unknown workload $w (want put, range-key-s, range-key-l)" >&2; exit 1 ;;
	esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

work=$(mktemp -d "${TMPDIR:-/tmp}/kvd-bench-auth.XXXXXX")
server_pid=""
pprof_pid=""
reason=""

# The benchmark user and the keys it may touch: bench.sh's range keys live
# under bench/, its put keys are 8-digit numbers below 10,000 (00000000 to
# 00009999), all under 0000.
bench_user=bench
bench_pass=bench-pw
root_pass=root-pw
perm_prefixes=(bench/ 0000)

log() { printf 'bench-auth.sh: %s\n' "$*" >&2; }

# stop_server: SIGTERM, SIGKILL whatever is left after 10s.
stop_server() {
	[ -n "$pprof_pid" ] && { kill "$pprof_pid" 2>/dev/null || true; wait "$pprof_pid" 2>/dev/null || true; pprof_pid=""; }
	[ -n "$server_pid" ] || return 0
	kill "$server_pid" 2>/dev/null || true
	for _ in $(seq 100); do
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

# workload_args NAME: the tool's command line for one workload (bench.sh's).
workload_args() {
	case $1 in
	put) echo "put --key-size 8 --val-size 256 --key-space-size 10000" ;;
	range-key-s) echo "range --key bench/key --preload 1 --val-size 256 --consistency s" ;;
	range-key-l) echo "range --key bench/key --preload 1 --val-size 256 --consistency l" ;;
	auth) echo "auth" ;;
	esac
}

workload_label() {
	case $1 in
	put) echo "put" ;;
	range-key-s) echo "range 1 key, serializable" ;;
	range-key-l) echo "range 1 key, linearizable" ;;
	auth) echo "Authenticate" ;;
	esac
}

mode_label() {
	case $1 in
	plain) echo "auth off" ;;
	auth) echo "auth on (simple token)" ;;
	tls) echo "mutual TLS" ;;
	esac
}

# mode_workloads MODE: what runs in MODE.
mode_workloads() {
	echo -n "$workloads"
	[ "$1" = auth ] && [ -n "$auth_workload" ] && echo -n " auth"
	echo
}

skipped() { case " $skip " in *" $1:$2 "*) return 0 ;; esac; return 1; }

mkdir -p bin
log "building bin/bench"
go build -o bin/bench ./tools/bench
bench=$root/bin/bench

declare -A bin_of missing
want() { case " $servers " in *" $1"*) return 0 ;; esac; return 1; }

if want kvd; then
	if [ -n "${KVD_BIN:-}" ]; then
		bin_of[kvd]=$KVD_BIN
	elif [ -n "$kvd_rev" ]; then
		kvd_rev=$(git rev-parse --short "$kvd_rev^{commit}")
		log "building bin/kvd-$kvd_rev from git commit $kvd_rev"
		mkdir -p "$work/src"
		if git archive "$kvd_rev" | tar -x -C "$work/src" &&
			(cd "$work/src" && go build -o "$root/bin/kvd-$kvd_rev" ./cmd/kvd) 2>"$work/kvd-build.log"; then
			bin_of[kvd]=$root/bin/kvd-$kvd_rev
		else
			missing[kvd]="build of $kvd_rev failed: $(head -1 "$work/kvd-build.log")"
		fi
		rm -rf "$work/src"
	else
		log "building bin/kvd"
		if go build -o bin/kvd ./cmd/kvd 2>"$work/kvd-build.log"; then
			bin_of[kvd]=$root/bin/kvd
		else
			missing[kvd]="build failed: $(head -1 "$work/kvd-build.log")"
		fi
	fi
fi
if want etcd; then
	if [ -n "${ETCD_BIN:-}" ]; then
		bin_of[etcd]=$ETCD_BIN
	else
		log "building bin/etcd (v3.7.3, from the e2e module)"
		if (cd e2e && go build -o ../bin/etcd ./cmd/etcd) 2>"$work/etcd-build.log"; then
			bin_of[etcd]=$root/bin/etcd
		else
			missing[etcd]="build failed: $(head -1 "$work/etcd-build.log")"
		fi
	fi
fi
etcdctl=${ETCDCTL_BIN:-}
if [ -z "$etcdctl" ] && [[ " $modes " == *" auth "* ]]; then
	log "building bin/etcdctl (v3.7.3, from the e2e module)"
	(cd e2e && go build -o ../bin/etcdctl go.etcd.io/etcd/etcdctl/v3)
	etcdctl=$root/bin/etcdctl
fi

# make_certs: a CA, a server certificate for 127.0.0.1/localhost and a client
# certificate with CN=bench, ECDSA P-256, valid for a day.
pki=$work/pki
make_certs() {
	mkdir -p "$pki"
	openssl req -x509 -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
		-keyout "$pki/ca-key.pem" -out "$pki/ca.pem" -days 1 -subj /CN=bench-ca \
		-addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
	local name cn ext serial=1
	for name in server client; do
		serial=$((serial + 1))
		if [ $name = server ]; then
			cn=bench-server
			ext="subjectAltName=IP:127.0.0.1,DNS:localhost
extendedKeyUsage=serverAuth,clientAuth
keyUsage=critical,digitalSignature"
		else
			cn=bench
			ext="extendedKeyUsage=clientAuth
keyUsage=critical,digitalSignature"
		fi
		openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
			-keyout "$pki/$name-key.pem" -out "$pki/$name.csr" -subj "/CN=$cn" 2>/dev/null
		openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.pem" -CAkey "$pki/ca-key.pem" \
			-set_serial "$serial" -days 1 -extfile <(echo "$ext") -out "$pki/$name.pem" 2>/dev/null
	done
	openssl verify -CAfile "$pki/ca.pem" "$pki/server.pem" "$pki/client.pem" >/dev/null
}
if [[ " $modes " == *" tls "* ]]; then
	log "making certificates with $(openssl version | cut -d' ' -f1-2)"
	make_certs
fi

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# client_flags MODE: the tool's connection flags in MODE (without --user).
client_flags() {
	if [ "$1" = tls ]; then
		echo "--endpoints https://127.0.0.1:$port --cacert $pki/ca.pem --cert $pki/client.pem --key $pki/client-key.pem"
	else
		echo "--endpoints http://127.0.0.1:$port"
	fi
}

# start_server SERVER MODE ROUND: a fresh single member, serving a
# linearizable read; auth set up and enabled in mode auth. Returns 1 with
# the reason in $reason.
start_server() {
	local s=$1 m=$2 r=$3 kind=${1%%-*} data=$work/$1.data
	local logf=$work/$s.$m.r$r.log scheme=http
	if [ -n "${missing[$kind]:-}" ]; then
		reason=${missing[$kind]}
		return 1
	fi
	if port_busy "$port" || port_busy "$((port + 1))" || port_busy "$((port + 2))"; then
		reason="port $port, $((port + 1)) or $((port + 2)) already in use"
		return 1
	fi
	[ "$m" = tls ] && scheme=https
	local args=(--name b --data-dir "$data"
		--listen-client-urls "$scheme://127.0.0.1:$port" --advertise-client-urls "$scheme://127.0.0.1:$port"
		--listen-peer-urls "http://127.0.0.1:$((port + 1))" --initial-advertise-peer-urls "http://127.0.0.1:$((port + 1))"
		--initial-cluster "b=http://127.0.0.1:$((port + 1))")
	[ "$m" = tls ] && args+=(--cert-file "$pki/server.pem" --key-file "$pki/server-key.pem"
		--trusted-ca-file "$pki/ca.pem" --client-cert-auth)
	case $s in
	kvd-bolt) args+=(--backend bolt) ;;
	kvd-badger) args+=(--backend badger) ;;
	etcd) [ -n "$etcd_split" ] && args+=(--listen-client-http-urls "$scheme://127.0.0.1:$((port + 2))") ;;
	esac
	[ -n "$pprof_dir" ] && [ "$kind" = kvd ] && args+=(--enable-pprof)
	"${bin_of[$kind]}" "${args[@]}" >"$logf" 2>&1 &
	server_pid=$!
	local -a cflags
	read -ra cflags <<<"$(client_flags "$m")"
	local deadline=$((SECONDS + 30))
	while [ "$SECONDS" -lt "$deadline" ]; do
		if ! kill -0 "$server_pid" 2>/dev/null; then
			server_pid=""
			reason="at start, exited: $(tail -1 "$logf")"
			return 1
		fi
		if "$bench" "${cflags[@]}" --clients 1 --conns 1 --total 1 --dial-timeout 1s \
			--request-timeout 1s range --key bench/ready --consistency l >/dev/null 2>&1; then
			[ "$m" = auth ] || return 0
			if setup_auth "$logf"; then return 0; fi
			stop_server
			reason="auth setup failed: $(tail -1 "$work/etcdctl.log")"
			return 1
		fi
		sleep 0.5
	done
	stop_server
	reason="not serving after 30s: $(tail -1 "$logf")"
	return 1
}

# setup_auth: etcdctl's usual steps (root user with the root role; a role
# bench with readwrite on the benchmark prefixes; user bench with it; auth
# enable), then one authenticated put as bench to prove it works.
setup_auth() {
	local ctl=("$etcdctl" --endpoints "127.0.0.1:$port" --dial-timeout 5s --command-timeout 30s)
	{
		"${ctl[@]}" user add root --new-user-password "$root_pass" --interactive=false &&
			{ "${ctl[@]}" role add root || "${ctl[@]}" role get root; } &&
			"${ctl[@]}" user grant-role root root &&
			"${ctl[@]}" role add bench &&
			for p in "${perm_prefixes[@]}"; do
				"${ctl[@]}" role grant-permission bench readwrite "$p" --prefix || return 1
			done &&
			"${ctl[@]}" user add "$bench_user" --new-user-password "$bench_pass" --interactive=false &&
			"${ctl[@]}" user grant-role "$bench_user" bench &&
			"${ctl[@]}" auth enable &&
			"${ctl[@]}" --user "$bench_user:$bench_pass" put bench/ready x
	} >"$work/etcdctl.log" 2>&1
}

# jfield JSON NAME: a top-level or nested field of the tool's one-line JSON.
jfield() { sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p" <<<"$1"; }

# Per server, mode and workload: space-separated values, one per successful
# round; errs sums the failed requests; fail keeps the last failure.
declare -A rps p50 p99 p999 cpu errs fail reauths

run_workload() {
	local s=$1 m=$2 w=$3 r=$4 json rc=0
	local -a wargs cflags extra=()
	read -ra wargs <<<"$(workload_args "$w")"
	read -ra cflags <<<"$(client_flags "$m")"
	[ "$m" = auth ] && extra+=(--user "$bench_user:$bench_pass" --dial-timeout 60s)
	# Logins queue behind bcrypt: give them time rather than count timeouts.
	[ "$w" = auth ] && extra+=(--request-timeout 120s)
	if [ -n "$pprof_dir" ] && [ "${s%%-*}" = kvd ]; then
		local secs=${duration%s} scheme=http curlf=()
		[ "$m" = tls ] && scheme=https curlf=(--cacert "$pki/ca.pem" --cert "$pki/client.pem" --key "$pki/client-key.pem")
		mkdir -p "$pprof_dir"
		# Starts with the warm-up, so it ends about a second before measuring does.
		curl -s "${curlf[@]}" --max-time $((secs + 30)) -o "$pprof_dir/$s.$m.$w.r$r.pb.gz" \
			"$scheme://127.0.0.1:$port/debug/pprof/profile?seconds=$secs" &
		pprof_pid=$!
	fi
	json=$(timeout --foreground --kill-after=5 "$run_timeout" "$bench" "${cflags[@]}" "${extra[@]}" \
		--clients "$clients" --conns "$conns" --duration "$duration" --warmup "$warmup" --json --cpu-pid "$server_pid" \
		"${wargs[@]}" 2>"$work/run.err") || rc=$?
	if [ -n "$pprof_pid" ]; then
		wait "$pprof_pid" 2>/dev/null || true
		pprof_pid=""
	fi
	if ! kill -0 "$server_pid" 2>/dev/null; then
		reason="exited: $(tail -1 "$work/$s.$m.r$r.log")"
		fail[$s,$m,$w]="failed: $reason"
		return 1
	fi
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 2 ]; then
		fail[$s,$m,$w]="failed (exit $rc): $(tail -1 "$work/run.err")"
		return
	fi
	local n
	rps[$s,$m,$w]+="$(jfield "$json" rps) "
	p50[$s,$m,$w]+="$(jfield "$json" p50) "
	p99[$s,$m,$w]+="$(jfield "$json" p99) "
	p999[$s,$m,$w]+="$(jfield "$json" p99_9) "
	cpu[$s,$m,$w]+="$(jfield "$json" server_cpu_us_per_req) "
	n=$(jfield "$json" reauths)
	reauths[$s,$m,$w]=$((${reauths[$s,$m,$w]:-0} + ${n:-0}))
	n=$(jfield "$json" errors)
	errs[$s,$m,$w]=$((${errs[$s,$m,$w]:-0} + n))
	if [ "$n" != 0 ]; then
		log "$s $m $w: $n errors, first: $(jfield "$json" first_error)"
	fi
}

save_logs() {
	[ -n "$keep_logs" ] || return 0
	mkdir -p "$keep_logs"
	cp "$work/$1.$2.r$3.log" "$keep_logs/" 2>/dev/null || true
}

start=$(date +%s)
started_at=$(date -u '+%Y-%m-%d %H:%M UTC')
load_at_start=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo "?")
ns=${#server_list[@]} nm=${#mode_list[@]}
for ((r = 0; r < rounds; r++)); do
	for ((i = 0; i < ns; i++)); do
		s=${server_list[$(((i + r) % ns))]}
		for ((j = 0; j < nm; j++)); do
			m=${mode_list[$(((j + r) % nm))]}
			if skipped "$s" "$m"; then
				for w in $(mode_workloads "$m"); do fail[$s,$m,$w]="skipped"; done
				continue
			fi
			log "round $((r + 1))/$rounds, $s, $m: starting"
			if ! start_server "$s" "$m" "$r"; then
				log "$s $m: $reason"
				for w in $(mode_workloads "$m"); do fail[$s,$m,$w]="failed: $reason"; done
				save_logs "$s" "$m" "$r"
				rm -rf "${work:?}/$s.data"
				continue
			fi
			dead=""
			for w in $(mode_workloads "$m"); do
				if [ -n "$dead" ]; then
					fail[$s,$m,$w]="failed: $dead"
					continue
				fi
				log "round $((r + 1))/$rounds, $s, $m: $w"
				if ! run_workload "$s" "$m" "$w" "$r"; then
					dead=$reason
					log "$s $m: $reason"
				fi
			done
			stop_server
			save_logs "$s" "$m" "$r"
			rm -rf "${work:?}/$s.data"
		done
	done
done
log "done in $(($(date +%s) - start))s"

# median, spread, ratio
. "$root/scripts/lib/stats.sh"

# cost WITH WITHOUT: the throughput lost, (1 - WITH/WITHOUT) in percent.
cost() {
	if [ -z "$1" ] || [ -z "$2" ] || [ "$2" = 0 ]; then
		echo "n/a"
	else
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f%%", (1 - a / b) * 100 }'
	fi
}

# added WITH WITHOUT: (WITH/WITHOUT - 1) in percent.
added() {
	if [ -z "$1" ] || [ -z "$2" ] || [ "$2" = 0 ]; then
		echo "n/a"
	else
		awk -v a="$1" -v b="$2" 'BEGIN { printf "%+.1f%%", (a / b - 1) * 100 }'
	fi
}

tables() {
	local of_rounds=""
	[ "$rounds" -gt 1 ] && of_rounds=", medians of $rounds rounds (req/s: min–max in brackets)"
	echo "$clients clients over $conns connections, single member on loopback, $duration per workload after" \
		"$warmup warm-up$of_rounds; bcrypt cost 10; started $started_at;" \
		"$(nproc 2>/dev/null || echo "?") CPUs (load average at start $load_at_start), $(go env GOVERSION)," \
		"kvd ${kvd_rev:-$(git rev-parse --short HEAD 2>/dev/null || echo "?")${KVD_BIN:+ (KVD_BIN=$KVD_BIN)}}, etcd v3.7.3${etcd_split:+ (gRPC alone on its client URL: --listen-client-http-urls)}."
	echo
	echo "| server | mode | workload | req/s | p50 ms | p99 ms | p99.9 ms | server CPU µs/req | errors |"
	echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
	declare -A mrps mp99 mcpu
	local s m w k
	for s in "${server_list[@]}"; do
		for m in "${mode_list[@]}"; do
			for w in $(mode_workloads "$m"); do
				k=$s,$m,$w
				if [ -z "${rps[$k]:-}" ]; then
					echo "| $s | $(mode_label "$m") | $(workload_label "$w") | ${fail[$k]//|/-} | | | | | |"
					continue
				fi
				mrps[$k]=$(median "${rps[$k]}")
				mp99[$k]=$(median "${p99[$k]}")
				mcpu[$k]=$(median "${cpu[$k]}")
				local e=${errs[$k]}
				[ "${reauths[$k]:-0}" != 0 ] && e+=" (${reauths[$k]} re-logins)"
				printf '| %s | %s | %s | %.1f%s | %.2f | %.2f | %.2f | %.1f | %s |\n' "$s" "$(mode_label "$m")" \
					"$(workload_label "$w")" "${mrps[$k]}" "$(spread "${rps[$k]}")" \
					"$(median "${p50[$k]}")" "${mp99[$k]}" "$(median "${p999[$k]}")" "${mcpu[$k]:-0}" "$e"
			done
		done
	done
	local kvds=()
	for s in "${server_list[@]}"; do [ "$s" = etcd ] || kvds+=("$s"); done
	if want etcd && [ ${#kvds[@]} -gt 0 ]; then
		echo
		local head="| mode | workload |" sep="| --- | --- |"
		for s in "${kvds[@]}"; do
			head+=" $s/etcd req/s | $s/etcd p99 | $s/etcd CPU/req |"
			sep+=" ---: | ---: | ---: |"
		done
		echo "$head"
		echo "$sep"
		for m in "${mode_list[@]}"; do
			for w in $(mode_workloads "$m"); do
				local row="| $(mode_label "$m") | $(workload_label "$w") |"
				for s in "${kvds[@]}"; do
					row+=" $(ratio "${mrps[$s,$m,$w]:-}" "${mrps[etcd,$m,$w]:-}") | $(ratio "${mp99[$s,$m,$w]:-}" "${mp99[etcd,$m,$w]:-}") | $(ratio "${mcpu[$s,$m,$w]:-}" "${mcpu[etcd,$m,$w]:-}") |"
				done
				echo "$row"
			done
		done
	fi
	# Each server's own cost against its own auth-off rows: the throughput
	# lost, (1 - req/s / req/s auth off) in percent (negative: faster), and
	# the server CPU per request added, in percent.
	local others=()
	for m in "${mode_list[@]}"; do [ "$m" = plain ] || others+=("$m"); done
	if [[ " $modes " == *" plain "* ]] && [ ${#others[@]} -gt 0 ]; then
		echo
		local head="| server | workload |" sep="| --- | --- |"
		for m in "${others[@]}"; do
			head+=" $(mode_label "$m"): req/s lost | $(mode_label "$m"): CPU/req added |"
			sep+=" ---: | ---: |"
		done
		echo "$head"
		echo "$sep"
		for s in "${server_list[@]}"; do
			for w in $workloads; do
				local row="| $s | $(workload_label "$w") |"
				for m in "${others[@]}"; do
					row+=" $(cost "${mrps[$s,$m,$w]:-}" "${mrps[$s,plain,$w]:-}") | $(added "${mcpu[$s,$m,$w]:-}" "${mcpu[$s,plain,$w]:-}") |"
				done
				echo "$row"
			done
		done
	fi
}

if [ -n "$out" ]; then
	tables | tee "$out"
else
	tables
fi
