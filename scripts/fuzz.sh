#!/usr/bin/env bash
# Runs every fuzz target in the module for FUZZTIME each (default 60s).
#
# go test -fuzz takes one target in one package at a time, so the targets are
# discovered first with go test -list, package by package. New failing inputs
# are written to the package's testdata/fuzz/<target>/ and should be committed.
set -euo pipefail
cd "$(dirname "$0")/.."

fuzztime=${FUZZTIME:-60s}
ran=0
for pkg in $(go list ./...); do
	listing=$(go test -list '^Fuzz' "$pkg")
	for target in $(grep -E '^Fuzz[[:alnum:]_]*$' <<<"$listing" || true); do
		echo "fuzz: $pkg $target for $fuzztime"
		go test -run '^$' -fuzz "^$target\$" -fuzztime "$fuzztime" "$pkg"
		ran=$((ran + 1))
	done
done
echo "fuzz: ran $ran target(s) for $fuzztime each"
