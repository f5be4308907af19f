#!/usr/bin/env bash
# The ingress alone on this machine, with PostgreSQL and the broker co-located (issue 4): Apple
# notifications accepted per second (verify + group commit + publish) with wrk posting distinct
# pre-signed bodies, p50/p99, a row count proving every 200 is durable, the ingress's peak RSS;
# pgbench one-row inserts in the same run (the one-row-per-commit ceiling); a client read
# endpoint's requests per second. Prints figures; it is not a test and asserts nothing.
#
#   Tests/Benchmarks/ingress-notifications.sh
#   BENCH_NOTIFICATIONS=150000 DURATION=15s CONNECTIONS=64 BENCH_PORT=18090 BENCH_PERF=1 Tests/Benchmarks/ingress-notifications.sh
#   BENCH_READS=0 Tests/Benchmarks/ingress-notifications.sh   # skips the read endpoints (a shorter run)
#   BENCH_SUSTAINED=0 Tests/Benchmarks/ingress-notifications.sh   # skips the sustained-rate steps
#
# The sustained rate (issue 17): after wrk's saturation run, BenchLoad offers notifications at
# constant rates, open loop (each request due at its time, its latency counted from then), in
# 5-second steps up from BENCH_SUSTAINED_START by BENCH_SUSTAINED_STEP per second, then holds the
# last passing rate 30 s (lowering it by a tenth until a hold passes): the highest rate held with
# p99 < 50 ms and every answer 200, as a ratio to pgbench's one-row inserts (target >= 0.5).
#
# BENCH_PERF=1 also records the whole machine with perf (call graphs) during the notification run
# and prints where the CPU went: by process, then inside the ingress by function (inclusive);
# BENCH_PERF_KEEP=DIR keeps the recording there.
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/local/env.sh
source Tests/Benchmarks/bench-helpers.sh
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

NOTIFICATIONS=${BENCH_NOTIFICATIONS:-120000}
WARMUP_NOTIFICATIONS=${BENCH_WARMUP_NOTIFICATIONS:-10000}
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=2
PORT=${BENCH_PORT:-18090}
PGBENCH_PAYLOAD_BYTES=${PGBENCH_PAYLOAD_BYTES:-6144}
PGBENCH_CLIENTS=${PGBENCH_CLIENTS:-8}
PGBENCH_SECONDS=${PGBENCH_SECONDS:-15}
BUNDLE_ID=com.example.subscriptions
NOTIFICATION_PATH=/api/v1/iap/apple/notifications/sandbox
base="http://127.0.0.1:$PORT"
# Metrics live on the internal listener, one port up.
internal="http://127.0.0.1:$((PORT + 1))"

bench_scratch ingress
echo "building ingress and subsctl (release)..."
for product in ingress subsctl BenchLoad; do
    swift build -c release --product "$product" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
done
bin="$(swift build -c release --show-bin-path)"

"$bin/subsctl" demo-signer init --dir "$work/signer" >/dev/null
echo "signing $WARMUP_NOTIFICATIONS + $NOTIFICATIONS distinct notifications..."
"$bin/subsctl" bench sign-notifications --signer-dir "$work/signer" --count "$WARMUP_NOTIFICATIONS" --out "$work/warmup.jsonl" >/dev/null
body_bytes=$("$bin/subsctl" bench sign-notifications --signer-dir "$work/signer" --count "$NOTIFICATIONS" --out "$work/bodies.jsonl" \
    | sed -n 's/^average_body_bytes=//p')
SUSTAINED=${BENCH_SUSTAINED:-1}
if [ "$SUSTAINED" = 1 ]; then
    echo "signing ${BENCH_SUSTAINED_BODIES:=200000} more for the sustained-rate steps..."
    "$bin/subsctl" bench sign-notifications --signer-dir "$work/signer" --count "$BENCH_SUSTAINED_BODIES" \
        --out "$work/sustained.jsonl" >/dev/null
fi

