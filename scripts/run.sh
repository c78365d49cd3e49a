#!/usr/bin/env bash
# Sets everything up, then runs pagedkv's main job on its built-in defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec scripts/main_job.sh "$@"
