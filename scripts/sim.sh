#!/usr/bin/env bash
# Runs the deterministic lease-protocol simulator (./sim).
#
#   SEED=n          replay seed n verbosely
#   SEEDS=n         otherwise, run n seeds (default 200)
#   FIRST=s         starting at seed s (default: the simulator's, 1)
#
# A failing run prints its seed; replay it with make sim SEED=<seed>.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ -n ${SEED:-} ]]; then
	exec go run ./sim -seed "$SEED" -v
fi
args=(-seeds "${SEEDS:-200}")
if [[ -n ${FIRST:-} ]]; then
	args+=(-first "$FIRST")
fi
exec go run ./sim "${args[@]}"
