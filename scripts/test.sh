#!/usr/bin/env bash
# Runs every test in the module once, with the race detector.
#
# The race detector links a C runtime, so it needs cgo and a C compiler. Go
# turns cgo off when it finds no C compiler; then the tests still run, without
# -race, and a warning says so. The go test output is left untouched so that CI
# can read its closing lines.
set -euo pipefail
cd "$(dirname "$0")/.."

race=(-race)
if [[ $(go env CGO_ENABLED) != 1 ]]; then
	echo 'test: WARNING: cgo is off (no C compiler?), so the race detector is unavailable; running without -race' >&2
	race=()
fi
exec go test "${race[@]}" -count=1 ./...
