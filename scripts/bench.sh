#!/usr/bin/env bash
# Runs bench/proxybench (make bench): fuge-proxy beside HAProxy, nginx and
# round-robin balancers on this machine, written to
# bench/results/<date>/report.md with PNG plots, then bench/balance (make
# bench-balance) and bench/ratelimit (make bench-ratelimit), whose sections
# it appends to that report. QUICK=1 runs one pair of each with short runs,
# no managerscale, no balancing or rate-limit run (under 3 minutes), into
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

# The admission check's Go benchmarks (issue 16), in both forms.
admission_benchmarks() {
	go test -run '^$' -bench 'BenchmarkAllow|BenchmarkRateLimitAdmit|BenchmarkProxyRateLimit' -benchmem ./ratelimit ./proxy | grep -E '^Benchmark'
}

# QUICK is a smoke run of the proxies, under 3 minutes: the balancing and
# rate-limit runs on real processes (about 5 minutes and 2 minutes, and
# shorter runs of them measure nothing: the balancing policy does not
# converge in 80 s) are left to the full run, make bench-balance and
# make bench-ratelimit; the admission check's Go benchmarks still run.
if ((${#args[@]})); then
	{
		echo
		echo "## Load balancing and fleet-wide rate limits"
		echo
		echo "Not run by the quick form (make bench QUICK=1); make bench, make bench-balance and make bench-ratelimit run them."
		echo
		echo '```'
		admission_benchmarks
		echo '```'
	} | tee -a "${report:-/dev/null}"
	exit 0
fi

# The load-balancing section (bench/balance, as make bench-balance runs it),
# appended to the same report.
go run ./bench/balance -out "$(dirname "$report")/balance" -section "$report"

# Fleet-wide rate limits (issue 16): the admission check's Go benchmarks
# and bench/ratelimit's run on real processes, as a section of the report.
{
	echo
	echo "## Fleet-wide rate limits (make bench-ratelimit)"
	echo
	echo '```'
	admission_benchmarks
	go run ./bench/ratelimit 2>/dev/null | grep -E '^(ratelimit|report|plots):'
	echo '```'
} | tee -a "${report:-/dev/null}"
