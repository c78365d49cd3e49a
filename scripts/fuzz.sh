#!/usr/bin/env bash
# Fuzzes one parser of outside input with libFuzzer (clang-14, ASan+UBSan).
#   scripts/fuzz.sh                  lists the targets, one a line
#   scripts/fuzz.sh TARGET SECONDS   builds build-fuzz/TARGET and runs it for SECONDS; exits
#                                    non-zero on a crash (the crashing input is left in build-fuzz/)
# Seeds come from tests/fuzz/corpus/TARGET; new inputs the fuzzer finds go to a working copy in
# build-fuzz/corpus/TARGET, never into the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A SOURCES=(
  # target           sources it needs besides its own file (kept small: no engine, no model)
  [openai_request]="src/server/openai_request.cpp src/server/api_error.cpp src/server/chat_template.cpp src/server/stop_string_matcher.cpp"
)

if [ $# -eq 0 ]; then
  for t in "${!SOURCES[@]}"; do echo "$t"; done | sort
  exit 0
fi
target=$1
seconds=${2:-60}
if [ -z "${SOURCES[$target]+x}" ]; then
  echo "fuzz.sh: unknown target '$target'; the targets are:" >&2
  "$0" >&2
  exit 2
fi
CXX=${CXX_FUZZ:-clang++-14}
command -v "$CXX" >/dev/null || { echo "fuzz.sh: $CXX not found (scripts/setup.sh installs clang-14)" >&2; exit 2; }

out=build-fuzz
mkdir -p "$out/corpus/$target"
binary="$out/fuzz_$target"
# shellcheck disable=SC2086
"$CXX" -std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer,address,undefined \
  -fno-sanitize-recover=undefined -Iinclude "tests/fuzz/fuzz_$target.cpp" ${SOURCES[$target]} \
  $(pkg-config --cflags --libs fmt) -o "$binary"
cp -n tests/fuzz/corpus/"$target"/* "$out/corpus/$target/" 2>/dev/null || true
echo "fuzz.sh: running $target for $seconds s"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$binary" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$out/$target-" \
  -max_len=4096 "$out/corpus/$target"
