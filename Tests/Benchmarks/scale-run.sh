#!/usr/bin/env bash
# The scale run (issue 17, point 4): the ingress, fulfillment and lookup benchmarks on an empty
# (or, for the lookup, small) database and then on scale-load.sh's full database, back to back in
# the same run, each figure as a ratio scale / empty (target >= 0.85); the daily close of 500,000
# users on the full database (target < 60 s); and the plans PostgreSQL chose for the queries the
# services ran on the full database, with every sequential scan of a large table called out.
# Prints figures; it is not a test and asserts nothing.
#
#   Tests/Benchmarks/scale-run.sh                          # loads scale_run first unless it exists
#   SCALE_DATABASE=scale_full Tests/Benchmarks/scale-run.sh
#   SCALE_RELOAD=1 SCALE=0.1 Tests/Benchmarks/scale-run.sh # a fresh, smaller load
#
# The full database needs about 40 GB of disk (see scale-load.sh). The benchmarks add their own
# rows to it: drop it (DROP DATABASE) when done, or reload with SCALE_RELOAD=1.
set -euo pipefail
cd "$(dirname "$0")/../.."
source deploy/local/env.sh
command -v swift >/dev/null 2>&1 || export PATH="/opt/swift/usr/bin:$PATH"

database=${SCALE_DATABASE:-scale_run}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
superuser() { psql -h 127.0.0.1 -p "$PG_PORT" -U postgres -qAt "$@"; }
bash deploy/local/start.sh >/dev/null

exists=$(superuser -d postgres -c "SELECT count(*) FROM pg_database WHERE datname = '$database'")
if [ "$exists" = 0 ] || [ "${SCALE_RELOAD:-0}" = 1 ]; then
    [ "$exists" = 0 ] || superuser -d postgres -c "DROP DATABASE $database"
    echo "loading $database (scale-load.sh, SCALE=${SCALE:-1})..."
    SCALE_DATABASE="$database" bash Tests/Benchmarks/scale-load.sh | tee "$work/load.log"
else
    echo "using the loaded database $database"
fi

