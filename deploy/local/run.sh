#!/usr/bin/env bash
# Sets up and runs the pair locally: installs what is missing, starts PostgreSQL and the broker,
# builds the services in release mode, starts one ingress and one fulfillment worker, and runs
# the demo against them. Stop everything with deploy/local/stop.sh.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

bash "$LOCAL_DIR/install.sh"
bash "$LOCAL_DIR/start.sh" >/dev/null
cd "$REPO_DIR"
log "building release binaries"
swift build -c release 2>&1 | quiet_build
BIN="$(swift build -c release --show-bin-path)"

export INGRESS_HTTP_PORT="${INGRESS_HTTP_PORT:-8080}"
export LOG_LEVEL="${LOG_LEVEL:-info}"
start_service() {  # name binary
    local pidfile="$RUN_DIR/$1.pid"
    if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        log "$1 already running ($(cat "$pidfile"))"; return
    fi
    nohup "$2" >"$LOG_DIR/$1.log" 2>&1 &
    echo $! >"$pidfile"
    log "$1 started (pid $!, log $LOG_DIR/$1.log)"
}
start_service ingress "$BIN/ingress"
start_service fulfillment "$BIN/fulfillment"

base="http://127.0.0.1:$INGRESS_HTTP_PORT"
for _ in $(seq 1 150); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "$base/readyz" >/dev/null || { log "ingress did not become ready; see $LOG_DIR/ingress.log"; exit 1; }
# The ingress has migrated the schema by now. Idempotent: an unchanged catalogue writes nothing.
log "applying the demo catalogue"
"$BIN/subsctl" catalog apply --operator deploy/local --reason "demo catalogue" "$LOCAL_DIR/catalog.json" >&2

echo
echo "== the pair is running =="
echo "ingress      $base   (log: $LOG_DIR/ingress.log)"
echo "fulfillment  (log: $LOG_DIR/fulfillment.log)"
echo "readiness:   $(curl -fsS "$base/readyz")"
echo
echo "Stop everything with: bash deploy/local/stop.sh"
