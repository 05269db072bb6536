# The test command of the README. The unit suite runs with the race detector;
# the e2e module (real kvd, etcd and etcdctl processes) runs after it.
GO ?= go

.PHONY: all test unit e2e build bench

# make alone builds kvd and the auth plugins into bin/.
all: build

test: unit e2e

unit:
	$(GO) vet ./...
	$(GO) test -race -timeout 15m ./...

# -count=1: the e2e tests build kvd from the working tree, which Go's test
# cache does not see; a cached pass would hide a change to kvd.
e2e:
	cd e2e && $(GO) test -count=1 -timeout 30m ./...

build:
	$(GO) build -o bin/kvd ./cmd/kvd
	$(GO) build -o bin/kvd-auth-htpasswd ./plugins/htpasswd
	$(GO) build -o bin/kvd-auth-oidc ./plugins/oidc
	$(GO) build -o bin/kvd-auth-prefix ./plugins/prefix

bench:
	./scripts/bench.sh
