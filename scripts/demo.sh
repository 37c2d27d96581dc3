#!/usr/bin/env bash
# The demo: builds fuge-manager, fuge-proxy, the presence example server,
# fugectl and the demo driver into a temporary directory, then runs the
# driver, which makes a development CA and every process's certificate with
# fugectl certs init (mutual TLS on every manager port, nothing to set up),
# starts a manager, three presence servers and fuge-proxy on 127.0.0.1 with
# --tls-dir, drives load through the proxy, kills a server, starts a fourth,
# checks every read, and stops everything it started. Its exit status is the
# verdict. Extra arguments go to the driver (go run ./examples/demo -h lists
# them; --insecure runs without TLS).
set -euo pipefail
cd "$(dirname "$0")/.."

bin="$(mktemp -d "${TMPDIR:-/tmp}/fuge-demo-bin.XXXXXX")"
trap 'rm -rf "$bin"' EXIT

echo "building into $bin ..."
go build -o "$bin/" ./cmd/fuge-manager ./cmd/fuge-proxy ./cmd/fugectl ./examples/presence/cmd/presence-server ./examples/demo
echo
"$bin/demo" --bin "$bin" "$@"
