#!/usr/bin/env bash
# A fleet on this machine, with failures (docs/fleet.md): 6 pagedkv serve instances on a 6-node
# Redis Cluster behind 2 routers, under the Mooncake conversation trace, while an instance, a
# router and a Redis master are killed. Needs the build (scripts/setup.sh) and ../shared.
#   scripts/fleet.sh [--num-prompts 300] [--policies kv,round-robin] [--short] [--json] ...
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x build/pagedkv ] || { echo "fleet.sh: build/pagedkv is missing: run scripts/setup.sh" >&2; exit 2; }
OMP_WAIT_POLICY=passive exec /usr/bin/python3 benchmarks/fleet.py "$@"
