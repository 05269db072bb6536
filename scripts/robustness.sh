#!/bin/sh
# robustness.sh N [SEED...]: runs TestLinearizability (e2e/linearizability_test.go:
# 3 members, 8 clients and a txn writer, a seeded schedule of kill -9, leader
# partitions, SIGSTOP pauses and compactions, porcupine and the watch checks)
# once per seed on each engine, seed after seed. Without SEEDs, N fresh random
# seeds. Prints each run and a summary line; logs of failed runs are kept.
# Exit status 1 if any run failed. See docs/reliability.md, "Robustness runs".
set -u
GO=${GO:-go}
n=${1:-20}
shift 2>/dev/null || true
seeds="$*"
if [ -z "$seeds" ]; then
	i=0
	while [ "$i" -lt "$n" ]; do
		seeds="$seeds $(od -An -N4 -tu4 /dev/urandom | tr -d ' ')"
		i=$((i + 1))
	done
fi
engines=${ROBUSTNESS_ENGINES:-bolt badger}

root=$(cd "$(dirname "$0")/.." && pwd)
logs=$(mktemp -d "${TMPDIR:-/tmp}/kvd-robustness-XXXXXX")
bin="$logs/e2e.test"
(cd "$root/e2e" && $GO test -c -o "$bin" .) || exit 2

runs=0
failures=0
failed=""
total_start=$(date +%s)
for seed in $seeds; do
	runs=$((runs + 1))
	for engine in $engines; do
		log="$logs/$seed-$engine.log"
		start=$(date +%s)
		if (cd "$root/e2e" && KVD_E2E_ROBUSTNESS_SEED=$seed "$bin" -test.run "^TestLinearizability\$/^$engine\$" \
			-test.count=1 -test.timeout=10m -test.v >"$log" 2>&1); then
			echo "seed $seed $engine: ok ($(($(date +%s) - start))s)"
			rm -f "$log"
		else
			failures=$((failures + 1))
			failed="$failed $seed/$engine"
			echo "seed $seed $engine: FAIL ($(($(date +%s) - start))s), log $log"
			grep -E '^\s+linearizability_test.go|^\s+(---|\.\.\.)|watch |not linearizable' "$log" | head -20
		fi
	done
done
echo "$runs runs per engine ($engines), $failures failures${failed:+ (seeds$failed)}, $(($(date +%s) - total_start))s"
rm -f "$bin"
[ "$failures" -eq 0 ] || exit 1
rmdir "$logs" 2>/dev/null
exit 0
