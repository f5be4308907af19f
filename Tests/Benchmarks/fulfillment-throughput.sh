#!/usr/bin/env bash
# Fulfillment throughput (prints figures): a backlog of real signed renewals drained by 1 and by 2
# workers against the local PostgreSQL and broker, next to pgbench's fulfillment-shaped ceiling.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/local/env.sh"
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"
bash "$LOCAL_DIR/install.sh"
bash "$LOCAL_DIR/start.sh" >/dev/null
cd "$REPO_DIR"
swift build --build-tests 2>&1 | quiet_build
export SUBS_BIN_DIR="$(swift build --show-bin-path)" TANSU_BIN="$(tansu_bin)" LOG_LEVEL=warning SUBS_RUN_BENCHMARKS=1
swift test --skip-build --filter FulfillmentThroughputTests 2>&1 | grep -vE '^\{'
