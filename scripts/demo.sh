#!/usr/bin/env bash
# The demo. The real one (a manager, a pool of backends behind fuge-proxy and
# Envoy) arrives with the manager service and the data plane; until then it
# runs the lease-protocol simulator.
set -euo pipefail
cd "$(dirname "$0")/.."

cat <<'MSG'
demo: the manager service and the data plane (fuge-proxy, Envoy over xDS) have not
landed yet. Until the manager service lands, the demo runs the protocol simulator
on an embedded single-node default: the pure lease cores of one manager, its
owners and lookups, through 20 seeded schedules of dropped, duplicated and
reordered messages, pauses and clock-rate skew.
MSG
exec go run ./sim -seeds 20 -v=false
