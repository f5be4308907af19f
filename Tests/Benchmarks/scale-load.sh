#!/usr/bin/env bash
# Loads a database of realistic shape for the scale run (issue 17, point 4): 500,000 users with a
# chain each, 2,000,000 transactions (monthly renewals), their renewal infos, orders, grants,
# ledger and balances, and 10,000,000 notification events over the last 13 months (a partition
# each, their keys, sealed-size payloads, their processed_event proofs), all SUCCEEDED but one in a
# thousand DEAD. Set-based SQL on the server (generate_series, no client round trip per row),
# one statement per table and month, then VACUUM ANALYZE; prints what it loaded and how long it took.
#
#   Tests/Benchmarks/scale-load.sh                       # full size into a new database scale_<time>
#   SCALE=0.01 Tests/Benchmarks/scale-load.sh            # 1/100: 5,000 users, 100,000 events
#   SCALE_DATABASE=mydb PAYLOAD_BYTES=1024 Tests/Benchmarks/scale-load.sh
#   SCALE=0.2 SCALE_EVENTS=1000000 Tests/Benchmarks/scale-load.sh   # 100,000 users, 1,000,000 events
#
# Disk: the events dominate, about PAYLOAD_BYTES + 1 KB each with their indexes (full size with the
# default 2 KB payloads: ~30 GB). Real sealed notifications are ~12 KB; use PAYLOAD_BYTES=12288
# only with the room for it. It is not a test and asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/local/env.sh
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

SCALE=${SCALE:-1}
PAYLOAD_BYTES=${PAYLOAD_BYTES:-2048}
database=${SCALE_DATABASE:-scale_$(date +%Y%m%d%H%M%S)}
count() { python3 -c "import sys; print(max(1, round(float(sys.argv[1]) * float(sys.argv[2]))))" "$1" "$SCALE"; }
USERS=$(count 500000)
TRANSACTIONS=$(count 2000000)
EVENTS=${SCALE_EVENTS:-$(count 10000000)}
MONTHS=13
RENEWALS=$(( (TRANSACTIONS + USERS - 1) / USERS ))

bash deploy/local/start.sh >/dev/null
server_url="${DATABASE_URL%/*}"
bench_url="$server_url/$database"
psql "$DATABASE_URL" -qc "CREATE DATABASE $database" 2>/dev/null || true
sql() { psql "$bench_url" -v ON_ERROR_STOP=1 -qAtc "SET synchronous_commit = off; $1"; }
started=$(date +%s)
step() { echo "[$(( $(date +%s) - started )) s] $*"; }

swift build --product subsctl >/dev/null
DATABASE_URL="$bench_url" LOG_LEVEL=warning "$(swift build --show-bin-path)/subsctl" migrate >/dev/null
step "migrated $database; loading $USERS users, $TRANSACTIONS transactions, $EVENTS events (payloads of $PAYLOAD_BYTES bytes)"

# Users, their account tokens, one chain each: an order, its monthly transactions (the last one
# current for 90% of the users, lapsed for the rest), the renewal info and the projection.
sql "
INSERT INTO app_user (user_id, created_at)
    SELECT 'scale-user-' || n, now() - interval '400 days' + n * interval '1 second' FROM generate_series(1, $USERS) n;
INSERT INTO user_account_token (user_id, app_account_token)
    SELECT 'scale-user-' || n, md5('token' || n)::uuid FROM generate_series(1, $USERS) n;
INSERT INTO payment_order (order_no, user_id, product_id, order_type, status, transaction_id, original_transaction_id,
        requested_environment, environment, amount_milliunits, currency, app_account_token, created_at)
    SELECT 'scale-order-' || n, 'scale-user-' || n, 'com.example.starter.monthly', 'INITIAL', 'FULFILLED',
           (2000000000 + n)::text, (2000000000 + n)::text, 'Production', 'Production', 9990, 'USD', md5('token' || n)::uuid,
           now() - ($RENEWALS || ' months')::interval
      FROM generate_series(1, $USERS) n;"