# Plans: auto_explain logs the plan of one statement in 50 run against the scale database (the
# sampling keeps its cost out of the figures), in JSON, to the server's log, whose lines then name
# the client (application_name) that ran it. Both are undone on exit.
log="$PG_HOME/postgresql.log"
restore() {
    superuser -d postgres -c "ALTER DATABASE $database RESET ALL" -c "ALTER SYSTEM RESET log_line_prefix" \
        -c "SELECT pg_reload_conf()" >/dev/null || true
    # SCALE_KEEP=DIR keeps every benchmark's output and the plans, also of a run that failed.
    if [ -n "${SCALE_KEEP:-}" ]; then mkdir -p "$SCALE_KEEP"; cp "$work"/*.out "$work"/*.log "$SCALE_KEEP/" 2>/dev/null || true; fi
    rm -rf "$work"
}
trap restore EXIT
superuser -d postgres -c "ALTER DATABASE $database SET session_preload_libraries = 'auto_explain'" \
    -c "ALTER DATABASE $database SET auto_explain.log_min_duration = 0" \
    -c "ALTER DATABASE $database SET auto_explain.sample_rate = 0.02" \
    -c "ALTER DATABASE $database SET auto_explain.log_format = 'json'" \
    -c "ALTER SYSTEM SET log_line_prefix = '%m [%p] %a '" -c "SELECT pg_reload_conf()" >/dev/null
log_from=$(stat -c %s "$log")

figure() {  # file key: the value of key=value in the last line holding it
    grep -o "$2=[0-9.]*" "$1" | tail -1 | cut -d= -f2
}
run() {  # name script env...: runs a benchmark, output kept as $work/name.out
    local name=$1 script=$2; shift 2
    echo "== $name: $script $*"
    env "$@" bash "Tests/Benchmarks/$script" >"$work/$name.out" 2>&1 || { tail -40 "$work/$name.out"; exit 1; }
}

run ingress-empty ingress-notifications.sh BENCH_READS=0 BENCH_SUSTAINED=0
ingress_from=$(superuser -d "$database" -c "SELECT now()")
run ingress-scale ingress-notifications.sh BENCH_READS=0 BENCH_SUSTAINED=0 BENCH_DATABASE="$database"
# The ingress benchmark's notifications (unknown users, never drained) would be re-published by a
# later run's sweeper and drained in the middle of its fulfillment figures: they are set aside.
superuser -d "$database" -c "UPDATE inbound_event SET process_status = 'DEAD', error_code = 'BENCH_LEFTOVER'
                              WHERE received_at >= '$ingress_from' AND process_status = 'RECEIVED'" \
    -c "DELETE FROM event_outbox WHERE created_at >= '$ingress_from'" >/dev/null
run fulfillment-empty fulfillment-throughput.sh
run fulfillment-scale fulfillment-throughput.sh BENCH_DATABASE="$database"
run lookup-small lookup-latency.sh
run lookup-scale lookup-latency.sh BENCH_DATABASE="$database"
# The daily close of every user of the database: one bill each for the first day without bills,
# closed by the workers' job (`subsctl credits run-jobs`) just after that day's end.
echo "== close-scale: one day of bills for every user of $database, then subsctl credits run-jobs"
scale_sql() { psql "${DATABASE_URL%/*}/$database" -qAt -v ON_ERROR_STOP=1 -c "$1"; }
swift build -c release --product subsctl >/dev/null 2>&1
day=$(scale_sql "SELECT coalesce(max(day) + 1, current_date - 1) FROM credit_daily_bill")
scale_sql "INSERT INTO credit_daily_bill (user_id, day, total_cost)
               SELECT user_id, '$day', 1 + (hashtext(user_id)::bigint & 1048575) * 9 FROM app_user;
           ANALYZE credit_daily_bill"
started=$(date +%s.%N)
DATABASE_URL="${DATABASE_URL%/*}/$database" LOG_LEVEL=warning "$(swift build -c release --show-bin-path)/subsctl" credits run-jobs \
    --now "$(date -u -d "$day + 1 day" +%Y-%m-%dT00:00:05Z)" >"$work/close-scale.out" 2>&1
close_wall=$(awk -v s="$started" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')
tail -c +"$((log_from + 1))" "$log" >"$work/plans.log"
[ -s "$work/plans.log" ] || echo "warning: nothing was logged to $log (a server restarted without start.sh logs elsewhere)" >&2

accepted() { awk '/^  accepted / { print $2 }' "$1"; }
drained() { grep '^fulfillment_throughput workers=2 ' "$1" | tail -1 | grep -o 'events_per_second=[0-9]*' | cut -d= -f2; }
lookup_p99() { grep '^connections=' "$1" | tail -1 | grep -o 'p99_ms=[0-9.]*' | cut -d= -f2; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0) ? a / b : 0 }'; }
rows=$(psql "${DATABASE_URL%/*}/$database" -qAtc "SELECT (SELECT count(*) FROM app_user) || ' users, '
    || (SELECT count(*) FROM apple_transaction) || ' transactions, ' || (SELECT count(*) FROM inbound_event) || ' events, '
    || pg_size_pretty(pg_database_size(current_database()))")

echo
echo "== scale run: $(nproc) cores; $database holds $rows =="
[ -f "$work/load.log" ] && grep '^loaded ' "$work/load.log"
ie=$(accepted "$work/ingress-empty.out"); is=$(accepted "$work/ingress-scale.out")
echo "ingress, notifications accepted at saturation: empty $ie/s, scale $is/s, scale / empty = $(ratio "$is" "$ie") (target >= 0.85)"
fe=$(drained "$work/fulfillment-empty.out"); fs=$(drained "$work/fulfillment-scale.out")
echo "fulfillment, 2 workers draining renewals: empty $fe/s, scale $fs/s, scale / empty = $(ratio "$fs" "$fe") (target >= 0.85)"
le=$(lookup_p99 "$work/lookup-small.out"); ls=$(lookup_p99 "$work/lookup-scale.out")
echo "lookup p99 at 8 connections: small database $le ms, scale $ls ms, small / scale = $(ratio "$le" "$ls") (target >= 0.85)"
grep -E '^(asking for|connections=)' "$work/lookup-small.out" "$work/lookup-scale.out" | sed "s|$work/||; s/^/  /"
read -r closed close_seconds mismatches < <(sed -n 's/.*bills_closed=\([0-9]*\).* seconds=\([0-9.]*\) ledger_mismatches=\([0-9]*\).*/\1 \2 \3/p' "$work/close-scale.out")
printf 'daily close of %s: %s bills closed in %.1f s by the jobs (%s s with the ledger check and start-up; target < 60 s), %s ledger mismatches\n' \
    "$day" "$closed" "$close_seconds" "$close_wall" "$mismatches"
echo "the figures of each run:"
for name in ingress-empty ingress-scale; do grep -E '^  (accepted|latency|cost per)' "$work/$name.out" | sed "s/^/  $name /"; done
for name in fulfillment-empty fulfillment-scale; do  # the script prints its figures twice: once each
    grep -E '^(fulfillment_(throughput|pgbench|latency )|2 workers / pgbench)' "$work/$name.out" | awk '!seen[$0]++' | sed "s/^/  $name /"
done
echo
echo "plans sampled on $database during the runs above (auto_explain, one statement in 50):"
python3 Tests/Benchmarks/explain-summary.py "$work/plans.log" "${DATABASE_URL%/*}/$database"
