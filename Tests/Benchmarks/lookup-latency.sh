#!/usr/bin/env bash
# The support lookup at scale (issue 14's target: p99 < 50 ms): wrk asks the admin API's
# GET /admin/v1/lookup for random ids of every kind (user, order, transaction, original
# transaction, notification UUID) sampled from the database, first one at a time (one operator),
# then CONNECTIONS at once, and the script prints p50, p99 and p99 / 50 ms of each. The database
# is scale-load.sh's at BENCH_SCALE (default 0.2: 100,000 users, 400,000 transactions) with
# BENCH_EVENTS events (default 1,000,000: issue 14's database), or the existing BENCH_DATABASE
# (the scale run's). PostgreSQL, the ingress and wrk share this machine. Prints figures; it is not
# a test and asserts nothing.
#
#   Tests/Benchmarks/lookup-latency.sh
#   DURATION=20s CONNECTIONS=8 BENCH_SCALE=0.2 BENCH_EVENTS=1000000 BENCH_PORT=18093 Tests/Benchmarks/lookup-latency.sh
#   BENCH_DATABASE=scale_full Tests/Benchmarks/lookup-latency.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/local/env.sh
source Tests/Benchmarks/bench-helpers.sh
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-8}
PORT=${BENCH_PORT:-18093}
ADMIN_PORT=$((PORT + 1))

bench_scratch lookup
echo "building ingress (release)..."
swift build -c release --product ingress >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
swift build -c release --product subsctl >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
bin="$(swift build -c release --show-bin-path)"

if [ -z "${BENCH_DATABASE:-}" ]; then
    echo "loading a database of scale ${BENCH_SCALE:-0.2} with ${BENCH_EVENTS:-1000000} events (scale-load.sh)..."
    SCALE="${BENCH_SCALE:-0.2}" SCALE_EVENTS="${BENCH_EVENTS:-1000000}" SCALE_DATABASE="$database" \
        bash Tests/Benchmarks/scale-load.sh >"$work/load.log" \
        || { cat "$work/load.log"; exit 1; }
fi
# Secrets of this run only: generated here, handed to the ingress and wrk, never printed.
admin_token=$(openssl rand -hex 24)
"$bin/subsctl" demo-signer init --dir "$work/signer" >/dev/null
DATABASE_URL="$bench_url" EVENT_TOPIC="$topic" INGRESS_HTTP_PORT="$PORT" INGRESS_HTTP_HOST=127.0.0.1 \
    ADMIN_TOKENS="bench:viewer:$admin_token" ADMIN_HTTP_PORT="$ADMIN_PORT" \
    PAYLOAD_ENCRYPTION_KEYS="bench:$(openssl rand -base64 32)" CURSOR_SIGNING_KEY="$(openssl rand -base64 32)" \
    USER_TOKEN_HS256_SECRET="$(openssl rand -base64 32)" APPLE_IAP_ENV=Sandbox APPLE_IAP_BUNDLE_ID=com.example.subscriptions \
    APPLE_IAP_ROOT_CERTS="$work/signer/root.pem" APPLE_IAP_ALLOW_TEST_ROOTS=true LOG_LEVEL="${BENCH_LOG_LEVEL:-warning}" \
    MIGRATE_ON_START=true "$bin/ingress" >"$work/ingress.log" 2>&1 &
ingress_pid=$!
for _ in $(seq 300); do curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null || { echo "the ingress did not become ready:" >&2; tail -20 "$work/ingress.log" >&2; exit 1; }

sql() { psql "$bench_url" -qAtc "$1"; }
# Ids of every kind the support desk is asked about, sampled from what the database holds: 2,000
# each (or all when fewer), so that wrk asks for ids spread over the whole data.
sql "
(SELECT user_id FROM app_user ORDER BY random() LIMIT 2000)
UNION ALL (SELECT order_no FROM payment_order ORDER BY random() LIMIT 2000)
UNION ALL (SELECT transaction_id FROM apple_transaction TABLESAMPLE SYSTEM (1) LIMIT 2000)
UNION ALL (SELECT original_transaction_id FROM user_subscription ORDER BY random() LIMIT 2000)
UNION ALL (SELECT notification_uuid FROM inbound_event_key TABLESAMPLE SYSTEM (1) LIMIT 2000)" >"$work/ids"
echo "asking for $(wc -l <"$work/ids") ids sampled from $(sql "SELECT count(*) FROM app_user") users," \
    "$(sql "SELECT count(*) FROM apple_transaction") transactions and $(sql "SELECT count(*) FROM inbound_event") events"

run_wrk() {  # connections duration output
    ADMIN_TOKEN="$admin_token" IDS="$work/ids" \
        wrk -t1 -c"$1" -d"$2" --timeout 10s --latency -s Tests/Benchmarks/wrk-admin-lookup.lua "http://127.0.0.1:$ADMIN_PORT" >"$3" 2>"$3.err"
}
echo "warm-up (5 s), then GET /admin/v1/lookup?q=<random id> for $DURATION by one operator, then by $CONNECTIONS at once..."
run_wrk 1 5s "$work/warmup.wrk"
echo
for connections in 1 "$CONNECTIONS"; do
    out="$work/lookup-$connections.wrk"
    run_wrk "$connections" "$DURATION" "$out"
    p99=$(wrk_figure "$out" p99)
    echo "connections=$connections lookups_per_second=$(wrk_figure "$out" rps) p50_ms=$(wrk_figure "$out" p50) p99_ms=$p99" \
        "non_200=$(wc -l <"$out.err") $(wrk_figure "$out" errors)"
    echo "  lookup p99 / 50 ms target = $(awk -v p="$p99" 'BEGIN { printf "%.2f", p / 50 }') (below 1 meets the target)"
done
