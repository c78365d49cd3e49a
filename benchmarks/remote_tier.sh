#!/usr/bin/env bash
# The remote KV tier's figures (docs/tiers.md): starts a redis-server of its own on a free
# loopback port with a temporary directory (never a system instance), runs bench_remote_tier
# (tier and raw hiredis throughput, load vs prefill) and redis-benchmark at the same value sizes
# and pipeline depth with one connection, then stops Redis.
#   benchmarks/remote_tier.sh [BUILD_DIR]     (default build/)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
dir=$(mktemp -d /tmp/pagedkv-redis-bench-XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --dir "$dir" --save '' --appendonly no --daemonize no \
  --loglevel warning --logfile "$dir/redis.log" &
redis_pid=$!
trap 'kill $redis_pid 2>/dev/null; wait $redis_pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$BUILD_DIR/benchmarks/bench_remote_tier" --url "redis://127.0.0.1:$port/0" \
  --model ../shared/models/stories260K.bin --blocks "${BLOCKS:-256}" --rounds "${ROUNDS:-5}" \
  --random-model "${RANDOM_MODEL:-1}" | tee "$dir/tier.json"
echo "== redis-benchmark, one connection, pipeline 32, the same value sizes =="
for size in $(python3 -c "import json; d=json.load(open('$dir/tier.json')); print(' '.join(str(m['tier']['value_bytes']) for m in d['models'].values()))"); do
  n=$(( 2000000000 / size < 20000 ? 2000000000 / size : 20000 ))
  redis-cli -p "$port" flushall >/dev/null
  echo "value bytes $size:"
  # One key (no -r): every GET returns a value of this size, as the tier's loads do.
  redis-benchmark -p "$port" -c 1 -P 32 -d "$size" -n "$n" -t set,get -q 2>&1 | tr '\r' '\n' | grep -E "^(SET|GET): [0-9.]+ requests"
done
