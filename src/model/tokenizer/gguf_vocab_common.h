// What the two GGUF tokenizers (SentencePiece-style and byte-level BPE) read alike from the
// tokenizer.ggml.* keys. Private to src/model.
#pragma once

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/core/ids.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"

namespace pagedkv::gguf_vocab {

// llama.cpp's token types (tokenizer.ggml.token_type).
enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

// The token texts llama.cpp treats as ending a generation (and therefore as control tokens, even
// when a file types them user-defined).
inline bool is_end_of_generation_text(std::string_view piece) {
  for (std::string_view e :
       {"</s>", "<|endoftext|>", "<|im_end|>", "<|end|>", "<|eot_id|>", "<|eom_id|>", "<end_of_turn>",
        "<|end_of_text|>", "<EOT>", "<|return|>", "<|call|>", "<end_of_utterance>"})
    if (piece == e) return true;
  return false;
}

// A special token id key: `fallback` when absent, -1 for "none" (llama.cpp writes uint32 -1);
// FormatError when it lies outside a vocabulary of n tokens.
inline TokenId special_id(const GgufFile& f, const char* key, int64_t fallback, size_t n) {
  const int64_t v = f.get_int(key, fallback);
  if (v == 0xFFFFFFFFll || v < 0) return -1;
  if (v >= static_cast<int64_t>(n))
    throw FormatError(
        fmt::format("GGUF tokenizer in '{}': {} = {} is outside the vocabulary of {}", f.name(), key, v, n));
  return static_cast<TokenId>(v);
}

// A vocabulary's fill-in-the-middle tokens: the ones tokenizer.ggml.fim_pre_token_id,
// fim_suf_token_id and fim_mid_token_id name when the file gives all three, else the first family
// of the known spellings (Qwen's and StarCoder's, DeepSeek's, Code Llama's) whose three texts are all
// tokens (`lookup`: a text's token id, -1 when none). None when neither.
template <class Lookup>
std::optional<FillInMiddleTokens> find_fill_in_middle_tokens(const GgufFile& f, size_t n, Lookup lookup) {
  const FillInMiddleTokens named{special_id(f, "tokenizer.ggml.fim_pre_token_id", -1, n),
                                 special_id(f, "tokenizer.ggml.fim_suf_token_id", -1, n),
                                 special_id(f, "tokenizer.ggml.fim_mid_token_id", -1, n)};
  if (named.prefix >= 0 && named.suffix >= 0 && named.middle >= 0) return named;
  static constexpr std::array<std::array<std::string_view, 3>, 6> kSpellings{{
      {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>"},
      {"<fim_prefix>", "<fim_suffix>", "<fim_middle>"},
      {"<fim-prefix>", "<fim-suffix>", "<fim-middle>"},
      {"<｜fim▁begin｜>", "<｜fim▁hole｜>", "<｜fim▁end｜>"},
      {"<PRE>", "<SUF>", "<MID>"},
      {"▁<PRE>", "▁<SUF>", "▁<MID>"},
  }};
  for (const auto& family : kSpellings) {
    const FillInMiddleTokens t{lookup(family[0]), lookup(family[1]), lookup(family[2])};
    if (t.prefix >= 0 && t.suffix >= 0 && t.middle >= 0) return t;
  }
  return std::nullopt;
}

// A piece of text after special tokens are cut out: a token, or a span of the text.
struct Fragment {
  TokenId token;  // -1: text
  size_t start, len;
};

// Cuts the given special tokens (longest first) out of `text` as llama.cpp does: each token in
// turn is cut out of every text fragment the previous ones left, at each occurrence from the left.
inline std::vector<Fragment> cut_special_tokens(std::string_view text, const std::vector<TokenId>& longest_first,
                                                const std::vector<std::string>& pieces) {
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({-1, 0, text.size()});
  for (TokenId id : longest_first) {
    const std::string& p = pieces[static_cast<size_t>(id)];
    if (p.empty()) continue;
    std::vector<Fragment> next;
    next.reserve(fragments.size());
    for (const Fragment& f : fragments) {
      if (f.token >= 0 || f.len < p.size()) {
        next.push_back(f);
        continue;
      }
      size_t at = f.start;
      const size_t end = f.start + f.len;
      for (;;) {
        const size_t found = text.substr(0, end).find(p, at);
        if (found == std::string_view::npos) break;
        if (found > at) next.push_back({-1, at, found - at});
        next.push_back({id, found, p.size()});
        at = found + p.size();
      }
      if (at < end) next.push_back({-1, at, end - at});
    }
    fragments = std::move(next);
  }
  return fragments;
}

// Bytes of the UTF-8 character starting with `lead` (1 for a stray continuation byte).
inline size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

// One symbol of a merge loop (SentencePiece's and BPE's): a run of bytes of the text, linked to
// its neighbours (-1 at the ends) so that merging two is O(1).
struct MergeSymbol {
  int prev, next;
  size_t start, len;
};

// The text's characters as a chain of symbols, one per UTF-8 character.
inline std::vector<MergeSymbol> character_symbols(std::string_view text) {
  std::vector<MergeSymbol> symbols;
  for (size_t i = 0; i < text.size();) {
    const size_t len = std::min(utf8_length(static_cast<unsigned char>(text[i])), text.size() - i);
    symbols.push_back({static_cast<int>(symbols.size()) - 1, static_cast<int>(symbols.size()) + 1, i, len});
    i += len;
  }
  if (!symbols.empty()) symbols.back().next = -1;
  return symbols;
}

inline void add_unique(std::vector<TokenId>& ids, TokenId id) {
  if (id >= 0 && std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
}

}  // namespace pagedkv::gguf_vocab
