#!/usr/bin/env bash
# Credits on this machine (issue 6), PostgreSQL + broker + ingress + wrk co-located: metered usage
# calls per second through the ingress (service token, a fresh idempotency key per call, users
# drawn at random from BENCH_USERS seeded ones) with p50/p99 and a count proving every 200 is a
# stored usage event with its ledger entry; then the time to close one UTC day of BENCH_CLOSE_USERS
# users (`subsctl credits run-jobs`, the workers' job) and the ledger check afterwards. Prints
# figures; it is not a test and asserts nothing. BENCH_PERF=1 adds where the CPU went during the
# usage run (perf: the ingress, and its PostgreSQL server processes).
#
#   Tests/Benchmarks/credits-usage.sh
#   DURATION=15s CONNECTIONS=32 BENCH_USERS=10000 BENCH_CLOSE_USERS=100000 BENCH_PORT=18091 BENCH_PERF=1 Tests/Benchmarks/credits-usage.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/local/env.sh
source Tests/Benchmarks/bench-helpers.sh
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-32}
THREADS=2
USERS=${BENCH_USERS:-10000}
CLOSE_USERS=${BENCH_CLOSE_USERS:-100000}
PORT=${BENCH_PORT:-18091}
base="http://127.0.0.1:$PORT"
# Metrics live on the internal listener, one port up.
internal="http://127.0.0.1:$((PORT + 1))"

bench_scratch credits
echo "building ingress and subsctl (release)..."
for product in ingress subsctl; do
    swift build -c release --product "$product" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
done
bin="$(swift build -c release --show-bin-path)"

bench_database
# Secrets of this run only: generated here, handed to the ingress and wrk, never printed.
service_token=$(openssl rand -base64 33 | tr '+/' '-_' | tr -d '=\n')
"$bin/subsctl" demo-signer init --dir "$work/signer" >/dev/null
DATABASE_URL="$bench_url" EVENT_TOPIC="$topic" INGRESS_HTTP_PORT="$PORT" INGRESS_HTTP_HOST=127.0.0.1 INTERNAL_HTTP_PORT="$((PORT + 1))" INTERNAL_HTTP_HOST=127.0.0.1 \
    INGRESS_MAX_CONNECTIONS_PER_IP=100000 \
    SERVICE_TOKENS="bench:$service_token" \
    PAYLOAD_ENCRYPTION_KEYS="bench:$(openssl rand -base64 32)" CURSOR_SIGNING_KEY="$(openssl rand -base64 32)" \
    USER_TOKEN_HS256_SECRET="$(openssl rand -base64 32)" APPLE_IAP_ENV=Sandbox APPLE_IAP_BUNDLE_ID=com.example.subscriptions \
    APPLE_IAP_ROOT_CERTS="$work/signer/root.pem" APPLE_IAP_ALLOW_TEST_ROOTS=true LOG_LEVEL="${BENCH_LOG_LEVEL:-warning}" \
    MIGRATE_ON_START=true "$bin/ingress" >"$work/ingress.log" 2>&1 &
ingress_pid=$!
for _ in $(seq 300); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "$base/readyz" >/dev/null || { echo "the ingress did not become ready:" >&2; tail -20 "$work/ingress.log" >&2; exit 1; }

sql() { psql "$bench_url" -qAtc "$1"; }
DATABASE_URL="$bench_url" "$bin/subsctl" rates apply --operator bench --reason "benchmark rates" deploy/local/rates.json >/dev/null
echo "seeding $USERS users with credits..."
sql "INSERT INTO app_user (user_id) SELECT 'bench-user-' || n FROM generate_series(1, $USERS) n;
     INSERT INTO credit_account (user_id, pool, balance) SELECT 'bench-user-' || n, 'PERMANENT', 1000000000000 FROM generate_series(1, $USERS) n;
     INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
         SELECT 'bench-user-' || n, 'PERMANENT', 1000000000000, 1000000000000, 'ADJUSTMENT', 'bench-seed' FROM generate_series(1, $USERS) n;
     INSERT INTO credit_grant (grant_key, user_id, pool, amount, remaining, reason)
         SELECT 'bench-seed:' || user_id, user_id, pool, balance, balance, 'ADJUSTMENT' FROM credit_account WHERE user_id LIKE 'bench-user-%';
     ANALYZE app_user, credit_account, credit_ledger, credit_grant"

