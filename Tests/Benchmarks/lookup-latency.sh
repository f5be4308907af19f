#!/usr/bin/env bash
# The support lookup at scale (issue 14's target: p99 < 50 ms): a database holding BENCH_EVENTS
# events (default 1,000,000) over BENCH_USERS users (default 100,000), each user with an account
# token, an order, a chain, two transactions, a grant and a ledger entry; then wrk asks the admin
# API's GET /admin/v1/lookup for random ids of every kind (user, order, transaction, original
# transaction, notification UUID), first one at a time (one operator), then CONNECTIONS at once,
# and the script prints p50, p99 and p99 / 50 ms of each. PostgreSQL, the ingress and wrk share
# this machine. Prints figures; it is not a test and asserts nothing.
#
#   Tests/Benchmarks/lookup-latency.sh
#   DURATION=20s CONNECTIONS=8 BENCH_USERS=100000 BENCH_EVENTS=1000000 BENCH_PORT=18093 Tests/Benchmarks/lookup-latency.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/local/env.sh
source Tests/Benchmarks/bench-helpers.sh
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

DURATION=${DURATION:-20s}
CONNECTIONS=${CONNECTIONS:-8}
USERS=${BENCH_USERS:-100000}
EVENTS=${BENCH_EVENTS:-1000000}
PORT=${BENCH_PORT:-18093}
ADMIN_PORT=$((PORT + 1))

bench_scratch lookup
echo "building ingress (release)..."
swift build -c release --product ingress >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
swift build -c release --product subsctl >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
bin="$(swift build -c release --show-bin-path)"

psql "$DATABASE_URL" -qc "CREATE DATABASE $database"
# Secrets of this run only: generated here, handed to the ingress and wrk, never printed.
admin_token=$(openssl rand -hex 24)
"$bin/subsctl" demo-signer init --dir "$work/signer" >/dev/null
DATABASE_URL="$bench_url" EVENT_TOPIC="$topic" INGRESS_HTTP_PORT="$PORT" INGRESS_HTTP_HOST=127.0.0.1 \
    ADMIN_TOKENS="bench:viewer:$admin_token" ADMIN_HTTP_PORT="$ADMIN_PORT" \
    PAYLOAD_ENCRYPTION_KEYS="bench:$(openssl rand -base64 32)" CURSOR_SIGNING_KEY="$(openssl rand -base64 32)" \
    USER_TOKEN_HS256_SECRET="$(openssl rand -base64 32)" APPLE_IAP_ENV=Sandbox APPLE_IAP_BUNDLE_ID=com.example.subscriptions \
    APPLE_IAP_ROOT_CERTS="$work/signer/root.pem" APPLE_IAP_ALLOW_TEST_ROOTS=true LOG_LEVEL="${BENCH_LOG_LEVEL:-warning}" \
    "$bin/ingress" >"$work/ingress.log" 2>&1 &
ingress_pid=$!
for _ in $(seq 300); do curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "http://127.0.0.1:$PORT/readyz" >/dev/null || { echo "the ingress did not become ready:" >&2; tail -20 "$work/ingress.log" >&2; exit 1; }

sql() { psql "$bench_url" -qAtc "$1"; }
per_user=$((EVENTS / USERS))
echo "seeding $USERS users and $EVENTS events ($per_user per chain)..."
started=$(date +%s)
sql "
INSERT INTO app_user (user_id) SELECT 'bench-user-' || n FROM generate_series(1, $USERS) n;
INSERT INTO user_account_token (user_id, app_account_token) SELECT 'bench-user-' || n, gen_random_uuid() FROM generate_series(1, $USERS) n;
INSERT INTO payment_order (order_no, user_id, product_id, order_type, status, transaction_id, original_transaction_id, environment)
    SELECT 'bench-order-' || n, 'bench-user-' || n, 'com.example.starter.monthly', 'INITIAL', 'FULFILLED',
           (3000000000 + n)::text, (1000000000 + n)::text, 'Sandbox' FROM generate_series(1, $USERS) n;
INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status, auto_renew_enabled,
        expires_at, last_transaction_id, last_signed_date)
    SELECT 'Sandbox', (1000000000 + n)::text, 'bench-user-' || n, 'com.example.starter.monthly', 'ACTIVE', true,
           now() + interval '20 days', (3000000000 + n)::text, now() FROM generate_series(1, $USERS) n;
INSERT INTO apple_transaction (environment, transaction_id, original_transaction_id, user_id, product_id, purchase_date,
        expires_date, ownership_type, signed_date, payload_hash)
    SELECT 'Sandbox', (t::bigint * 1000000000 + n)::text, (1000000000 + n)::text, 'bench-user-' || n, 'com.example.starter.monthly',
           now() - (t || ' days')::interval, now() + interval '20 days', 'PURCHASED', now(), md5(n::text || t)
      FROM generate_series(1, $USERS) n, (VALUES (3), (4)) AS k(t);
INSERT INTO inbound_event_key (id, received_at, notification_uuid)
    SELECT i, now() - (i || ' seconds')::interval, 'bench-notification-' || i FROM generate_series(1, $EVENTS) i;
SELECT setval('inbound_event_id_seq', $EVENTS);
INSERT INTO inbound_event (id, received_at, kind, notification_uuid, notification_type, environment, signed_date, transaction_id,
        original_transaction_id, routing_key, process_status, processed_at)
    SELECT i, k.received_at, 'notification', k.notification_uuid, 'DID_RENEW', 'Sandbox', now(), (3000000000 + (i % $USERS) + 1)::text,
           (1000000000 + (i % $USERS) + 1)::text, (1000000000 + (i % $USERS) + 1)::text,
           CASE WHEN i % 1000 = 0 THEN 'DEAD' ELSE 'SUCCEEDED' END, now()
      FROM generate_series(1, $EVENTS) i JOIN inbound_event_key k ON k.id = i;
UPDATE inbound_event SET error_code = 'UNMATCHED_PRODUCT' WHERE process_status = 'DEAD';
INSERT INTO credit_account (user_id, pool, balance) SELECT 'bench-user-' || n, 'SUBSCRIPTION', 1000000000 FROM generate_series(1, $USERS) n;
INSERT INTO credit_grant (grant_key, user_id, pool, amount, reason, environment, transaction_id, original_transaction_id)
    SELECT 'bench-grant-' || n, 'bench-user-' || n, 'SUBSCRIPTION', 1000000000, 'PURCHASE', 'Sandbox', (3000000000 + n)::text,
           (1000000000 + n)::text FROM generate_series(1, $USERS) n;
INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference)
    SELECT 'bench-user-' || n, 'SUBSCRIPTION', 1000000000, 1000000000, 'GRANT', 'bench-grant-' || n FROM generate_series(1, $USERS) n;
"
sql "VACUUM ANALYZE" 2>/dev/null  # the owner cannot vacuum the shared catalogues: a warning each
echo "seeded in $(( $(date +%s) - started )) s: $(sql "SELECT count(*) FROM inbound_event") events, $(sql "SELECT count(*) FROM app_user") users"

run_wrk() {  # connections duration output
    ADMIN_TOKEN="$admin_token" USERS="$USERS" EVENTS="$EVENTS" \
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
