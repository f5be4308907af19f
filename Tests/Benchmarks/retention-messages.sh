#!/usr/bin/env bash
# Apple's Get Retention Message endpoint under load (issue 25, item 6): Apple waits about 700 ms
# for an answer, then shows its default message. wrk posts distinct pre-signed requests (a tenth
# about chains we do not know; a third asking the offer rule, which signs a promotional offer per
# answer) to an ingress with the catalogue's retention rules, SUBSCRIBERS seeded chains and the
# record on; prints requests per second, p50/p99 measured in this run against the 700 ms ceiling,
# and whether every 200 left its record. Prints figures; it is not a test and asserts nothing.
#
#   Tests/Benchmarks/retention-messages.sh
#   BENCH_REQUESTS=60000 SUBSCRIBERS=20000 DURATION=15s CONNECTIONS=32 BENCH_PORT=18190 Tests/Benchmarks/retention-messages.sh
#   BENCH_CONFIGURATION=debug Tests/Benchmarks/retention-messages.sh   # the debug build (no release build on a busy machine)
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/local/env.sh
source Tests/Benchmarks/bench-helpers.sh
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

REQUESTS=${BENCH_REQUESTS:-60000}
SUBSCRIBERS=${SUBSCRIBERS:-20000}
DURATION=${DURATION:-15s}
CONNECTIONS=${CONNECTIONS:-32}
CONFIGURATION=${BENCH_CONFIGURATION:-release}
THREADS=2
PORT=${BENCH_PORT:-18190}
CEILING_MS=700
RETENTION_PATH=/api/v1/iap/apple/retention/sandbox
base="http://127.0.0.1:$PORT"

bench_scratch retention
echo "building ingress and subsctl ($CONFIGURATION)..."
for product in ingress subsctl; do
    swift build -c "$CONFIGURATION" --product "$product" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
done
bin="$(swift build -c "$CONFIGURATION" --show-bin-path)"

"$bin/subsctl" demo-signer init --dir "$work/signer" >/dev/null
echo "signing $REQUESTS distinct Get Retention Message requests..."
python3 Tests/Benchmarks/sign-retention-requests.py "$work/signer" "$((REQUESTS + 3000))" "$SUBSCRIBERS" "$work/all.jsonl"
head -n 3000 "$work/all.jsonl" >"$work/warmup.jsonl"
tail -n +3001 "$work/all.jsonl" >"$work/bodies.jsonl"
# An App Store key of this run only, so the offer rule signs (the dearest answer).
openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt -out "$work/AuthKey.p8"

bench_database
sql() { psql "$bench_url" -qAtc "$1"; }
DATABASE_URL="$bench_url" EVENT_TOPIC="$topic" INGRESS_HTTP_PORT="$PORT" INGRESS_HTTP_HOST=127.0.0.1 \
    INTERNAL_HTTP_PORT="$((PORT + 1))" INTERNAL_HTTP_HOST=127.0.0.1 INGRESS_MAX_CONNECTIONS_PER_IP=100000 \
    PAYLOAD_ENCRYPTION_KEYS="bench:$(openssl rand -base64 32)" CURSOR_SIGNING_KEY="$(openssl rand -base64 32)" \
    USER_TOKEN_HS256_SECRET="$(openssl rand -base64 32)" APPLE_IAP_ENV=Sandbox APPLE_IAP_BUNDLE_ID=com.example.subscriptions \
    APPLE_IAP_ROOT_CERTS="$work/signer/root.pem" APPLE_IAP_ALLOW_TEST_ROOTS=true \
    APPLE_IAP_ISSUER_ID=57246542-96fe-1a63-e053-0824d011072a APPLE_IAP_KEY_ID=BENCHKEY01 APPLE_IAP_PRIVATE_KEY_PATH="$work/AuthKey.p8" \
    RETENTION_MESSAGING_ENABLED=true LOG_LEVEL="${BENCH_LOG_LEVEL:-warning}" MIGRATE_ON_START=true \
    "$bin/ingress" >"$work/ingress.log" 2>&1 &
ingress_pid=$!
for _ in $(seq 300); do curl -fsS "$base/readyz" >/dev/null 2>&1 && break; sleep 0.2; done
curl -fsS "$base/readyz" >/dev/null || { echo "the ingress did not become ready:" >&2; tail -20 "$work/ingress.log" >&2; exit 1; }

