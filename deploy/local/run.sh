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

# --- Local secrets and the demo's simulated Apple -----------------------------------------------
# Created once under .local/secrets (0700, files 0600) and reused, so restarts keep reading what
# earlier runs stored. Values are never printed. The demo signer is trusted only because this
# local mode sets APPLE_IAP_ALLOW_TEST_ROOTS=true; a real deployment points at Apple's roots.
SECRETS_DIR="$STATE_DIR/secrets"
SIGNER_DIR="$SECRETS_DIR/demo-signer"
SECRETS_FILE="$SECRETS_DIR/local.env"
(
    umask 077
    mkdir -p "$SECRETS_DIR" && chmod 700 "$SECRETS_DIR"
    touch "$SECRETS_FILE" && chmod 600 "$SECRETS_FILE"
    add_secret() {  # name value: kept if the file already has one
        grep -q "^$1=" "$SECRETS_FILE" || { printf "%s='%s'\n" "$1" "$2" >>"$SECRETS_FILE"; log "created local secret $1"; }
    }
    add_secret PAYLOAD_ENCRYPTION_KEYS "local1:$(openssl rand -base64 32)"
    add_secret CURSOR_SIGNING_KEY "$(openssl rand -base64 32)"
    add_secret USER_TOKEN_HS256_SECRET "$(openssl rand -base64 32)"
)
set -a; source "$SECRETS_FILE"; set +a
APPLE_ROOT="$("$BIN/subsctl" demo-signer init --dir "$SIGNER_DIR")"
export APPLE_IAP_ENV=Sandbox APPLE_IAP_BUNDLE_ID=com.example.subscriptions
export APPLE_IAP_ROOT_CERTS="$APPLE_ROOT" APPLE_IAP_ALLOW_TEST_ROOTS=true
# ------------------------------------------------------------------------------------------------

export INGRESS_HTTP_PORT="${INGRESS_HTTP_PORT:-8080}"
# The console is reached over plain http here, and not every browser keeps `Secure` cookies from it.
export ADMIN_COOKIE_INSECURE="${ADMIN_COOKIE_INSECURE:-true}"
export LOG_LEVEL="${LOG_LEVEL:-info}"
start_service() {  # name binary
    local pidfile="$RUN_DIR/$1.pid" pid exe
    pid=$(cat "$pidfile" 2>/dev/null || true)
    # Ours only if it runs our binary (a stale pid file may name someone else's process).
    exe=$(readlink "/proc/${pid:-0}/exe" 2>/dev/null || true)
    if [ -n "$pid" ] && [ "${exe% (deleted)}" = "$(readlink -f "$2")" ]; then
        if [ "$exe" != "${exe% (deleted)}" ]; then
            log "$1 already running ($pid) from an earlier build: bash deploy/local/stop.sh and run again to use the new one"
        else
            log "$1 already running ($pid)"
        fi
        return
    fi
    nohup "$2" >"$LOG_DIR/$1.log" 2>&1 &
    echo $! >"$pidfile"
    log "$1 started (pid $!, log $LOG_DIR/$1.log)"
}
# The schema is migrated here, in one place, as a deployment's set-up step does; the services wait
# for it (MIGRATE_ON_START=false) instead of migrating at start.
log "migrating the schema"
"$BIN/subsctl" migrate >&2
start_service ingress "$BIN/ingress"
start_service fulfillment "$BIN/fulfillment"

base="http://127.0.0.1:$INGRESS_HTTP_PORT"
for _ in $(seq 1 150); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "$base/readyz" >/dev/null || { log "ingress did not become ready; see $LOG_DIR/ingress.log"; exit 1; }
# A new worker needs a few seconds to join the consumer group: the demo's first upload would
# otherwise outwait the ingress's bounded wait (FULFILLMENT_PENDING). Its log says when it is in.
for _ in $(seq 1 150); do
    grep -q 'partition assignment changed' "$LOG_DIR/fulfillment.log" 2>/dev/null && break
    sleep 0.2
done
# Idempotent: an unchanged catalogue writes nothing.
log "applying the demo catalogue"
"$BIN/subsctl" catalog apply --operator deploy/local --reason "demo catalogue" "$LOCAL_DIR/catalog.json" >&2

echo
echo "== the pair is running =="
echo "ingress      $base   (log: $LOG_DIR/ingress.log)"
echo "fulfillment  (log: $LOG_DIR/fulfillment.log)"
echo "readiness:   $(curl -fsS "$base/readyz")"

# --- The demo: a purchase, a renewal, a plan change and a refund through HTTP -------------------
echo
"$BIN/subsctl" demo --ingress "$base" --signer-dir "$SIGNER_DIR"
# ------------------------------------------------------------------------------------------------

echo
echo "Stop everything with: bash deploy/local/stop.sh"
