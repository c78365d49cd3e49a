#!/usr/bin/env bash
# The soak (docs/reliability.md): two pagedkv serve instances on one Redis under load while a
# fault schedule runs, then the checks; exits 0 only when every check held, and prints one
# summary line.
#   scripts/soak.sh MINUTES [--server-binary build-asan/pagedkv] [--keep] [--workers N]
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
shift || true
exec /usr/bin/python3 tests/soak/soak.py --minutes "$minutes" "$@"
