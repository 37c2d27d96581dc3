#!/usr/bin/env bash
# Runs bench/proxybench (make bench): fuge-proxy beside HAProxy, nginx and
# round-robin balancers on this machine, written to
# bench/results/<date>/report.md with PNG plots, then bench/balance (make
# bench-balance), whose section it appends to that report. QUICK=1 runs one pair of
# each with short runs and no managerscale (under 3 minutes), into
# bench/results/<date>/quick/. Installs haproxy, nginx-light and wrk from
# Debian when missing (taskset comes with util-linux). Extra arguments go to
# proxybench (-work DIR keeps the logs and configurations).
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
for pair in haproxy:haproxy nginx:nginx-light wrk:wrk taskset:util-linux; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || need+=("${pair#*:}")
done
if ((${#need[@]})); then
	sudo=""
	[ "$(id -u)" = 0 ] || sudo=sudo
	echo "bench.sh: installing ${need[*]}" >&2
	$sudo apt-get update -qq >&2
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >&2
fi

args=()
case "${QUICK:-}" in
"" | 0 | false | no) ;;
*) args+=(-quick) ;;
esac
log=$(mktemp)
trap 'rm -f "$log"' EXIT
go run ./bench/proxybench "${args[@]}" "$@" | tee "$log"
report=$(sed -n 's/^report: \(.*\) took .*/\1/p' "$log" | tail -1)

# The load-balancing section (bench/balance, as make bench-balance runs it,
# shorter with QUICK), appended to the same report.
balance=()
if ((${#args[@]})); then
	balance+=(-duration 80s -converge 30s -interval 8s)
fi
go run ./bench/balance "${balance[@]}" -out "$(dirname "$report")/balance" -section "$report"

# Fleet-wide rate limits (issue 16): the admission check's Go benchmarks
# and bench/ratelimit's run on real processes, as a section of the report.
rl_args=()
((${#args[@]})) && rl_args+=(-quick)
{
	echo
	echo "## Fleet-wide rate limits (make bench-ratelimit)"
	echo
	echo '```'
	go test -run '^$' -bench 'BenchmarkAllow|BenchmarkRateLimitAdmit|BenchmarkProxyRateLimit' -benchmem ./ratelimit ./proxy | grep -E '^Benchmark'
	go run ./bench/ratelimit "${rl_args[@]}" 2>/dev/null | grep -E '^(ratelimit|report|plots):'
	echo '```'
} | tee -a "${report:-/dev/null}"
