#!/usr/bin/env bash
# Fuzzes one parser of outside input with libFuzzer (clang-14, ASan+UBSan).
#   scripts/fuzz.sh                  lists the targets (tests/fuzz/fuzz_TARGET.cpp), one a line
#   scripts/fuzz.sh TARGET SECONDS   builds fuzz_TARGET and runs it for SECONDS; exits non-zero on
#                                    a crash (the crashing input is left in build-fuzz/)
#   scripts/fuzz.sh TARGET 0         builds it only
# The targets are CMake targets of a clang build with sanitizers and libFuzzer's instrumentation
# (PAGEDKV_BUILD_FUZZERS): FUZZ_BUILD_DIR (default build-fuzz) is configured so when it has no cache
# yet; scripts/test.sh points it at its ASan build, which builds them with the sanitized tests.
# FUZZ_BUILD=0 runs what is built without building. Objects compile JOBS at a time (the cores).
# Seeds come from tests/fuzz/corpus/TARGET; new inputs the fuzzer finds go to a working copy in
# build-fuzz/corpus/TARGET, never into the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."

# Longest input each target is given (libFuzzer's -max_len): a GGUF header with metadata, a
# tokenizer file with its vocabulary, need more than a request body.
declare -A MAX_LEN=([gguf_download]=512 [gguf_model]=65536 [gguf_file]=65536 [llama2c_tokenizer]=16384 [chat_template]=20000)

# Seeds taken from ../shared at run time (never copied into the tree): the starts of the real
# files each parser reads.
shared_seeds() {
  local target=$1 dir=$2 shared=../shared
  [ -d "$shared" ] || return 0
  case $target in
    chat_template)
      for f in "$shared"/chat_templates/templates/*.jinja; do
        [ -f "$f" ] && cp "$f" "$dir/shared-$(basename "$f")"
      done ;;
    traces)
      for f in "$shared"/traces/*.jsonl "$shared"/traces/*.csv; do
        [ -f "$f" ] && head -n 12 "$f" > "$dir/shared-$(basename "$f")"
      done ;;
    llama2c_checkpoint)
      # The start of the real checkpoint: the fuzzer mutates its header from there.
      [ -f "$shared/models/stories260K.bin" ] && head -c 4096 "$shared/models/stories260K.bin" > "$dir/shared-stories260K-head"
      ;;
    gguf_file)
      for f in "$shared"/models/stories260Ktok512.gguf "$shared"/models/gguf/tiny-llama.q4_0.gguf "$shared"/models/gguf/tiny-gemma2.q8_0.gguf; do
        [ -f "$f" ] && head -c 65536 "$f" > "$dir/shared-$(basename "$f")"
      done ;;
    llama2c_tokenizer)
      # The target's framing: vocabulary size and file length (little-endian u16), the file, text.
      local f="$shared/models/tok512.bin"
      if [ -f "$f" ]; then
        local n; n=$(stat -c %s "$f")
        { printf "\\xff\\x01\\x$(printf %02x $((n & 255)))\\x$(printf %02x $((n >> 8)))"; cat "$f"; printf 'Once upon a time, Lily saw a big red ball.'; } \
          > "$dir/shared-tok512"
      fi ;;
  esac
}

if [ $# -eq 0 ]; then
  for f in tests/fuzz/fuzz_*.cpp; do f=${f#tests/fuzz/fuzz_}; echo "${f%.cpp}"; done | sort
  exit 0
fi
target=$1
seconds=${2:-60}
if [ ! -f "tests/fuzz/fuzz_$target.cpp" ]; then
  echo "fuzz.sh: unknown target '$target'; the targets are:" >&2
  "$0" >&2
  exit 2
fi
build=${FUZZ_BUILD_DIR:-build-fuzz}
out=build-fuzz  # corpora, logs and crashing inputs, whichever build the binary comes from
mkdir -p "$out/corpus/$target"
if [ "${FUZZ_BUILD:-1}" != 0 ]; then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    CXX=${CXX_FUZZ:-clang++-14}
    command -v "$CXX" >/dev/null || { echo "fuzz.sh: $CXX not found (scripts/setup.sh installs clang-14)" >&2; exit 2; }
    # Warnings are the GCC builds' job (-Werror there); this build is for finding crashes.
    CXX=$CXX cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DPAGEDKV_SANITIZE=address,undefined \
      -DPAGEDKV_BUILD_FUZZERS=ON -DPAGEDKV_WERROR=OFF -DPAGEDKV_BUILD_TESTS=OFF -DPAGEDKV_BUILD_BENCHMARKS=OFF \
      -DPAGEDKV_BUILD_PYTHON=OFF >/dev/null
  fi
  cmake --build "$build" -j "${JOBS:-$(nproc)}" --target "fuzz_$target"
fi
binary="$build/tests/fuzz/fuzz_$target"
[ -x "$binary" ] || { echo "fuzz.sh: $binary is not built" >&2; exit 1; }
cp -n tests/fuzz/corpus/"$target"/* "$out/corpus/$target/" 2>/dev/null || true
shared_seeds "$target" "$out/corpus/$target"
[ "$seconds" = 0 ] && exit 0
echo "fuzz.sh: running $target for $seconds s"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$binary" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$out/$target-" \
  -max_len="${MAX_LEN[$target]:-4096}" "$out/corpus/$target"
