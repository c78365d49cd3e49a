// libFuzzer target: the byte-level BPE tokenizer's encode over any text, with a vocabulary the
// input also shapes. Byte 0 picks the pre-tokenizer (gpt-2, llama-bpe, qwen2); byte 1 how many
// merges follow (two bytes each: the ids of the left and right token among those so far); byte 2
// the length of a user-defined token's text; then that text; the rest is the text to encode.
// Properties: every id is inside the vocabulary, no control token comes out of plain text, and
// decoding gives back the text as llama.cpp reads it (invalid UTF-8 as U+FFFD).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/model/tokenizer/bpe_pretokenizer.h"
#include "pagedkv/model/tokenizer/gguf_bpe_tokenizer.h"
#include "pagedkv/model/format/gguf_writer.h"

namespace {

using pagedkv::fuzz::check;

std::string byte_char(int b) {
  int cp = b;
  auto printable = [](int c) { return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE; };
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += printable(c) ? 0 : 1;
    cp = 256 + n;
  }
  if (cp < 0x80) return std::string(1, static_cast<char>(cp));
  return {static_cast<char>(0xC0 | (cp >> 6)), static_cast<char>(0x80 | (cp & 0x3F))};
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pagedkv::fuzz::ByteReader in{data, size};
  static const char* const kPre[] = {"gpt-2", "llama-bpe", "qwen2"};
  const char* pre = kPre[in.next() % 3];
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_char(b));
    types.push_back(1);
  }
  const int num_merges = in.next() % 64;
  for (int i = 0; i < num_merges; ++i) {
    const std::string& l = tokens[in.next() % tokens.size()];
    const std::string& r = tokens[in.next() % tokens.size()];
    merges.push_back(l + " " + r);
    const std::string merged = l + r;
    tokens.push_back(merged);
    types.push_back(1);
  }
  const size_t user_len = in.next() % 8;
  std::string user;
  // Printable ASCII: such a text is its own byte-level form, so a word that equals it decodes the same.
  for (size_t i = 0; i < user_len && !in.empty(); ++i) user += static_cast<char>(0x21 + in.next() % 94);
  const int user_id = user.empty() ? -1 : static_cast<int>(tokens.size());
  if (!user.empty()) {
    tokens.push_back(user);
    types.push_back(4);
  }
  const int control_id = static_cast<int>(tokens.size());
  tokens.push_back("<|ctl|>");
  types.push_back(3);
  const std::string_view text(reinterpret_cast<const char*>(data) + in.at, size - std::min(in.at, size));

  pagedkv::GgufWriter w;
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", pre);
  w.add_string_array("tokenizer.ggml.tokens", tokens);
  w.add_i32_array("tokenizer.ggml.token_type", types);
  w.add_string_array("tokenizer.ggml.merges", merges);
  const auto bytes = w.bytes();
  try {
    const pagedkv::GgufBpeTokenizer tok(pagedkv::GgufFile(bytes, "fuzz"));
    const std::vector<pagedkv::TokenId> ids = tok.encode(text, true);
    for (pagedkv::TokenId id : ids) check(id >= 0 && id < tok.vocab_size() && id != control_id);
    check(tok.detokenize(ids) == pagedkv::sanitize_utf8(text));
    if (user_id >= 0 && text.find(user) != std::string_view::npos)
      check(std::find(ids.begin(), ids.end(), user_id) != ids.end());
  } catch (const pagedkv::FormatError&) {
    check(false);  // every vocabulary made here is well-formed
  }
  return 0;
}
