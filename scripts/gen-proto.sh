#!/bin/sh
# Regenerates the Go code of proto/ (committed, so building kvd needs no
# protoc). Needs protoc (Debian: protobuf-compiler) and:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
#   go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
set -eu
cd "$(dirname "$0")/.."
protoc --proto_path=proto \
	--go_out=. --go_opt=module=github.com/kvd-dev/kvd \
	--go-grpc_out=. --go-grpc_opt=module=github.com/kvd-dev/kvd \
	authplugin/v1/authplugin.proto
