#!/usr/bin/env bash
# Handshake rate, server CPU per handshake and memory per idle connection: shuck next to nginx
# (stream TLS proxy) and HAProxy (mode tcp, ssl), measured in the same run on the same machine.
#
# Each terminator runs ONE worker pinned to CPU 0; the load (openssl s_time) and the backend run
# on CPU 1. All use the same ECDSA P-256 certificate, TLS 1.3 with TLS_AES_128_GCM_SHA256 and
# X25519 (what the OpenSSL client offers), and proxy to the same backend.
#
# usage: bench/compare.sh [seconds-per-run] [idle-connections]
# needs: root for apt-get (nginx-light, libnginx-mod-stream, haproxy), a release build of shuck.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-10}
IDLE=${2:-2000}
SHUCK=${SHUCK:-./target/release/shuck}
[ -x "$SHUCK" ] || cargo build --release
if ! command -v haproxy >/dev/null || [ ! -e /usr/lib/nginx/modules/ngx_stream_module.so ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx-light libnginx-mod-stream haproxy
fi

W=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$W"; }
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 \
  -keyout "$W/key.pem" -out "$W/cert.pem" -subj /CN=localhost \
  -addext subjectAltName=DNS:localhost 2>/dev/null
cat "$W/cert.pem" "$W/key.pem" > "$W/bundle.pem"

BACKEND=127.0.0.1:18080
head -c 1024 /dev/zero | tr '\0' x > "$W/1k"
cat > "$W/backend.conf" <<CONF
worker_processes 1; daemon off; pid $W/backend.pid; error_log $W/backend.err;
events { worker_connections 16384; }
http { access_log off; server { listen $BACKEND; root $W; location / { try_files /1k =404; } } }
CONF
taskset -c 1 nginx -c "$W/backend.conf" -p "$W" & PIDS+=($!)

cat > "$W/nginx.conf" <<CONF
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
worker_processes 1; worker_cpu_affinity 1; daemon off; pid $W/nginx.pid; error_log $W/nginx.err;
worker_rlimit_nofile 20000;
events { worker_connections 16384; }
stream {
  server {
    listen 127.0.0.1:18444 ssl; proxy_pass $BACKEND; tcp_nodelay on;
    ssl_certificate $W/cert.pem; ssl_certificate_key $W/key.pem;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m; ssl_session_tickets on;
  }
}
CONF
cat > "$W/haproxy.cfg" <<CONF
global
  nbthread 1
  cpu-map 1/1 0
  maxconn 9000
defaults
  mode tcp
  timeout connect 5s
  timeout client 300s
  timeout server 300s
frontend tls
  bind 127.0.0.1:18445 ssl crt $W/bundle.pem
  default_backend be
backend be
  server s1 $BACKEND
CONF

taskset -c 0 "$SHUCK" serve --allow-root --listen 127.0.0.1:18443 --backend "$BACKEND" --cert "$W/bundle.pem" \
  --workers 1 --ready-file "$W/shuck.ready" 2>"$W/shuck.log" & PIDS+=($!); SHUCK_PID=$!
taskset -c 0 nginx -c "$W/nginx.conf" -p "$W" & PIDS+=($!)
taskset -c 0 haproxy -f "$W/haproxy.cfg" -db 2>"$W/haproxy.log" & PIDS+=($!); HAPROXY_PID=$!
for _ in $(seq 100); do [ -s "$W/shuck.ready" ] && [ -s "$W/nginx.pid" ] && break; sleep 0.1; done
NGINX_WORKER=$(pgrep -P "$(cat "$W/nginx.pid")" | head -1)

cpu_ticks() { # utime+stime of a process (all threads), in clock ticks
  awk '{print $14 + $15}' "/proc/$1/stat"
}
HZ=$(getconf CLK_TCK)

# run NAME PORT PID LABEL S_TIME-ARGS...
run() {
  local name=$1 port=$2 pid=$3 label=$4; shift 4
  local t0 t1 out conns secs
  t0=$(cpu_ticks "$pid")
  # -www: one HTTP/1.0 request per connection and a 1 KiB answer, as in Bernat's method.
  out=$(taskset -c 1 openssl s_time -connect "127.0.0.1:$port" -time "$SECS" -www / "$@" 2>/dev/null \
        | grep 'connections in .* real seconds')
  t1=$(cpu_ticks "$pid")
  conns=$(echo "$out" | awk '{print $1}')
  secs=$(echo "$out" | awk '{print $4}')
  awk -v n="$name" -v m="$label" -v c="$conns" -v s="$secs" -v d="$((t1 - t0))" -v hz="$HZ" \
    'BEGIN { printf "| %-7s | %-15s | %7.0f | %18.0f |\n", n, m, c / s, (d / hz) * 1e6 / c }'
}

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "shuck $("$SHUCK" --version | cut -d' ' -f2), $(nginx -v 2>&1 | cut -d' ' -f3), $(haproxy -v | head -1 | cut -d' ' -f3), $(openssl version | cut -d' ' -f1-2)"
echo
echo "| server  | handshake       | conn/s  | server CPU µs/conn |"
echo "|---------|-----------------|---------|--------------------|"
T13=(-tls1_3 -ciphersuites TLS_AES_128_GCM_SHA256)
T12=(-tls1_2 -cipher ECDHE-ECDSA-AES128-GCM-SHA256)
for t in "shuck 18443 $SHUCK_PID" "nginx 18444 $NGINX_WORKER" "haproxy 18445 $HAPROXY_PID"; do
  set -- $t
  run "$1" "$2" "$3" "TLS1.3 full" -new "${T13[@]}"
  run "$1" "$2" "$3" "TLS1.2 full" -new "${T12[@]}"
  run "$1" "$2" "$3" "TLS1.2 resumed" -reuse "${T12[@]}"
done
echo
echo "idle TLS connections held: $IDLE (RSS growth of the terminator's processes / connections)"
for t in "shuck 18443 $SHUCK_PID" "nginx 18444 $NGINX_WORKER" "haproxy 18445 $HAPROXY_PID"; do
  set -- $t
  echo "$1: $(taskset -c 1 python3 bench/idle_rss.py 127.0.0.1 "$2" "$IDLE" "$3")"
done
