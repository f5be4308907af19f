#!/usr/bin/env bash
# Fail-over of the worker pool (prints figures): three release-built workers with the shipped
# settings (and deploy/local's broker tuning) apply a steady stream of renewals over all 12
# partitions; one is killed with `kill -9`, then (second case) killed and restarted at once under
# the same name. Prints, from the applied events' times: seconds from the kill until the dead
# worker's partitions had events applied again (first and last of them), and the longest pause
# of the other partitions after the kill (against the same figure before it).
#
#   Tests/Benchmarks/failover.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/local/env.sh"
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"
bash "$LOCAL_DIR/install.sh"
bash "$LOCAL_DIR/start.sh" >/dev/null
cd "$REPO_DIR"
swift build --build-tests 2>&1 | quiet_build
# The workers under test are release builds, as in production; the test driver stays a debug build.
swift build -c release --product fulfillment 2>&1 | quiet_build
export SUBS_BIN_DIR="$(swift build -c release --show-bin-path)" TANSU_BIN="$(tansu_bin)" LOG_LEVEL=warning SUBS_RUN_BENCHMARKS=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
swift test --skip-build --filter FailoverBenchmarkTests 2>&1 | grep -vE '^\{' | tee "$log"

echo
echo "== fail-over: $(nproc) cores, PostgreSQL + broker + 3 workers on one machine; session ${KAFKA_PROPERTY_SESSION_TIMEOUT_MS:-10000} ms, lease ${FULFILLMENT_LEASE_SECONDS:-10} s =="
grep -E '^failover_' "$log" || true
