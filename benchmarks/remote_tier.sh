#!/usr/bin/env bash
# The remote KV tier's figures (docs/tiers.md): starts a redis-server of its own on a free
# loopback port with a temporary directory (never a system instance), runs bench_remote_tier
# (tier and raw hiredis throughput, load vs prefill) and redis-benchmark at the same value sizes
# and pipeline depth with one connection, then stops Redis.
#   benchmarks/remote_tier.sh [BUILD_DIR]     (default build/)
# With LIKE_FOR_LIKE=R it then alternates, R times, the tier on stories260K's 20,656-byte blocks
# (new keys stored, then loaded) with redis-benchmark doing the same work (SETs of new keys:
# -r 100000000; GETs of as many stored keys), and prints each round's ratios and their medians
# and minima: the target ">= 70 % of redis-benchmark", measured side by side.
# With CLUSTER=M it does those like-for-like rounds on a Redis Cluster of its own instead (M
# masters, CLUSTER_REPLICAS replicas each, default 0; free loopback ports, temporary
# directories): the tier through redis-cluster:// against `redis-benchmark --cluster` (one
# connection per master, the same pipeline depth and value size).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
if [ "${CLUSTER:-0}" -gt 0 ]; then
  exec /usr/bin/python3 benchmarks/remote_tier_cluster.py "$BUILD_DIR" "$CLUSTER" "${CLUSTER_REPLICAS:-0}" \
    "${LIKE_FOR_LIKE:-5}" "${LIKE_BLOCKS:-2048}"
fi
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

[ "${LIKE_FOR_LIKE:-0}" -gt 0 ] || exit 0
echo "== like for like: the tier against redis-benchmark, alternated, ${LIKE_FOR_LIKE} rounds =="
n=${LIKE_BLOCKS:-2048}
ratios=()
for round in $(seq "$LIKE_FOR_LIKE"); do
  redis-cli -p "$port" flushall >/dev/null
  tier=$("$BUILD_DIR/benchmarks/bench_remote_tier" --url "redis://127.0.0.1:$port/0" --model ../shared/models/stories260K.bin \
    --blocks "$n" --rounds 1 --random-model 0 --tier-only 1)
  read -r size store load < <(python3 -c "import json,sys; t=json.loads(sys.argv[1])['models']['stories260K']['tier']; \
print(t['value_bytes'], t['store']['blocks_per_s_median'], t['load']['blocks_per_s_median'])" "$tier")
  redis-cli -p "$port" flushall >/dev/null
  set=$(redis-benchmark -p "$port" -c 1 -P 32 -d "$size" -n "$n" -r 100000000 -t set -q 2>&1 | tr '\r' '\n' |
    grep -oE "^SET: [0-9.]+" | grep -oE "[0-9.]+$")
  # GETs of stored keys: fill a keyspace of n keys first (-r n: key:000000000000 .. n-1).
  redis-benchmark -p "$port" -c 1 -P 32 -d "$size" -n $((4 * n)) -r "$n" -t set -q >/dev/null 2>&1
  get=$(redis-benchmark -p "$port" -c 1 -P 32 -d "$size" -n "$n" -r "$n" -t get -q 2>&1 | tr '\r' '\n' |
    grep -oE "^GET: [0-9.]+" | grep -oE "[0-9.]+$")
  echo "round $round: tier store $store/s, redis-benchmark SET (new keys) $set/s; tier load $load/s, redis-benchmark GET $get/s"
  ratios+=("$store $set $load $get")
done
python3 - "${ratios[@]}" <<'PY'
import statistics, sys
rows = [list(map(float, r.split())) for r in sys.argv[1:]]
for name, a, b in (("store / SET", 0, 1), ("load / GET", 2, 3)):
    r = [row[a] / row[b] for row in rows]
    print(f"{name}: median {statistics.median(r):.2f}, min {min(r):.2f}, max {max(r):.2f} ({len(r)} rounds)")
PY
