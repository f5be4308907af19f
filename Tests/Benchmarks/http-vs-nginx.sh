#!/usr/bin/env bash
# Throughput and tail latency of HTTPServer (Tests/Benchmarks/BenchHTTPServer) next to nginx
# serving the same 62-byte JSON body, measured with wrk in the same run. Prints figures; it is
# not a test and asserts nothing.
#
#   Tests/Benchmarks/http-vs-nginx.sh
#   OURS_PORT=18081 NGINX_PORT=18082 BENCH_THREADS=4 DURATION=10s CONNECTIONS=64 Tests/Benchmarks/http-vs-nginx.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

OURS_PORT=${OURS_PORT:-18081}
NGINX_PORT=${NGINX_PORT:-18082}
BENCH_THREADS=${BENCH_THREADS:-4}
DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
# Must stay byte for byte what BenchHTTPServer returns.
BODY='{"status":"ok","service":"bench","items":[1,2,3],"ready":true}'

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

wait_for() {  # url: poll until it answers with the expected body, at most 10 s
    for _ in $(seq 100); do
        if [ "$(curl -s "$1" 2>/dev/null)" = "$BODY" ]; then return 0; fi
        sleep 0.1
    done
    echo "no answer from $1" >&2
    exit 1
}

echo "building BenchHTTPServer (release)..."
swift build -c release --product BenchHTTPServer >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
bin="$(swift build -c release --show-bin-path)/BenchHTTPServer"

"$bin" "$OURS_PORT" "$BENCH_THREADS" >"$work/ours.log" 2>&1 &
pids+=($!)

cat >"$work/nginx.conf" <<CONF
worker_processes 2;
daemon off;
pid $work/nginx.pid;
error_log $work/nginx-error.log warn;
events { worker_connections 4096; }
http {
    access_log off;
    default_type application/json;
    client_body_temp_path $work/client_body;
    proxy_temp_path $work/proxy;
    fastcgi_temp_path $work/fastcgi;
    uwsgi_temp_path $work/uwsgi;
    scgi_temp_path $work/scgi;
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location = /bench { return 200 '$BODY'; }
    }
}
CONF
nginx -e "$work/nginx-error.log" -p "$work" -c "$work/nginx.conf" &
pids+=($!)

wait_for "http://127.0.0.1:$OURS_PORT/bench"
wait_for "http://127.0.0.1:$NGINX_PORT/bench"

source Tests/Benchmarks/bench-helpers.sh

measure() {  # name port
    wrk -t2 -c"$CONNECTIONS" -d2s "http://127.0.0.1:$2/bench" >/dev/null  # warm-up
    wrk -t2 -c"$CONNECTIONS" -d"$DURATION" --latency "http://127.0.0.1:$2/bench" >"$work/$1.wrk"
    local rps p99
    rps=$(wrk_figure "$work/$1.wrk" rps)
    p99=$(wrk_figure "$work/$1.wrk" p99)
    printf '%-8s %12s req/s   p99 %9s ms   %s\n' "$1" "$rps" "$p99" "$(wrk_figure "$work/$1.wrk" errors)"
    eval "${1}_rps=$rps; ${1}_p99=$p99"
}

echo "wrk -t2 -c$CONNECTIONS -d$DURATION --latency; HTTPServer with $BENCH_THREADS MHD threads; nginx with 2 workers; $(nproc) cores"
measure ours "$OURS_PORT"
measure nginx "$NGINX_PORT"
awk -v a="$ours_rps" -v b="$nginx_rps" -v c="$ours_p99" -v d="$nginx_p99" \
    'BEGIN { printf "ratio ours/nginx: throughput %.2f, p99 latency %.2f\n", a / b, c / d }'
