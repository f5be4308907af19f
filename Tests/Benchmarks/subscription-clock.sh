#!/usr/bin/env bash
# The clock job's rate (prints figures): 100,000 subscriptions due at once (half into billing
# retry, half expired), advanced by two runners against the local PostgreSQL, each row with its
# status history and outbound event; the ceiling is 30 s (deploy/CAPACITY.md).
#
#   Tests/Benchmarks/subscription-clock.sh
#   BENCH_CLOCK_ROWS=20000 BENCH_CLOCK_BATCH=2000 Tests/Benchmarks/subscription-clock.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/local/env.sh"
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"
bash "$LOCAL_DIR/start.sh" >/dev/null
cd "$REPO_DIR"
swift build --build-tests 2>&1 | quiet_build
log=$(mktemp)
trap 'rm -f "$log"' EXIT
SUBS_RUN_BENCHMARKS=1 swift test --skip-build --filter SubscriptionClockBenchmarkTests 2>&1 | grep -vE '^\{' | tee "$log"
echo
echo "== subscription clock benchmark: $(nproc) cores, PostgreSQL on the same machine =="
grep -E '^subscription_clock ' "$log"
awk '/^subscription_clock / { for (i = 1; i <= NF; i++) if ($i ~ /^seconds=/) { split($i, a, "="); s = a[2] } }
     END { if (s) printf "advanced in %.1f s (ceiling 30 s): %s\n", s, (s < 30 ? "within" : "OVER") }' "$log"
