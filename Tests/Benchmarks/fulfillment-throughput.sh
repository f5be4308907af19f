#!/usr/bin/env bash
# Fulfillment throughput (prints figures): a backlog of real signed renewals drained by 1 and by 2
# release-built workers against the local PostgreSQL and broker, with the CPU each event costs the
# workers and PostgreSQL and the workers' peak RSS; pgbench's fulfillment-shaped ceiling on the same
# tables in the same run; then the latency from the webhook's 200 to the entitlement being visible
# through the REST API, with a real ingress and 2 workers at a steady offered rate.
#
#   Tests/Benchmarks/fulfillment-throughput.sh
#   BENCH_OFFERED_RATE=300 BENCH_SECONDS=20 Tests/Benchmarks/fulfillment-throughput.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/local/env.sh"
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"
bash "$LOCAL_DIR/install.sh"
bash "$LOCAL_DIR/start.sh" >/dev/null
cd "$REPO_DIR"
swift build --build-tests 2>&1 | quiet_build
# The services under test are release builds, as in production; the test driver stays a debug build.
for product in fulfillment ingress; do swift build -c release --product "$product" 2>&1 | quiet_build; done
export SUBS_BIN_DIR="$(swift build -c release --show-bin-path)" TANSU_BIN="$(tansu_bin)" LOG_LEVEL=warning SUBS_RUN_BENCHMARKS=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
swift test --skip-build --filter FulfillmentThroughputTests 2>&1 | grep -vE '^\{' | tee "$log"

echo
echo "== fulfillment benchmark: $(nproc) cores, PostgreSQL + broker + workers (+ ingress for latency) on one machine =="
grep -E '^fulfillment_' "$log" || true
awk '/^fulfillment_throughput workers=2 / { for (i = 1; i <= NF; i++) if ($i ~ /^events_per_second=/) { split($i, a, "="); e = a[2] } }
     /^fulfillment_pgbench_ceiling / { for (i = 1; i <= NF; i++) if ($i ~ /^tps=/) { split($i, a, "="); t = a[2] } }
     END { if (e && t) printf "2 workers / pgbench fulfillment-shaped ceiling = %d / %d = %.0f%% (target >= 80%%)\n", e, t, 100 * e / t }' "$log"
