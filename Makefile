# The test command of the README. The unit suite runs with the race detector;
# the e2e module (real kvd, etcd and etcdctl processes) runs after it.
GO ?= go

.PHONY: all test tidy unit e2e build bench plots fuzz fuzz-short robustness

# make alone builds kvd and the auth plugins into bin/.
all: build

test: tidy unit fuzz-short e2e

# go.mod and go.sum of both modules must be what go mod tidy makes of them
# (every dependency the code imports listed as direct, nothing unused).
tidy:
	$(GO) mod tidy -diff
	cd e2e && $(GO) mod tidy -diff

unit:
	$(GO) vet ./...
	$(GO) vet -tags failpoints ./...
	$(GO) test -race -timeout 15m ./...
	$(GO) test -tags failpoints ./pkg/failpoint

# Fuzz targets (func FuzzXxx under pkg/): the unit run replays their seed
# corpora (testdata/fuzz and f.Add); fuzz-short also mutates for
# FUZZTIME_SHORT each (part of make test), fuzz for FUZZTIME each, one target
# after the other with one worker. FUZZ picks targets: a grep -E pattern over
# "path/file_test.go:FuzzXxx".
# See docs/reliability.md.
FUZZTIME ?= 60s
FUZZTIME_SHORT ?= 2s
FUZZ ?= .

fuzz:
	GO=$(GO) ./scripts/fuzz.sh $(FUZZTIME) '$(FUZZ)'

fuzz-short:
	GO=$(GO) FUZZMINTIME=1s ./scripts/fuzz.sh $(FUZZTIME_SHORT) '$(FUZZ)'

# -count=1: the e2e tests build kvd from the working tree, which Go's test
# cache does not see; a cached pass would hide a change to kvd.
e2e:
	cd e2e && $(GO) test -count=1 -timeout 30m ./...

# TestLinearizability (e2e/linearizability_test.go) over ROBUSTNESS_SEEDS
# fresh random seeds on each engine, or over the seeds listed in ROBUSTNESS_SEED_LIST
# (e.g. make robustness ROBUSTNESS_SEED_LIST="17 42"): kill -9, leader partitions, pauses
# and compactions, porcupine and the watch guarantee checks. About 15 s per
# run; not part of make test (which runs one random seed per engine).
# See docs/reliability.md, "Robustness runs".
ROBUSTNESS_SEEDS ?= 20
ROBUSTNESS_SEED_LIST ?=

robustness:
	GO=$(GO) ./scripts/robustness.sh $(ROBUSTNESS_SEEDS) $(ROBUSTNESS_SEED_LIST)

build:
	$(GO) build -o bin/kvd ./cmd/kvd
	$(GO) build -o bin/kvd-auth-htpasswd ./plugins/htpasswd
	$(GO) build -o bin/kvd-auth-oidc ./plugins/oidc
	$(GO) build -o bin/kvd-auth-prefix ./plugins/prefix

bench:
	./scripts/bench.sh

# The SVG plots in docs/img/ from the runs in docs/bench/ (scripts/bench.sh
# --json FILE, and the data-size series of scripts/bench-scale.sh --json FILE,
# drawn as line charts: benchplot tells the two apart by the schema); see
# docs/benchmarks.md, "Current summary".
plots:
	$(GO) run ./tools/benchplot -in docs/bench/single-member.json -out docs/img -prefix bench
	$(GO) run ./tools/benchplot -in docs/bench/three-member.json -out docs/img -prefix bench-3-member
	$(GO) run ./tools/benchplot -in docs/bench/scale.json -out docs/img -prefix scale
