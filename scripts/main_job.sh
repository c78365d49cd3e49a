#!/usr/bin/env bash
# pagedkv's main job on built-in defaults: the serving demo when it is built, preceded by a
# memory plan for a large model and a replay of the vLLM peer workload through the manager.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/pagedkv
# Tiny models on shared machines: never let idle OpenMP threads spin.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}

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
