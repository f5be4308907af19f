#!/usr/bin/env bash
# Stops whatever start.sh and run.sh started; idempotent.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
for svc in ingress fulfillment tansu; do
    pidfile="$RUN_DIR/$svc.pid"
    [ -f "$pidfile" ] || continue
    pid=$(cat "$pidfile")
    # Ours only if it runs a binary of this checkout (a stale pid file may name someone else's process).
    exe=$(readlink "/proc/$pid/exe" 2>/dev/null || true)
    case "$exe" in
        "$REPO_DIR"/* | "$STATE_DIR"/*) ;;
        *) [ -z "$exe" ] || log "not stopping $svc: pid $pid runs $exe"; rm -f "$pidfile"; continue ;;
    esac
    if kill -0 "$pid" 2>/dev/null; then
        log "stopping $svc ($pid)"; kill -TERM "$pid" 2>/dev/null
        for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null
    fi
    rm -f "$pidfile"
done
if [ -s "$PG_DATA/PG_VERSION" ]; then
    if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast stop >/dev/null 2>&1
    else "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast stop >/dev/null 2>&1; fi
    log "PostgreSQL stopped"
fi
exit 0
