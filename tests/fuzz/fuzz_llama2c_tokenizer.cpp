// libFuzzer target: llama2c's tokenizer file (tokenizer.bin: max token length, then per piece a
// score, a length and the bytes) and run.c's encode/decode over the vocabulary it describes.
// The first two bytes give the vocabulary size the checkpoint would declare, the next two how
// many of the remaining bytes are the file (the rest is text to encode). Any input must end in a
// tokenizer whose encoding stays inside its vocabulary, or a FormatError; anything else is a bug.
// Seeds: ../shared/models/tok512.bin (fuzz.sh adds it with its prefix bytes).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "fuzz_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace {

using pagedkv::fuzz::check;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int vocab_size = 1 + (data[0] | data[1] << 8) % 1024;
  const size_t file_bytes = std::min<size_t>(data[2] | data[3] << 8, size - 4);
  const std::span<const std::byte> file(reinterpret_cast<const std::byte*>(data) + 4, file_bytes);
  const std::string_view text(reinterpret_cast<const char*>(data) + 4 + file_bytes, size - 4 - file_bytes);
  try {
    const pagedkv::Tokenizer tok(file, vocab_size, "fuzz");
    check(tok.vocab_size() == vocab_size);
    std::vector<pagedkv::TokenId> ids;
    try {
      ids = tok.encode(text, true, true);
    } catch (const pagedkv::FormatError&) {
      return 0;  // a vocabulary without the pieces encoding needs (" ", byte tokens): named
    }
    pagedkv::TokenId prev = pagedkv::Tokenizer::kBos;
    for (pagedkv::TokenId id : ids) {
      check(id >= 0 && id < vocab_size);
      (void)tok.decode_piece(prev, id);
      prev = id;
    }
  } catch (const pagedkv::FormatError&) {
  }
  return 0;
}
