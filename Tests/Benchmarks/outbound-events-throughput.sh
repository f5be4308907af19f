#!/usr/bin/env bash
# Fulfillment throughput with outbound events off and on (prints figures): the backlog drain of
# fulfillment-throughput.sh (1 and 2 release-built workers, the same 3,000 renewals) run with
# OUTBOUND_EVENTS_ENABLED=false, then true (events written in the apply's statement and published
# to OUTBOUND_EVENT_TOPIC by the relay while the workers drain), alternating BENCH_ROUNDS times; the
# ratio of the medians against the 0.85 floor.
#
#   Tests/Benchmarks/outbound-events-throughput.sh
#   BENCH_ROUNDS=3 Tests/Benchmarks/outbound-events-throughput.sh
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/../../deploy/local/env.sh"
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"
bash "$LOCAL_DIR/install.sh"
bash "$LOCAL_DIR/start.sh" >/dev/null
cd "$REPO_DIR"
swift build --build-tests 2>&1 | quiet_build
swift build -c release --product fulfillment 2>&1 | quiet_build
export SUBS_BIN_DIR="$(swift build -c release --show-bin-path)" TANSU_BIN="$(tansu_bin)" LOG_LEVEL=warning SUBS_RUN_BENCHMARKS=1
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for round in $(seq "${BENCH_ROUNDS:-1}"); do
    for events in false true; do
        BENCH_OUTBOUND_EVENTS=$events swift test --skip-build --filter 'FulfillmentThroughputTests/drainsABacklogOfRenewals' 2>&1 \
            | grep -vE '^\{' | tee -a "$log"
    done
done

echo
echo "== outbound events: $(nproc) cores, PostgreSQL + broker + workers on one machine =="
grep -E '^fulfillment_throughput ' "$log" | sed -E 's/ (worker_peak|rows_written)[^ ]*//g' || true
awk '/^fulfillment_throughput / {
       w = ""; e = ""; o = ""
       for (i = 1; i <= NF; i++) {
         split($i, a, "=")
         if (a[1] == "workers") w = a[2]; else if (a[1] == "events_per_second") e = a[2]; else if (a[1] == "outbound_events") o = a[2]
       }
       n[w, o]++; v[w, o, n[w, o]] = e; ws[w] = 1
     }
     function median(w, o,   k, m, i, j, t, x) {
       m = n[w, o]; for (i = 1; i <= m; i++) x[i] = v[w, o, i]
       for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (x[j] < x[i]) { t = x[i]; x[i] = x[j]; x[j] = t }
       return m % 2 ? x[(m + 1) / 2] : (x[m / 2] + x[m / 2 + 1]) / 2
     }
     END {
       for (w in ws) if (n[w, "off"] && n[w, "on"]) {
         off = median(w, "off"); on = median(w, "on"); ratio = (on + 0) / (off + 0)
         verdict = "NOT met"; if (ratio >= 0.85) verdict = "met"
         printf "workers=%s: on / off = %d / %d = %.2f (floor 0.85: %s)\n", w, on, off, ratio, verdict
       }
     }' "$log"