step "users, tokens, orders"
sql "
INSERT INTO apple_transaction (environment, transaction_id, original_transaction_id, web_order_line_item_id, app_account_token,
        user_id, product_id, transaction_reason, purchase_date, original_purchase_date, expires_date, ownership_type,
        price_milliunits, currency, signed_date, payload_hash)
    SELECT 'Production', CASE WHEN k = 0 THEN (2000000000 + n)::text ELSE (k::bigint * 1000000000 + 3000000000 + n)::text END,
           (2000000000 + n)::text, (k::bigint * 1000000000 + 4000000000 + n)::text, md5('token' || n), 'scale-user-' || n,
           'com.example.starter.monthly', CASE WHEN k = 0 THEN 'PURCHASE' ELSE 'RENEWAL' END,
           now() - (($RENEWALS - k) || ' months')::interval - (n % 86400) * interval '1 second',
           now() - ($RENEWALS || ' months')::interval,
           now() - (($RENEWALS - k - 1) || ' months')::interval - (n % 86400) * interval '1 second'
               - CASE WHEN n % 10 = 0 THEN interval '40 days' ELSE interval '0' END,
           'PURCHASED', 9990, 'USD', now() - (($RENEWALS - k) || ' months')::interval, md5('tx' || n || ':' || k)
      FROM generate_series(1, $USERS) n, generate_series(0, $RENEWALS - 1) k
     WHERE n + k::bigint * $USERS <= $TRANSACTIONS;
INSERT INTO apple_renewal_info (environment, original_transaction_id, product_id, auto_renew_product_id, auto_renew_enabled,
        renewal_date, signed_date)
    SELECT 'Production', (2000000000 + n)::text, 'com.example.starter.monthly', 'com.example.starter.monthly', n % 10 <> 0,
           now() + interval '20 days', now() - interval '10 days'
      FROM generate_series(1, $USERS) n;
INSERT INTO user_subscription (environment, original_transaction_id, user_id, active_product_id, status, auto_renew_enabled,
        expires_at, last_transaction_id, last_signed_date)
    SELECT 'Production', (2000000000 + n)::text, 'scale-user-' || n, 'com.example.starter.monthly',
           CASE WHEN n % 10 = 0 THEN 'EXPIRED' ELSE 'ACTIVE' END, n % 10 <> 0,
           now() + CASE WHEN n % 10 = 0 THEN interval '-10 days' ELSE interval '20 days' END,
           (2000000000 + n)::text, now() - interval '10 days'
      FROM generate_series(1, $USERS) n;"
step "transactions, renewal infos, subscriptions"
# Credits, books that balance: a lot and its ledger entry per transaction; a chain that is still
# paid keeps every lot (nothing was spent); a lapsed one (one user in ten) had its pool cleared
# once at its ending (one clearing row, one ledger entry, each lot marked with what it lost).
sql "
INSERT INTO credit_grant (grant_key, user_id, pool, amount, remaining, expires_at, cleared_amount, cleared_by, reason,
        environment, transaction_id, original_transaction_id, created_at)
    SELECT 'txn:Production:' || t.transaction_id, t.user_id, 'SUBSCRIPTION', 1000000000,
           CASE WHEN s.status = 'EXPIRED' THEN 0 ELSE 1000000000 END, t.expires_date,
           CASE WHEN s.status = 'EXPIRED' THEN 1000000000 ELSE 0 END,
           CASE WHEN s.status = 'EXPIRED' THEN 'Production:' || s.original_transaction_id || ':' || s.last_transaction_id || ':EXPIRED' END,
           CASE WHEN t.transaction_reason = 'PURCHASE' THEN 'PURCHASE' ELSE 'RENEWAL' END, 'Production', t.transaction_id,
           t.original_transaction_id, t.purchase_date
      FROM apple_transaction t JOIN user_subscription s USING (environment, original_transaction_id);
INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference, created_at)
    SELECT user_id, 'SUBSCRIPTION', amount,
           sum(amount) OVER (PARTITION BY user_id ORDER BY created_at, id), 'GRANT', grant_key, created_at
      FROM credit_grant;
INSERT INTO credit_expiry_clearing (environment, original_transaction_id, last_transaction_id, status, user_id, cleared_amount,
        cleared_at)
    SELECT s.environment, s.original_transaction_id, s.last_transaction_id, 'EXPIRED', s.user_id, g.total, s.expires_at
      FROM user_subscription s
      JOIN (SELECT user_id, sum(amount) AS total FROM credit_grant GROUP BY user_id) g USING (user_id)
     WHERE s.status = 'EXPIRED';
INSERT INTO credit_ledger (user_id, pool, delta, balance_after, entry_type, reference, created_at)
    SELECT user_id, 'SUBSCRIPTION', -cleared_amount, 0, 'EXPIRY_CLEARING',
           'expiry:' || environment || ':' || original_transaction_id || ':' || last_transaction_id, cleared_at
      FROM credit_expiry_clearing;
UPDATE user_subscription SET cleared_ending = last_transaction_id || ':' || status WHERE status = 'EXPIRED';
INSERT INTO credit_account (user_id, pool, balance)
    SELECT user_id, 'SUBSCRIPTION', sum(remaining) FROM credit_grant GROUP BY user_id;"