bench_database
# Secrets of this run only: generated here, handed to the ingress, never printed.
user_secret=$(openssl rand -base64 32)
DATABASE_URL="$bench_url" EVENT_TOPIC="$topic" INGRESS_HTTP_PORT="$PORT" INGRESS_HTTP_HOST=127.0.0.1 INTERNAL_HTTP_PORT="$((PORT + 1))" INTERNAL_HTTP_HOST=127.0.0.1 \
    INGRESS_MAX_CONNECTIONS_PER_IP=100000 \
    INGRESS_NOTIFICATION_RATE_PER_SECOND=1000000 INGRESS_NOTIFICATION_RATE_BURST=1000000 \
    PAYLOAD_ENCRYPTION_KEYS="bench:$(openssl rand -base64 32)" CURSOR_SIGNING_KEY="$(openssl rand -base64 32)" \
    USER_TOKEN_HS256_SECRET="$user_secret" APPLE_IAP_ENV=Sandbox APPLE_IAP_BUNDLE_ID="$BUNDLE_ID" \
    APPLE_IAP_ROOT_CERTS="$work/signer/root.pem" APPLE_IAP_ALLOW_TEST_ROOTS=true LOG_LEVEL="${BENCH_LOG_LEVEL:-info}" \
    MIGRATE_ON_START=true "$bin/ingress" >"$work/ingress.log" 2>&1 &
ingress_pid=$!
for _ in $(seq 300); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "$base/readyz" >/dev/null || { echo "the ingress did not become ready:" >&2; tail -20 "$work/ingress.log" >&2; exit 1; }

