#!/usr/bin/env bash
# The demo. The real one (a manager, a pool of backends behind fuge-proxy and
# Envoy) arrives with the manager service and the data plane; until then it
# shows the lease protocol itself, in the deterministic simulator.
set -euo pipefail
cd "$(dirname "$0")/.."

cat <<'MSG'
demo: the manager service and the data plane have not landed yet, so this demo
shows the lease protocol itself: the pure cores of one manager, its owners and
its lookups, in the deterministic simulator. First one schedule with its
faults as they happen (crashes, restarts, pauses longer than a lease,
partitions, joins, leaves, drains, over links that drop, duplicate and reorder),
then 100 schedules checked at every event for the single-copy guarantee, the
loss-notification bound and liveness.

MSG
go run ./sim -seed 1 -v
echo
exec go run ./sim -seeds 100