step "grants, ledger, balances"

# Events: partitions first (the months of the data and those ahead), then the events month by
# month with their keys and proofs. Payloads are slices of one random block: incompressible like
# real ciphertext, without generating random bytes per row.
sql "SELECT count(*) FROM generate_series(date_trunc('month', now() AT TIME ZONE 'UTC') - interval '$MONTHS months',
                                         date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month', interval '1 month') m
      WHERE create_inbound_event_partition(m::date)" >/dev/null
sql "CREATE UNLOGGED TABLE scale_random AS
         SELECT decode(string_agg(md5(random()::text || g), ''), 'hex') AS block FROM generate_series(1, 4096 + $PAYLOAD_BYTES / 16) g"
per_month=$(( (EVENTS + MONTHS - 1) / MONTHS ))
# One session per core: the months are independent (ids come from the sequence), and one session
# alone leaves the other core idle while it waits for its WAL writes.
load_months() {  # first-month stride
for month in $(seq "$1" "$2" $((MONTHS - 1))); do
    first=$(( month * per_month + 1 )); last=$(( (month + 1) * per_month )); [ "$last" -gt "$EVENTS" ] && last=$EVENTS
    [ "$first" -gt "$last" ] && break
    sql "
    WITH key AS (
        INSERT INTO inbound_event_key (id, received_at, notification_uuid, environment, transaction_id, original_transaction_id)
        SELECT id, received_at, notification_uuid, 'Production', (4000000000 + id % $USERS + 1)::text,
               (2000000000 + id % $USERS + 1)::text
          FROM (SELECT nextval('inbound_event_id_seq') AS id,
                       now() - interval '$((MONTHS - month)) months' + (i - $first)::float8 / $per_month * interval '30 days' AS received_at,
                       md5('notification' || i)::uuid::text AS notification_uuid
                  FROM generate_series($first, $last) i) AS n
        RETURNING id, received_at, notification_uuid, environment, transaction_id, original_transaction_id
    ), event AS (
        INSERT INTO inbound_event (id, received_at, kind, notification_uuid, notification_type, subtype, environment, signed_date,
                transaction_id, original_transaction_id, routing_key, process_status, retry_count, error_code, signed_payload,
                payload_key_id, payload_hash, processed_at, updated_at)
        SELECT k.id, k.received_at, 'notification', k.notification_uuid,
               CASE WHEN k.id % 20 = 0 THEN 'DID_CHANGE_RENEWAL_STATUS' ELSE 'DID_RENEW' END, NULL, k.environment, k.received_at,
               k.transaction_id, k.original_transaction_id, k.original_transaction_id,
               CASE WHEN k.id % 1000 = 0 THEN 'DEAD' ELSE 'SUCCEEDED' END, CASE WHEN k.id % 1000 = 0 THEN 8 ELSE 0 END,
               CASE WHEN k.id % 1000 = 0 THEN 'UNMATCHED_PRODUCT' END,
               substring(r.block FROM (k.id % 4096)::int * 16 + 1 FOR $PAYLOAD_BYTES), 'k1', md5(k.notification_uuid),
               k.received_at + interval '80 milliseconds', k.received_at + interval '80 milliseconds'
          FROM key k, scale_random r
        RETURNING id, process_status, processed_at
    )
    INSERT INTO processed_event (event_kind, event_id, worker_id, attempt, processed_at)
    SELECT 'notification', id, 'scale-load', 1, processed_at FROM event WHERE process_status = 'SUCCEEDED'"
    step "events $first..$last (month -$((MONTHS - month)))"
done
}
sessions=${SCALE_SESSIONS:-$(nproc)}
pids=()
for session in $(seq 0 $((sessions - 1))); do load_months "$session" "$sessions" & pids+=($!); done
for pid in "${pids[@]}"; do wait "$pid"; done
sql "DROP TABLE scale_random"
psql "$bench_url" -qc "VACUUM ANALYZE" 2>/dev/null  # the owner cannot vacuum the shared catalogues: a warning each
step "vacuumed and analyzed"
echo "loaded $database in $(( $(date +%s) - started )) s: $(sql "SELECT count(*) FROM app_user") users," \
    "$(sql "SELECT count(*) FROM apple_transaction") transactions, $(sql "SELECT count(*) FROM inbound_event") events" \
    "in $(sql "SELECT count(*) FROM pg_inherits WHERE inhparent = 'inbound_event'::regclass") partitions," \
    "$(sql "SELECT pg_size_pretty(pg_database_size(current_database()))")"
echo "DATABASE_URL=$bench_url"