sql() { psql "$bench_url" -qAtc "$1"; }
peak_rss_mib() { awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$ingress_pid/status"; }
post_bodies() { wrk_post_bodies "$NOTIFICATION_PATH" "$@"; }  # file duration output

echo "notifications: warm-up (3 s), then wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $NOTIFICATION_PATH..."
post_bodies "$work/warmup.jsonl" 3s "$work/warmup.wrk"
# Rows counted above the highest id so far: cheap on a database holding millions (the scale run's).
first_id=$(sql "SELECT coalesce(max(id), 0) FROM inbound_event_key")
# Where the cost goes: the ingress's CPU time, commits and WAL bytes, rows per group commit.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$ingress_pid/stat"; }
db_counters() { sql "SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) || ' ' || wal_bytes
                         || ' ' || (SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) FROM pg_stat_wal"; }
batch_counters() { curl -fsS "$internal/metrics" | awk '/^subs_group_commit_batch_size_(sum|count)/ { printf "%s ", $2 } END { print "" }'; }
ticks_before=$(cpu_ticks); read -r commits_before wal_before checkpoints_before < <(db_counters); read -r batch_sum_before batch_count_before < <(batch_counters)
if [ "${BENCH_PERF:-0}" = 1 ]; then
    perf record -a -g -F 499 -o "$work/perf.data" -- sleep 10 >/dev/null 2>&1 &
    perf_pid=$!
fi
post_bodies "$work/bodies.jsonl" "$DURATION" "$work/notifications.wrk"
ticks_after=$(cpu_ticks); read -r batch_sum_after batch_count_after < <(batch_counters)
new_rows=$(sql "SELECT count(*) FROM inbound_event WHERE id > $first_id AND kind = 'notification'")
sleep 1  # backends report their statistics at most once a second
read -r commits_after wal_after checkpoints_after < <(db_counters)
read -r accepted duplicate other reused seconds < <(wrk_post_counts "$work/notifications.wrk")
notification_rss=$(peak_rss_mib)
unpublished_at_end=$(sql "SELECT count(*) FROM event_outbox")
for _ in $(seq 50); do [ "$(sql "SELECT count(*) FROM event_outbox")" = 0 ] && break; sleep 0.2; done
unpublished_later=$(sql "SELECT count(*) FROM event_outbox")

echo "pgbench: one-row inserts of a $PGBENCH_PAYLOAD_BYTES-byte payload, $PGBENCH_CLIENTS clients, ${PGBENCH_SECONDS}s..."
# Random bytes like the ingress's sealed payloads (incompressible), a unique uuid like its notification UUID.
sql "DROP TABLE IF EXISTS bench_insert, bench_blob;  -- an earlier run's, on a kept BENCH_DATABASE
     CREATE TABLE bench_insert (id bigserial PRIMARY KEY, notification_uuid uuid NOT NULL UNIQUE, payload bytea NOT NULL,
         created_at timestamptz NOT NULL DEFAULT now());
     CREATE TABLE bench_blob AS SELECT decode(string_agg(md5(random()::text), ''), 'hex') AS payload
         FROM generate_series(1, $((PGBENCH_PAYLOAD_BYTES / 16)))"
echo "INSERT INTO bench_insert (notification_uuid, payload) SELECT gen_random_uuid(), payload FROM bench_blob;" >"$work/insert.sql"
pgbench -n -M prepared -c "$PGBENCH_CLIENTS" -j 2 -T "$PGBENCH_SECONDS" -f "$work/insert.sql" "$bench_url" >"$work/pgbench.out" 2>&1
pgbench_tps=$(awk '/^tps = / { printf "%.0f", $3; exit }' "$work/pgbench.out")
pgbench_latency=$(awk '/^latency average = / { print $4; exit }' "$work/pgbench.out")

if [ "$SUSTAINED" = 1 ]; then
    # The phases before left ~1.5 GB of fresh rows and WAL behind: autovacuum of those tables and the
    # flush of their pages would land inside the steps (a run's steps stalled 0.3-0.5 s at times).
    # The steps measure the ingress on a settled database: the pgbench table goes, the event tables
    # are vacuumed now, and a checkpoint writes the dirty pages.
    quiesce_started=$(date +%s)
    sql "DROP TABLE bench_insert, bench_blob"
    psql "$bench_url" -qc "VACUUM (ANALYZE) inbound_event, inbound_event_key, event_outbox"
    psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qc "CHECKPOINT"
    quiesce_seconds=$(( $(date +%s) - quiesce_started ))
    echo "sustained rate: open-loop steps from ${BENCH_SUSTAINED_START:-500}/s by ${BENCH_SUSTAINED_STEP:-500}/s (BenchLoad)..."
    "$bin/BenchLoad" --url "$base" --path "$NOTIFICATION_PATH" --bodies "$work/sustained.jsonl" --connections "$CONNECTIONS" \
        --start "${BENCH_SUSTAINED_START:-500}" --step "${BENCH_SUSTAINED_STEP:-500}" --probe 5 --hold 30 --p99-ms 50 \
        >"$work/sustained.out"
fi

auth="Authorization: Bearer $(USER_TOKEN_HS256_SECRET="$user_secret" "$bin/subsctl" dev-token --user bench-reader)"
DATABASE_URL="$bench_url" "$bin/subsctl" catalog apply --operator bench --reason "benchmark catalogue" deploy/local/catalog.json >/dev/null
order_no=$(curl -fsS -H "$auth" -H 'Content-Type: application/json' \
    -d '{"productId":"com.example.starter.monthly","requestId":"bench-read"}' "$base/api/v1/subscriptions/orders" \
    | sed -n 's/.*"orderNo":"\([^"]*\)".*/\1/p')
read_paths=("/api/v1/subscriptions/orders/$order_no")
if [ "$(curl -s -o /dev/null -w '%{http_code}' -H "$auth" "$base/api/v1/credits/balance")" = 200 ]; then
    read_paths+=("/api/v1/credits/balance")
fi
[ "${BENCH_READS:-1}" = 1 ] || read_paths=()  # BENCH_READS=0: notifications and pgbench only
for path in "${read_paths[@]}"; do
    echo "reads: wrk -t$THREADS -c$CONNECTIONS -d$DURATION GET $path..."
    wrk -t$THREADS -c"$CONNECTIONS" -d2s -H "$auth" "$base$path" >/dev/null
    wrk -t$THREADS -c"$CONNECTIONS" -d"$DURATION" --latency -H "$auth" "$base$path" >"$work/read-$(basename "$path").wrk"
done
final_rss=$(peak_rss_mib)

if [ "${BENCH_PERF:-0}" = 1 ]; then
    wait "$perf_pid" || true
    report() {  # lines perf-report-options…: the top lines, padding trimmed
        local lines=$1; shift
        perf report -i "$work/perf.data" -g none --stdio "$@" 2>/dev/null | grep -E '^ +[0-9]' \
            | sed -E 's/ +- +- *$//; s/ +$//' | cut -c1-180 | head -n "$lines" || true
    }
    report 16 --no-children --sort comm,dso >"$work/perf-comm.txt"
    # Inclusive time (callees included) names the operations: verification, logging, libpq calls…
    report 40 --pid "$ingress_pid" --percentage relative --children --sort dso,symbol >"$work/perf-ingress.txt"
    # BENCH_PERF_KEEP=DIR keeps the recording (and the ingress's pid) for a closer look with perf report.
    if [ -n "${BENCH_PERF_KEEP:-}" ]; then mkdir -p "$BENCH_PERF_KEEP"; cp "$work/perf.data" "$BENCH_PERF_KEEP/"; echo "$ingress_pid" >"$BENCH_PERF_KEEP/ingress.pid"; fi
fi

echo
echo "== ingress benchmark: $(nproc) cores, PostgreSQL + broker + ingress + wrk on one machine =="
echo "notifications: POST $NOTIFICATION_PATH, $body_bytes-byte distinct signed bodies (nested transaction + renewal info)"
awk -v a="$accepted" -v s="$seconds" 'BEGIN { printf "  accepted            %8.0f /s   (target >= 5000)   [%d new rows answered 200 in %.1f s]\n", a / s, a, s }'
printf '  latency p50 / p99   %8s / %s ms   (target p99 < 50 ms)\n' \
    "$(wrk_figure "$work/notifications.wrk" p50)" "$(wrk_figure "$work/notifications.wrk" p99)"
printf '  durable             %s new rows for %s "accepted" answers: %s\n' "$new_rows" "$accepted" \
    "$([ "$new_rows" -ge "$accepted" ] && echo "every 200 is a row" || echo "ROWS MISSING")"
printf '  other answers       %s duplicate, %s non-200, %s bodies reused (raise BENCH_NOTIFICATIONS if > 0) %s\n' \
    "$duplicate" "$other" "$reused" "$(wrk_figure "$work/notifications.wrk" errors)"
printf '  published           %s outbox rows left at the end, %s a few seconds later\n' "$unpublished_at_end" "$unpublished_later"
printf '  ingress peak RSS    %8s MiB (target < 150 MiB)\n' "$notification_rss"
awk -v a="$accepted" -v t="$((ticks_after - ticks_before))" -v hz="$(getconf CLK_TCK)" -v s="$seconds" \
    -v c="$((commits_after - commits_before))" -v w="$((wal_after - wal_before))" \
    -v bs="$batch_sum_after" -v bs0="$batch_sum_before" -v bc="$batch_count_after" -v bc0="$batch_count_before" 'BEGIN {
    printf "  cost per accepted   %.2f ms ingress CPU (%.2f cores busy), %.2f commits, %.1f KiB WAL; %.1f rows per group commit\n",
        1000 * t / hz / a, t / hz / s, c / a, w / a / 1024, (bc > bc0) ? (bs - bs0) / (bc - bc0) : 0 }'
# A checkpoint (this run's WAL volume can trigger one through max_wal_size) makes the next write of
# every page a full-page image and competes with commits for the disk: a suspect for the p99 tail.
printf '  checkpoints         %s during the run (whole cluster)\n' "$((checkpoints_after - checkpoints_before))"
printf 'pgbench one-row inserts (%s-byte payload, %s clients, %s s): %s tps, latency average %s ms\n' \
    "$PGBENCH_PAYLOAD_BYTES" "$PGBENCH_CLIENTS" "$PGBENCH_SECONDS" "$pgbench_tps" "$pgbench_latency"
awk -v a="$accepted" -v s="$seconds" -v p="$pgbench_tps" 'BEGIN { printf "  notifications accepted / pgbench one-row tps = %.2f\n", a / s / p }'
if [ "$SUSTAINED" = 1 ]; then
    echo "sustained rate (open loop, latency from each request's due time; after ${quiesce_seconds} s settling the database):"
    sed 's/^/  /' "$work/sustained.out"
    awk -v p="$pgbench_tps" -F'[ =]' '/^sustained_rate=/ {
        printf "  sustained rate / pgbench one-row tps = %d / %d = %.2f (target >= 0.5)\n", $2, p, $2 / p }' "$work/sustained.out"
fi
for path in "${read_paths[@]}"; do
    file="$work/read-$(basename "$path").wrk"
    printf 'reads: GET %s\n  %12s req/s (target >= 10000)   p50 %s ms   p99 %s ms   %s\n' "$path" \
        "$(wrk_figure "$file" rps)" "$(wrk_figure "$file" p50)" "$(wrk_figure "$file" p99)" "$(wrk_figure "$file" errors)"
done
printf 'ingress peak RSS after everything: %s MiB (target < 150 MiB)\n' "$final_rss"
if [ "${BENCH_PERF:-0}" = 1 ]; then
    echo
    echo "perf, whole machine during the notification run (share of samples by process):"
    cat "$work/perf-comm.txt"
    echo "perf, the ingress alone: inclusive share (children, self), by function:"
    cat "$work/perf-ingress.txt"
fi