# The demo catalogue's pro plan with a subscribers' offer for en-GB, a German message and a catch-all.
python3 - deploy/local/catalog.json "$work/catalog.json" <<'PY'
import json, sys
catalogue = json.load(open(sys.argv[1]))
for product in catalogue["products"]:
    if product["productId"] == "com.example.pro.monthly":
        product["offers"] = [{"offerIdentifier": "loyal20", "audience": "SUBSCRIBED"}]
        product["retentionMessages"] = [
            {"messageIdentifier": "5e0b6a7c-1d2e-4f30-8a41-000000000001", "locales": ["de"]},
            {"messageIdentifier": "5e0b6a7c-1d2e-4f30-8a41-000000000003", "locales": ["en-GB"], "offerIdentifier": "loyal20"},
            {"messageIdentifier": "5e0b6a7c-1d2e-4f30-8a41-000000000002"},
        ]
json.dump(catalogue, open(sys.argv[2], "w"))
PY
DATABASE_URL="$bench_url" "$bin/subsctl" catalog apply --operator bench --reason "retention benchmark" "$work/catalog.json" >/dev/null
echo "seeding $SUBSCRIBERS subscribers with an active chain each..."
sql "INSERT INTO app_user (user_id) SELECT 'bench-' || n FROM generate_series(1, $SUBSCRIBERS) n;
     INSERT INTO user_subscription (environment, original_transaction_id, user_id, subscription_group_id, active_product_id,
         status, auto_renew_enabled, expires_at, last_transaction_id, last_signed_date, next_change_at)
     SELECT 'Sandbox', (3000000000000000 + n)::text, 'bench-' || n, '21000000', 'com.example.pro.monthly', 'ACTIVE', true,
         now() + interval '20 days', (3000000000000000 + n)::text, now(), now() + interval '20 days'
       FROM generate_series(1, $SUBSCRIBERS) n;
     ANALYZE app_user, user_subscription"

post_bodies() { wrk_post_bodies "$RETENTION_PATH" "$@"; }  # file duration output
echo "warm-up (3 s), then wrk -t$THREADS -c$CONNECTIONS -d$DURATION on $RETENTION_PATH..."
post_bodies "$work/warmup.jsonl" 3s "$work/warmup.wrk"
recorded_before=$(sql "SELECT count(*) FROM retention_message_answer")
post_bodies "$work/bodies.jsonl" "$DURATION" "$work/retention.wrk"
recorded=$(( $(sql "SELECT count(*) FROM retention_message_answer") - recorded_before ))
read -r answered _duplicate other reused seconds < <(wrk_post_counts "$work/retention.wrk")
by_answer=$(sql "SELECT string_agg(answer || '=' || n, ' ' ORDER BY answer) FROM
                 (SELECT answer, count(*) n FROM retention_message_answer GROUP BY answer) a")
p99=$(wrk_figure "$work/retention.wrk" p99)

echo
echo "== Get Retention Message ($CONFIGURATION build): $(nproc) cores, PostgreSQL + broker + ingress + wrk on one machine =="
echo "POST $RETENTION_PATH, $SUBSCRIBERS subscribers seeded, distinct signed requests, $CONNECTIONS connections"
awk -v a="$answered" -v s="$seconds" 'BEGIN { printf "  answered 200        %8.0f /s   [%d in %.1f s]\n", a / s, a, s }'
printf '  latency p50 / p99   %8s / %s ms\n' "$(wrk_figure "$work/retention.wrk" p50)" "$p99"
awk -v p="$p99" -v c="$CEILING_MS" 'BEGIN { printf "  p99 against Apple'"'"'s ceiling: %.1f ms of %d ms (%s)\n", p, c, (p < c) ? "within" : "OVER THE CEILING" }'
printf '  recorded            %s new rows for %s answers, %s requests reused (%s)\n' "$recorded" "$answered" "$reused" \
    "$([ "$recorded" -ge "$((answered - reused))" ] && echo "every new request recorded" || echo "RECORDS MISSING")"
printf '  answers recorded    %s\n' "$by_answer"
printf '  other answers       %s non-200 %s\n' "$other" "$(wrk_figure "$work/retention.wrk" errors)"
