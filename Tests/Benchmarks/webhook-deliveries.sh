#!/usr/bin/env bash
# Webhook delivery (prints figures): a release-built fulfillment process delivers a steady stream of
# outbound events, produced to its topic, to a local receiver; deliveries a second against the
# 1,000/s floor, and p50/p99 from an event's hand-over to the broker (just after its commit) to
# its arrival at the receiver, against 1 s.
#
#   Tests/Benchmarks/webhook-deliveries.sh
#   BENCH_OFFERED_RATE=2000 BENCH_SECONDS=20 Tests/Benchmarks/webhook-deliveries.sh   (default 1,200/s for 10 s)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/local/env.sh"
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"
bash "$LOCAL_DIR/install.sh"
bash "$LOCAL_DIR/start.sh" >/dev/null
cd "$REPO_DIR"
swift build --build-tests 2>&1 | quiet_build
# The service under test is a release build, as in production; the driver and receiver stay debug.
swift build -c release --product fulfillment 2>&1 | quiet_build
export SUBS_BIN_DIR="$(swift build -c release --show-bin-path)" TANSU_BIN="$(tansu_bin)" LOG_LEVEL=warning SUBS_RUN_BENCHMARKS=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
swift test --skip-build --filter WebhookBenchmarkTests 2>&1 | grep -vE '^\{' | tee "$log"

echo
echo "== webhook delivery benchmark: $(nproc) cores, PostgreSQL + broker + worker + receiver on one machine =="
grep -E '^webhook_deliveries' "$log" || true
awk '/^webhook_deliveries / { for (i = 1; i <= NF; i++) { split($i, a, "="); v[a[1]] = a[2] } }
     END { if (v["deliveries_per_second"]) printf "deliveries/s = %s (floor 1000: %s); p99 hand-over -> delivery = %s ms (target < 1000: %s)\n",
             v["deliveries_per_second"], (v["deliveries_per_second"] >= 1000 ? "ok" : "BELOW"), v["p99_ms"], (v["p99_ms"] < 1000 ? "ok" : "ABOVE") }' "$log"