run_wrk() {  # duration prefix output
    SERVICE_TOKEN="$service_token" USERS="$USERS" KEY_PREFIX="$2" \
        wrk -t$THREADS -c"$CONNECTIONS" -d"$1" --timeout 10s --latency -s Tests/Benchmarks/wrk-credits-usage.lua "$base" >"$3"
}
echo "usage: warm-up (3 s), then wrk -t$THREADS -c$CONNECTIONS -d$DURATION POST /api/v1/credits/usage..."
run_wrk 3s warm "$work/warmup.wrk"
events_before=$(sql "SELECT count(*) FROM credit_usage_event")
if [ "${BENCH_PERF:-0}" = 1 ]; then  # where the ingress's and its server processes' CPU goes (inclusive, by function)
    perf record -g -F 499 -p "$ingress_pid" -o "$work/perf.data" -- sleep 10 >/dev/null 2>&1 &
    perf_pid=$!
    pg_pids=$(sql "SELECT string_agg(pid::text, ',') FROM pg_stat_activity
                    WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
    perf record -g -F 499 -p "$pg_pids" -o "$work/perf-pg.data" -- sleep 10 >/dev/null 2>&1 &
    perf_pg_pid=$!
fi
run_wrk "$DURATION" run "$work/usage.wrk"
if [ "${BENCH_PERF:-0}" = 1 ]; then
    wait "$perf_pid" "$perf_pg_pid" || true
    for data in perf perf-pg; do
        perf report -i "$work/$data.data" -g none --stdio --children --percentage relative --sort symbol 2>/dev/null \
            | grep -E '^ +[0-9]' | grep -v ' 0x0000' | cut -c1-160 | head -60 >"$work/$data.txt" || true
    done
fi
sleep 1  # let the calls still in flight finish
# How the ingress gathered the calls (warm-up included): calls per batch statement, and batches
# whose statement failed and were charged call by call.
read -r batch_sum batch_count fallbacks < <(curl -fsS "$internal/metrics" | awk '
    /^subs_credit_usage_batch_size_sum/ { s = $2 } /^subs_credit_usage_batch_size_count/ { c = $2 }
    /^subs_credit_usage_batch_fallbacks_total/ { f = $2 } END { print s + 0, c + 0, f + 0 }')
events_after=$(sql "SELECT count(*) FROM credit_usage_event")
unbooked=$(sql "SELECT count(*) FROM credit_usage_event e
                 WHERE NOT EXISTS (SELECT 1 FROM credit_ledger l WHERE l.entry_type = 'USAGE' AND l.reference = 'usage:' || e.id)")
cpu_seconds=$(awk -v hz="$(getconf CLK_TCK)" '{ printf "%.1f", ($14 + $15) / hz }' "/proc/$ingress_pid/stat")
# The database side of the same calls: the ingress's server processes (its pooled connections live
# for the whole run), warm-up included like the ingress figure. Shared server processes (WAL
# writer, checkpointer, autovacuum) are not counted.
backends=$(sql "SELECT string_agg(pid::text, ' ') FROM pg_stat_activity
                 WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
pg_cpu_seconds=$(for pid in $backends; do cat "/proc/$pid/stat" 2>/dev/null; done \
    | awk -v hz="$(getconf CLK_TCK)" '{ t += $14 + $15 } END { printf "%.1f", t / hz }')
read -r charged exhausted other seconds < <(sed -n \
    's/^lua charged=\([0-9]*\) exhausted=\([0-9]*\) other=\([0-9]*\) seconds=\([0-9.]*\)$/\1 \2 \3 \4/p' "$work/usage.wrk")
rss=$(awk '/^VmHWM:/ { printf "%.1f", $2 / 1024 }' "/proc/$ingress_pid/status")

echo "seeding one UTC day of usage for $CLOSE_USERS users..."
# 2026-01-01: fractional totals; a third of the users cannot cover their rounding (shortfall).
sql "INSERT INTO app_user (user_id) SELECT 'close-user-' || n FROM generate_series(1, $CLOSE_USERS) n;
     INSERT INTO credit_account (user_id, pool, balance)
         SELECT 'close-user-' || n, 'SUBSCRIPTION', CASE WHEN n % 3 = 0 THEN 100000 ELSE 50000000 END FROM generate_series(1, $CLOSE_USERS) n;
     INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
         SELECT user_id, pool, balance, balance, 'ADJUSTMENT', 'bench-seed' FROM credit_account WHERE user_id LIKE 'close-user-%';
     INSERT INTO credit_grant (grant_key, user_id, pool, amount, remaining, reason)
         SELECT 'bench-seed:' || user_id, user_id, pool, balance, balance, 'ADJUSTMENT' FROM credit_account WHERE user_id LIKE 'close-user-%';
     INSERT INTO credit_daily_bill (user_id, day, total_cost)
         SELECT 'close-user-' || n, '2026-01-01', 1 + (n * 7919) % 9999999 FROM generate_series(1, $CLOSE_USERS) n;
     ANALYZE app_user, credit_account, credit_ledger, credit_grant, credit_daily_bill"
echo "closing the day (subsctl credits run-jobs --now 2026-01-02T00:00:05Z)..."
DATABASE_URL="$bench_url" "$bin/subsctl" credits run-jobs --now 2026-01-02T00:00:05Z >"$work/close.out"
read -r closed close_seconds mismatches < <(sed -n 's/.*bills_closed=\([0-9]*\).* seconds=\([0-9.]*\) ledger_mismatches=\([0-9]*\).*/\1 \2 \3/p' "$work/close.out")
shortfalls=$(sql "SELECT count(*) FROM credit_daily_bill WHERE day = '2026-01-01' AND shortfall > 0")
open_bills=$(sql "SELECT count(*) FROM credit_daily_bill WHERE day = '2026-01-01' AND closed_at IS NULL")
negative=$(sql "SELECT count(*) FROM credit_account WHERE balance < 0")

echo
echo "== credits benchmark: $(nproc) cores, PostgreSQL + broker + ingress + wrk on one machine =="
echo "usage: POST /api/v1/credits/usage, fresh idempotency key per call, $USERS users, $CONNECTIONS connections"
awk -v a="$charged" -v s="$seconds" 'BEGIN { printf "  charged             %8.0f /s   (target >= 3000)   [%d calls answered 200 in %.1f s]\n", a / s, a, s }'
printf '  latency p50 / p99   %8s / %s ms   (target p99 < 50 ms)\n' "$(wrk_figure "$work/usage.wrk" p50)" "$(wrk_figure "$work/usage.wrk" p99)"
# Calls still in flight when wrk stops are stored but not counted by wrk: events >= answers.
printf '  durable             %s new usage events for %s answers 200, %s events without ledger entries: %s\n' \
    "$((events_after - events_before))" "$charged" "$unbooked" \
    "$([ "$((events_after - events_before))" -ge "$charged" ] && [ "$unbooked" = 0 ] && echo "every 200 is an event with its ledger entries" || echo "MISSING")"
printf '  other answers       %s exhausted, %s other %s\n' "$exhausted" "$other" "$(wrk_figure "$work/usage.wrk" errors)"
awk -v c="$cpu_seconds" -v n="$events_after" 'BEGIN { printf "  ingress CPU         %.2f ms per call (%.1f s for %d calls, warm-up included)\n", 1000 * c / n, c, n }'
awk -v c="$pg_cpu_seconds" -v n="$events_after" -v i="$cpu_seconds" 'BEGIN { printf "  PostgreSQL CPU      %.2f ms per call (%.1f s in the ingress'"'"'s server processes); ingress + PostgreSQL %.2f ms per call\n", 1000 * c / n, c, 1000 * (c + i) / n }'
awk -v s="$batch_sum" -v c="$batch_count" -v f="$fallbacks" 'BEGIN { printf "  batches             %.1f calls per statement on average (%d statements, warm-up included), %d batches charged call by call after a failure\n", c ? s / c : 0, c, f }'
printf '  ingress peak RSS    %8s MiB; load average %s (other work on the machine counts)\n' "$rss" "$(cut -d' ' -f1-3 /proc/loadavg)"
echo "daily close: $CLOSE_USERS users' day (one bill each), batches of 1000"
printf '  closed              %s bills in %s s   (target < 60 s)   %s with a shortfall, %s still open\n' \
    "$closed" "$close_seconds" "$shortfalls" "$open_bills"
if [ "${BENCH_PERF:-0}" = 1 ]; then
    echo "perf, the ingress during the usage run (children, self, function):"; cat "$work/perf.txt"
    echo "perf, its PostgreSQL server processes during the usage run (children, self, function):"; cat "$work/perf-pg.txt"
fi
printf '  ledger check        %s accounts differ from their ledger, %s negative balances (both must be 0)\n' "$mismatches" "$negative"
