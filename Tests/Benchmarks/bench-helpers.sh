# Helpers shared by the benchmark scripts that run an ingress under wrk; sourced, not run.

# milliseconds, from a wrk latency such as 812.00us, 1.53ms or 1.02s
to_ms() {
    awk -v v="$1" 'BEGIN {
        n = v + 0; u = v; sub(/^[0-9.]+/, "", u)
        if (u == "us") n /= 1000; else if (u == "s") n *= 1000; else if (u == "m") n *= 60000
        printf "%.3f", n }'
}

# wrk_figure FILE rps|p50|p99|errors: one figure of a `wrk --latency` report
wrk_figure() {
    case "$2" in
        rps) awk '/^Requests\/sec:/ {print $2}' "$1" ;;
        p50) to_ms "$(awk '$1 == "50%" {print $2}' "$1")" ;;
        p99) to_ms "$(awk '$1 == "99%" {print $2}' "$1")" ;;
        errors) awk '/Non-2xx|Socket errors/ {print}' "$1" | tr '\n' ' ' ;;
    esac
}

# wrk_post_bodies PATH BODIES DURATION OUTPUT: wrk -t$THREADS -c$CONNECTIONS POSTs the lines of
# BODIES to $base PATH, each once (Tests/Benchmarks/wrk-post-bodies.lua); the report goes to OUTPUT
wrk_post_bodies() {
    BODIES="$2" WRK_THREADS=$THREADS TARGET_PATH=$1 \
        wrk -t$THREADS -c"$CONNECTIONS" -d"$3" --timeout 10s --latency -s Tests/Benchmarks/wrk-post-bodies.lua "$base" >"$4"
}

# wrk_post_counts OUTPUT: "accepted duplicate other reused seconds" of a wrk_post_bodies report
wrk_post_counts() {
    sed -n 's/^lua accepted=\([0-9]*\) duplicate=\([0-9]*\) other=\([0-9]*\) reused=\([0-9]*\) seconds=\([0-9.]*\)$/\1 \2 \3 \4 \5/p' "$1"
}

# bench_scratch NAME: this run's own database and topic ($database, $bench_url, $topic) and work
# folder ($work), removed on exit together with the ingress whose pid the script sets in
# $ingress_pid. Services already running (another checkout's, say) are used as they are: start.sh
# from a worktree would otherwise set up a second cluster on the same port.
# BENCH_DATABASE=NAME runs on that existing database instead (the scale run's), kept at the end.
bench_scratch() {
    work=$(mktemp -d)
    ingress_pid=""
    database="${BENCH_DATABASE:-bench_$1_$(date +%s)_$$}"
    topic="bench.events.$database"
    bench_url="${DATABASE_URL%/*}/$database"
    trap bench_cleanup EXIT
    if ! pg_isready -q -d "$DATABASE_URL" || ! (exec 3<>"/dev/tcp/${KAFKA_BROKERS%:*}/${KAFKA_BROKERS##*:}") 2>/dev/null; then
        bash deploy/local/start.sh >/dev/null
    fi
}

bench_cleanup() {
    if [ -n "$ingress_pid" ]; then kill "$ingress_pid" 2>/dev/null || true; wait "$ingress_pid" 2>/dev/null || true; fi
    [ -n "${BENCH_DATABASE:-}" ] || psql "$DATABASE_URL" -qc "DROP DATABASE IF EXISTS $database" >/dev/null 2>&1 || true
    "$(tansu_bin)" topic delete --broker "tcp://$KAFKA_BROKERS" "$topic" >/dev/null 2>&1 || true
    rm -rf "$work"
}

# bench_database: creates this run's database, unless BENCH_DATABASE names one that exists.
bench_database() {
    [ -n "${BENCH_DATABASE:-}" ] || psql "$DATABASE_URL" -qc "CREATE DATABASE $database"
}
