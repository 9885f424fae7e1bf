#!/usr/bin/env bash
# kache's resident memory against the bytes it holds, at several cluster sizes, to separate the fixed part
# (binary, runtime, allocator) from the per-object part (RSS ÷ bytes held).
#
# For each pod count: the sim (the load tool's workload, seed 1) and kache caching pods only; once kache's
# store holds every pod, after a settle of SETTLE seconds, prints VmRSS, kache_store_bytes{kind="live"} (the
# store's estimate of its heap bytes: objects, keys, labels, raw JSON), the pods' JSON bytes (the sum of the
# stored objects' raw JSON, from the list's Content-Length) and the ratios.
#
# Run (release build first): loadtest/scripts/rss-per-object.sh [PODS...]   (default: 0 10000 50000)
# Env: BIN (default target/release), SETTLE (default 3), KACHE_ARGS (extra `kache serve` flags).
set -euo pipefail
BIN=${BIN:-${CARGO_TARGET_DIR:-target}/release}
SETTLE=${SETTLE:-3}
counts=("$@")
[ ${#counts[@]} -gt 0 ] || counts=(0 10000 50000)
tmp=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT

metric() { # metric URL NAME-WITH-LABELS
  curl -s "$1/metrics" | awk -v n="$2" 'index($0, n) == 1 { print $NF; exit }'
}

printf '%8s %12s %14s %14s %10s %10s\n' pods "VmRSS MiB" "live MiB" "JSON MiB" "RSS/live" "RSS/JSON"
for n in "${counts[@]}"; do
  "$BIN/kache-sim" --listen 127.0.0.1:0 --seed 1 --pods "$n" --namespaces 10 --nodes 10 --churn 0 >"$tmp/sim-$n" 2>&1 &
  sim=$!; pids+=("$sim")
  for _ in $(seq 600); do grep -q 'listening on' "$tmp/sim-$n" && break; sleep 0.1; done
  url=$(sed -n 's/^kache-sim listening on //p' "$tmp/sim-$n" | head -1)
  port=$((20000 + RANDOM % 20000)); mport=$((port + 1))
  "$BIN/kache" --log-level warn serve --upstream "$url" --listen "127.0.0.1:$port" --metrics-listen "127.0.0.1:$mport" \
    --resources pods --no-lazy ${KACHE_ARGS:-} >"$tmp/kache-$n" 2>&1 &
  kache=$!; pids+=("$kache")
  murl="http://127.0.0.1:$mport"
  for _ in $(seq 1200); do
    objs=$(metric "$murl" 'kache_store_objects{group="",resource="pods"}' 2>/dev/null || true)
    [ "${objs:-x}" = "$n" ] && break
    sleep 0.1
  done
  sleep "$SETTLE"
  rss=$(awk '/VmRSS/ { print $2 * 1024 }' "/proc/$kache/status")
  live=$(metric "$murl" 'kache_store_bytes{group="",resource="pods",kind="live"}')
  json=$(curl -s -A kache-rss -o /dev/null -w '%{size_download}' "http://127.0.0.1:$port/api/v1/pods?resourceVersion=0")
  awk -v n="$n" -v r="$rss" -v l="${live:-0}" -v j="$json" 'BEGIN {
    m = 1048576; printf "%8d %12.1f %14.1f %14.1f %10s %10s\n", n, r/m, l/m, j/m,
      (l > 0 ? sprintf("%.2f", r/l) : "-"), (j > 1000 ? sprintf("%.2f", r/j) : "-") }'
  kill "$kache" "$sim"; wait "$kache" "$sim" 2>/dev/null || true
done
