# Helpers shared by the benchmark scripts that read wrk's output; sourced, not run.

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
