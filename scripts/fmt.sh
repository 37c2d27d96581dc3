#!/usr/bin/env bash
# Fails, listing the files, if any Go file in the repository (outside testdata,
# vendor and ./bin) is not gofmt-formatted. Fix them with gofmt -w.
set -euo pipefail
cd "$(dirname "$0")/.."

unformatted=$(
	find . \( -name .git -o -name testdata -o -name vendor -o -path ./bin \) -prune \
		-o -name '*.go' -type f -print0 |
		xargs -0 -r gofmt -l
)
if [[ -n $unformatted ]]; then
	echo 'fmt: these files are not gofmt-formatted (run gofmt -w on them):' >&2
	echo "$unformatted" >&2
	exit 1
fi
