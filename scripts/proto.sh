#!/usr/bin/env bash
# Regenerates api/fugev1 from proto/. Installs protoc from Debian and the Go
# plugins into ./bin at pinned versions when they are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v protoc >/dev/null; then
	if [ "$(id -u)" = 0 ]; then apt-get update -qq && apt-get install -y -qq protobuf-compiler; else sudo apt-get update -qq && sudo apt-get install -y -qq protobuf-compiler; fi
fi
export GOBIN="$PWD/bin"
[ -x bin/protoc-gen-go ] || go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
[ -x bin/protoc-gen-go-grpc ] || go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
PATH="$PWD/bin:$PATH" protoc -I proto \
	--go_out=. --go_opt=module=github.com/fuge-project/fuge \
	--go-grpc_out=. --go-grpc_opt=module=github.com/fuge-project/fuge \
	proto/fuge/v1/fuge.proto proto/fuge/v1/ratelimit.proto
echo "generated api/fugev1"
