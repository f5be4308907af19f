#!/usr/bin/env bash
# Starts the private PostgreSQL cluster and the Tansu broker, creates the database and topic,
# and prints the connection settings. Idempotent: running services are left alone.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
mkdir -p "$LOG_DIR" "$RUN_DIR"

as_postgres() { if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
# The servers outlive this script: they must not inherit its caller's descriptors (a held flock
# would stay held; the pipe of a `$(...)` around this script would never reach end of file).
# Closes every descriptor above stderr, so it only runs in a subshell: `(detached ...)` or
# `detached exec ... &`, where `exec` makes the background job's pid the server's own.
detached() {
    local pid=$BASHPID fd n flags
    for fd in /proc/$pid/fd/*; do
        n=${fd##*/}
        # The listing's own descriptor is gone by now.
        [ "$n" -gt 2 ] && [ -e "$fd" ] || continue
        # Close-on-exec ones never reach the server, and among them are bash's saved copies of the
        # descriptors a redirection replaced (`detached ... >/dev/null` saves stdout): bash refuses
        # to close those ("11: Bad file descriptor", printed whenever stdout was a pipe).
        flags=$(sed -n 's/^flags:[[:space:]]*//p' "/proc/$pid/fdinfo/$n" 2>/dev/null) || true
        [ -n "$flags" ] && (((8#$flags & 8#2000000) != 0)) && continue
        eval "exec $n>&-"
    done
    "$@"
}

# PostgreSQL refuses to run as root: the cluster belongs to the postgres user.
if [ ! -s "$PG_DATA/PG_VERSION" ]; then
    log "initdb $PG_DATA"
    mkdir -p "$PG_DATA" "$PG_RUN"
    [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$PG_HOME"
    chmod 700 "$PG_DATA"
    as_postgres "$PG_BIN/initdb" -D "$PG_DATA" -U postgres -A trust -E UTF8 --locale=C.UTF-8 >/dev/null
    cat >> "$PG_DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PG_PORT
unix_socket_directories = '$PG_RUN'
# Each parallel test opens its own pools (the module phase runs ~650 tests at once).
max_connections = 1000
shared_buffers = 512MB
fsync = on
synchronous_commit = on
# A benchmark run writes ~0.5 GB of WAL in 15 s: with the 1 GB default a checkpoint lands in
# every run and shows up as the p99 tail.
max_wal_size = 4GB
checkpoint_timeout = 15min
CONF
fi
if ! as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1; then
    log "starting PostgreSQL on 127.0.0.1:$PG_PORT"
    (detached as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_HOME/postgresql.log" -w -t 60 start >/dev/null)
fi
psql_admin() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -v ON_ERROR_STOP=1 -qAt "$@"; }
# A cluster made by an earlier version of this script had 300: raised once, with a restart.
if [ "$(psql_admin -c "show max_connections")" -lt 1000 ]; then
    log "raising PostgreSQL's max_connections to 1000 (restart)"
    psql_admin -c "alter system set max_connections = 1000"
    (detached as_postgres "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_HOME/postgresql.log" -w -t 60 restart >/dev/null)
fi
if [ "$(psql_admin -c "select 1 from pg_roles where rolname='subs'")" != 1 ]; then
    psql_admin -c "create role subs login password 'subs' createdb"
fi
if [ "$(psql_admin -c "select 1 from pg_database where datname='subs'")" != 1 ]; then
    psql_admin -c "create database subs owner subs"
fi

if ! (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null; then
    log "starting Tansu on 127.0.0.1:$KAFKA_PORT"
    detached exec nohup "$(tansu_bin)" broker \
        --listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
        --advertised-listener-url "tcp://127.0.0.1:$KAFKA_PORT" \
        --storage-engine "memory://tansu/" >"$LOG_DIR/tansu.log" 2>&1 &
    echo $! > "$RUN_DIR/tansu.pid"  # the broker's own pid (exec), which stop.sh stops
    for _ in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$KAFKA_PORT") 2>/dev/null && break; sleep 0.1; done
fi
"$(tansu_bin)" topic create --broker "tcp://127.0.0.1:$KAFKA_PORT" \
    --partitions "$EVENT_TOPIC_PARTITIONS" "$EVENT_TOPIC" >/dev/null 2>&1 || true

cat <<SETTINGS
DATABASE_URL=$DATABASE_URL
KAFKA_BROKERS=$KAFKA_BROKERS
EVENT_TOPIC=$EVENT_TOPIC
EVENT_TOPIC_PARTITIONS=$EVENT_TOPIC_PARTITIONS
LD_LIBRARY_PATH=$LD_LIBRARY_PATH
SETTINGS
env | grep '^KAFKA_PROPERTY_' | sort || true
