#!/usr/bin/env bash
# pagedkv's main job on built-in defaults: a memory plan for a large model, vLLM's peer workload
# replayed through the manager, the serving demo, and pagedkv serve under a short bench serve load.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/pagedkv
# (The CLI picks its OpenMP wait policy itself: a short spin, then sleep; tools/pagedkv/openmp_defaults.cpp.)

echo "== pagedkv plan: how many KV blocks Llama-2-70B gets in 43 GB (the reference texts' example) =="
$BIN plan --model llama-2-70b --kv-memory 43GB --block-size 16 --kv-dtype fp16
echo
echo "== pagedkv bench peer: vLLM's own workload through our manager (counters must match vLLM's) =="
$BIN bench peer --scenario A --runs 3
if $BIN --help 2>/dev/null | grep -q "^  demo"; then
  echo
  echo "== pagedkv demo: a serving workload on the paged engine =="
  $BIN demo "$@"
fi

echo
echo "== pagedkv serve + bench serve: the OpenAI-compatible server under a short load =="
# The server on its defaults (stories260K), on a free port of 127.0.0.1; always stopped.
log=$(mktemp)
$BIN serve --port 0 >"$log" 2>&1 &
server_pid=$!
trap 'kill -TERM $server_pid 2>/dev/null; wait $server_pid 2>/dev/null; rm -f "$log"' EXIT
url=""
for _ in $(seq 1 300); do  # up to 30 s
  url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$log")
  [ -n "$url" ] && break
  kill -0 $server_pid 2>/dev/null || break
  sleep 0.1
done
if [ -z "$url" ]; then
  echo "pagedkv serve did not start:"; cat "$log"; exit 1
fi
cat "$log"
$BIN bench serve --base-url "$url" --num-prompts 200 --random-input-len 64 --random-output-len 64 --request-rate 200
echo
echo "-- a request through the API (curl) --"
curl -s "$url/v1/completions" -H 'Content-Type: application/json' \
     -d '{"prompt": "Once upon a time", "max_tokens": 40, "temperature": 0}'
echo
kill -TERM $server_pid
wait $server_pid
trap - EXIT
tail -2 "$log"
rm -f "$log"
