#!/usr/bin/env bash
# Runs go vet and staticcheck over the module. staticcheck is installed into
# ./bin at a pinned version (STATICCHECK_VERSION) the first time, and again
# whenever the installed binary reports a different version.
set -euo pipefail
cd "$(dirname "$0")/.."

version=${STATICCHECK_VERSION:-v0.8.2}
staticcheck=./bin/staticcheck

if [[ ! -x $staticcheck ]] || ! "$staticcheck" -version 2>/dev/null | grep -qF "(${version#v})"; then
	echo "vet: installing staticcheck $version into ./bin"
	GOBIN="$PWD/bin" go install "honnef.co/go/tools/cmd/staticcheck@$version"
fi

go vet ./...
"$staticcheck" ./...
