#!/usr/bin/env bash
# Fuzzes one parser of outside input with libFuzzer (clang-14, ASan+UBSan).
#   scripts/fuzz.sh                  lists the targets, one a line
#   scripts/fuzz.sh TARGET SECONDS   builds build-fuzz/TARGET and runs it for SECONDS; exits
#                                    non-zero on a crash (the crashing input is left in build-fuzz/)
#   scripts/fuzz.sh TARGET 0         builds it only
# Objects compile JOBS at a time (default: the cores).
# Seeds come from tests/fuzz/corpus/TARGET; new inputs the fuzzer finds go to a working copy in
# build-fuzz/corpus/TARGET, never into the source tree.
set -euo pipefail
cd "$(dirname "$0")/.."

# The template layer (the chat templates' Jinja interpreter), whole.
TEMPLATE_SOURCES="src/template/lexer.cpp src/template/parser.cpp src/template/value.cpp src/template/value_format.cpp src/template/renderer.cpp src/template/filters.cpp src/template/methods.cpp src/template/unicode_text.cpp src/template/template.cpp"
# The model from its GGUF file through a forward pass: formats, quantized kernels, attention, KV storage.
MODEL_SOURCES="$(ls src/model/*.cpp | grep -v model_file.cpp | tr "\n" " ") $(echo src/model/format/*.cpp src/model/quant/*.cpp src/kernels/*.cpp src/storage/*.cpp src/core/*.cpp)"
# The GGUF tokenizers (SentencePiece and byte-level BPE, with their pre-tokenizer patterns).
TOKENIZER_SOURCES="src/model/tokenizer/gguf_tokenizer.cpp src/model/tokenizer/gguf_bpe_tokenizer.cpp src/model/tokenizer/bpe_pretokenizer.cpp src/model/tokenizer/text_tokenizer.cpp"
# The grammar layer without its cache (structured output's schemas, regexes and GBNF to masks).
GRAMMAR_SOURCES="$(ls src/grammar/*.cpp | grep -v grammar_cache.cpp | tr "\n" " ")"
declare -A SOURCES=(
  # target           sources it needs besides its own file (kept small: no engine)
  [openai_request]="src/api/openai_request.cpp src/api/request_fields.cpp src/api/tool_definitions.cpp src/api/api_error.cpp src/api/chat_template.cpp src/api/model_chat_template.cpp src/api/stop_string_matcher.cpp src/model/tokenizer/text_tokenizer.cpp $TEMPLATE_SOURCES"
  [gguf_model]="$MODEL_SOURCES"
  [gguf_download]="$MODEL_SOURCES $TOKENIZER_SOURCES"
  [gguf_file]="src/model/format/gguf_file.cpp src/model/format/tensor_type.cpp src/model/format/block_formats.cpp"
  [llama2c_tokenizer]="src/model/tokenizer/tokenizer.cpp src/model/tokenizer/text_tokenizer.cpp"
  [llama2c_checkpoint]="src/model/format/llama2c_checkpoint.cpp src/model/model.cpp src/model/model_config.cpp src/model/format/tensor_type.cpp src/model/format/block_formats.cpp src/core/kv_cache_spec.cpp src/core/dtype.cpp"
  [bpe_tokenizer]="src/model/tokenizer/gguf_bpe_tokenizer.cpp src/model/tokenizer/bpe_pretokenizer.cpp src/model/tokenizer/text_tokenizer.cpp src/model/format/gguf_file.cpp src/model/format/gguf_writer.cpp src/model/format/weight_quantizers.cpp src/model/format/tensor_type.cpp src/model/format/block_formats.cpp src/storage/float_convert.cpp src/storage/float_convert_avx2.cpp src/storage/cpu_isa.cpp src/core/dtype.cpp"
  [traces]="src/replay/trace_reader.cpp src/replay/trace.cpp src/core/block_hash.cpp"
  [manager_ops]="$(echo src/manager/*.cpp) src/block/block_pool.cpp src/block/cached_block_map.cpp src/block/eviction_policies.cpp src/block/kv_events.cpp src/prefix/block_hasher.cpp src/prefix/extra_keys.cpp src/prefix/sha256.cpp src/prefix/sha256_avx512.cpp src/core/block_hash.cpp src/core/dtype.cpp src/core/kv_cache_spec.cpp"
  [disk_index]="src/storage/key_rotation.cpp src/tiers/disk_tier.cpp src/tiers/slot_index.cpp src/block/cached_block_map.cpp src/block/kv_events.cpp src/tiers/disk_slot_format.cpp src/tiers/tier_types.cpp src/tiers/circuit_breaker.cpp src/tiers/payload_checksum_avx2.cpp src/storage/cpu_isa.cpp src/core/block_hash.cpp src/core/kv_cache_spec.cpp src/core/dtype.cpp"
  [kv_events_page]="src/api/kv_events_wire.cpp src/api/kv_event_log.cpp src/block/kv_events.cpp src/core/block_hash.cpp src/core/kv_cache_spec.cpp src/core/dtype.cpp"
  [grammar]="$GRAMMAR_SOURCES"
  [chat_template]="$TEMPLATE_SOURCES"
  [tool_call_parser]="src/api/tool_call_parser.cpp src/api/tool_call_reader.cpp src/api/tool_definitions.cpp src/api/api_error.cpp $GRAMMAR_SOURCES"
  [resp_reader]="src/remote/resp_reader.cpp"
  [tier_values]="src/tiers/remote_value_copy.cpp src/tiers/remote_value_copy_avx2.cpp src/storage/kv_arena.cpp src/storage/key_rotation.cpp src/tiers/disk_slot_format.cpp src/tiers/remote_value_format.cpp src/tiers/tier_types.cpp src/tiers/payload_checksum_avx2.cpp src/storage/cpu_isa.cpp src/core/block_hash.cpp src/core/kv_cache_spec.cpp src/core/dtype.cpp"
)
# Libraries (pkg-config names) a target links besides fmt.
declare -A LIBS=([manager_ops]="libcrypto libxxhash" [tier_values]="libxxhash" [disk_index]="liburing libxxhash" [bpe_tokenizer]="libpcre2-8" [gguf_download]="libpcre2-8")
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
shared_objects="$out/obj/shared-$(basename "$CXX")"
mkdir -p "$out/corpus/$target" "$out/obj/$target" "$shared_objects"
binary="$out/fuzz_$target"
flags=(-std=c++20 -g -O1 -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=undefined -fopenmp -Iinclude)
objects=()
# shellcheck disable=SC2086
for src in "tests/fuzz/fuzz_$target.cpp" ${SOURCES[$target]}; do
  # The targets share the library's objects (same flags). An object newer than its source and
  # every header is reused; a new one appears under its name only whole (built aside, then
  # renamed), so no target links another's half-written object.
  case $src in
    tests/fuzz/*) obj="$out/obj/$target/$(basename "${src%.cpp}").o" ;;
    *) obj="$shared_objects/$(echo "${src%.cpp}" | tr / _).o" ;;
  esac
  extra=()
  case $src in  # as CMake builds them: run-time dispatch
    *_avx2.cpp) extra=(-mavx2 -mfma -mf16c) ;;
    *_avx512.cpp) extra=(-mavx2 -mfma -mf16c -mavx512f -mavx512vl -mavx512bw -mavx512dq) ;;
  esac
  case $src in  # the VNNI builds
    *_vnni_avx2.cpp) extra+=(-mavxvnni) ;;
    *quantized_kernels_avx512.cpp | *kquant_kernels_avx512.cpp | *low_bit_kernels_avx512.cpp | *block_dot_avx512.cpp | *_vnni_avx512.cpp) extra+=(-mavx512vnni) ;;
  esac
  if [ ! "$obj" -nt "$src" ] || [ -n "$(find include src tests/fuzz -name '*.h' -newer "$obj" -print -quit)" ]; then
    while [ "$(jobs -rp | wc -l)" -ge "${JOBS:-$(nproc)}" ]; do wait -n; done
    "$CXX" "${flags[@]}" "${extra[@]}" $(pkg-config --cflags fmt) -c "$src" -o "$obj.$$.tmp" && mv -f "$obj.$$.tmp" "$obj" &
  fi
  objects+=("$obj")
done
# Every compile must have succeeded (wait -n reports each job's status).
while [ -n "$(jobs -rp)" ]; do wait -n || { echo "fuzz.sh: a compile failed" >&2; exit 1; }; done
# shellcheck disable=SC2086
"$CXX" -fsanitize=fuzzer,address,undefined -fopenmp "${objects[@]}" $(pkg-config --libs fmt ${LIBS[$target]:-}) -o "$binary"
cp -n tests/fuzz/corpus/"$target"/* "$out/corpus/$target/" 2>/dev/null || true
shared_seeds "$target" "$out/corpus/$target"
[ "$seconds" = 0 ] && exit 0
echo "fuzz.sh: running $target for $seconds s"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$binary" -max_total_time="$seconds" -print_final_stats=1 -artifact_prefix="$out/$target-" \
  -max_len="${MAX_LEN[$target]:-4096}" "$out/corpus/$target"
