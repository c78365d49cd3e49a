#include "pagedkv/model/tokenizer/gguf_bpe_tokenizer.h"

#include <algorithm>
#include <array>
#include <queue>

#include <fmt/format.h>

#include "gguf_vocab_common.h"
#include "pagedkv/core/error.h"

namespace pagedkv {

namespace {

using namespace gguf_vocab;

std::string utf8_of(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// GPT-2's byte-to-character table: printable Latin-1 bytes stand for themselves, the other 68
// bytes (controls, space, DEL, NBSP, soft hyphen) for U+0100.. in byte order, so that every byte
// is one visible character and no token holds a space.
struct ByteCharacters {
  std::array<std::string, 256> of_byte;  // UTF-8 of the character standing for each byte
  std::array<int, 324> byte_of{};  // inverse, by code point; -1 if none
  ByteCharacters() {
    byte_of.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cp = printable ? b : next++;
      of_byte[b] = utf8_of(cp);
      byte_of[cp] = static_cast<int>(b);
    }
  }
};

const ByteCharacters& byte_characters() {
  static const ByteCharacters table;
  return table;
}

using gguf_vocab::utf8_length;

// The bytes a normal token's characters stand for; a character outside the table (a file not
// written for byte-level BPE) stands for its own UTF-8.
std::string bytes_of_piece(std::string_view piece) {
  const ByteCharacters& table = byte_characters();
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    const size_t len = std::min(utf8_length(static_cast<unsigned char>(piece[i])), piece.size() - i);
    uint32_t cp = static_cast<unsigned char>(piece[i]);
    if (len == 2) cp = (cp & 0x1Fu) << 6 | (static_cast<unsigned char>(piece[i + 1]) & 0x3Fu);
    const bool mapped = (len == 1 || len == 2) && cp < table.byte_of.size() && table.byte_of[cp] >= 0;
    if (mapped) out += static_cast<char>(table.byte_of[cp]);
    else out += piece.substr(i, len);
    i += len;
  }
  return out;
}

}  // namespace

GgufBpeTokenizer::GgufBpeTokenizer(const GgufFile& f)
    : pre_(f.find("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : std::string("gpt-2")) {
  auto fail = [&](const std::string& what) {
    throw FormatError(fmt::format("GGUF tokenizer in '{}': {}", f.name(), what));
  };
  if (!f.find("tokenizer.ggml.model") || f.get_string("tokenizer.ggml.model") != "gpt2")
    fail("not a byte-level BPE tokenizer (tokenizer.ggml.model is not gpt2)");
  const auto tokens = f.at("tokenizer.ggml.tokens").strings("tokenizer.ggml.tokens");
  if (tokens.empty() || tokens.size() > static_cast<size_t>(INT32_MAX)) fail("tokenizer.ggml.tokens is empty");
  const size_t n = tokens.size();
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  if (types && types->size() != n) fail(fmt::format("{} token types for {} tokens", types->size(), n));
  if (!f.find("tokenizer.ggml.merges")) fail("a BPE tokenizer needs tokenizer.ggml.merges");
  const auto merges = f.at("tokenizer.ggml.merges").strings("tokenizer.ggml.merges");

  bos_ = special_id(f, "tokenizer.ggml.bos_token_id", -1, n);
  eos_ = special_id(f, "tokenizer.ggml.eos_token_id", -1, n);
  const TokenId eot = special_id(f, "tokenizer.ggml.eot_token_id", -1, n);
  const TokenId eom = special_id(f, "tokenizer.ggml.eom_token_id", -1, n);
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token",
                        pre_.name() == "llama-bpe" || pre_.name() == "llama3" || pre_.name() == "llama-v3");
  add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token", false);
  ignore_merges_ = pre_.name() == "llama-bpe" || pre_.name() == "llama3" || pre_.name() == "llama-v3";

  pieces_.reserve(n);
  decoded_.resize(n);
  control_.assign(n, false);
  ids_by_piece_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    pieces_.emplace_back(tokens[i]);
    ids_by_piece_.emplace(pieces_.back(), static_cast<TokenId>(i));  // the first id of a duplicate wins
  }
  add_unique(end_of_generation_, eos_);
  add_unique(end_of_generation_, eot);
  add_unique(end_of_generation_, eom);
  fim_ = find_fill_in_middle_tokens(f, n, [this](std::string_view text) { return token_of(text); });
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    auto type = types ? static_cast<int32_t>(types->int_at(i)) : static_cast<int32_t>(kNormal);
    // BOS, EOS and the end-of-generation texts are control tokens whatever the file says (as in
    // llama.cpp), so plain text never produces them.
    const bool ends = is_end_of_generation_text(pieces_[i]);
    if (ends) add_unique(end_of_generation_, id);
    if (type == kUserDefined && (id == bos_ || id == eos_ || id == eot || id == eom || ends)) type = kControl;
    control_[i] = type == kControl;
    if (type == kNormal) decoded_[i] = bytes_of_piece(pieces_[i]);
    else if (type == kUserDefined) decoded_[i] = pieces_[i];
    if (type == kUserDefined && !pieces_[i].empty()) user_defined_.push_back(id);
    max_piece_bytes_ = std::max(max_piece_bytes_, static_cast<int>(std::min<size_t>(decoded_[i].size(), INT32_MAX)));
  }
  std::stable_sort(user_defined_.begin(), user_defined_.end(), [&](TokenId a, TokenId b) {
    return pieces_[static_cast<size_t>(a)].size() > pieces_[static_cast<size_t>(b)].size();
  });

  merge_ranks_.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    // "left right", split at the first space after the first byte (llama.cpp's reading).
    const std::string_view m = merges[i];
    if (m.size() < 3 || m.find(' ', 1) == std::string_view::npos)
      fail(fmt::format("merge {} ('{}') is not 'left right'", i, m));
    merge_ranks_.emplace(std::string(m), static_cast<int32_t>(std::min<size_t>(i, INT32_MAX)));  // the first rank wins
  }
}

std::string_view GgufBpeTokenizer::piece(TokenId id) const {
  if (id < 0 || id >= vocab_size())
    throw UsageError(fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab_size()));
  return pieces_[static_cast<size_t>(id)];
}

TokenId GgufBpeTokenizer::token_of(std::string_view piece) const {
  auto it = ids_by_piece_.find(piece);
  return it == ids_by_piece_.end() ? -1 : it->second;
}

int GgufBpeTokenizer::merge_rank(std::string_view left, std::string_view right, std::string& scratch) const {
  // A left part that starts with a space would split differently when read back; no rank.
  if (left.empty() || right.empty() || left.find(' ', 1) != std::string_view::npos) return -1;
  scratch.assign(left);
  scratch += ' ';
  scratch += right;
  auto it = merge_ranks_.find(scratch);
  return it == merge_ranks_.end() ? -1 : it->second;
}

void GgufBpeTokenizer::encode_word(std::string_view word, std::vector<TokenId>& out) const {
  if (ignore_merges_) {
    if (const TokenId id = token_of(word); id >= 0) {
      out.push_back(id);
      return;
    }
  }
  std::vector<gguf_vocab::MergeSymbol> symbols = gguf_vocab::character_symbols(word);
  if (symbols.empty()) return;

  struct Pair {
    int left, right, rank;
    size_t len;
  };
  // Lowest rank first; on ties the leftmost pair.
  auto later = [](const Pair& a, const Pair& b) { return a.rank > b.rank || (a.rank == b.rank && a.left > b.left); };
  std::priority_queue<Pair, std::vector<Pair>, decltype(later)> queue(later);
  std::string scratch;
  auto text_of = [&](const gguf_vocab::MergeSymbol& s) { return word.substr(s.start, s.len); };
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const gguf_vocab::MergeSymbol& l = symbols[static_cast<size_t>(left)];
    const gguf_vocab::MergeSymbol& r = symbols[static_cast<size_t>(right)];
    const int rank = merge_rank(text_of(l), text_of(r), scratch);
    if (rank >= 0) queue.push({left, right, rank, l.len + r.len});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Pair p = queue.top();
    queue.pop();
    gguf_vocab::MergeSymbol& l = symbols[static_cast<size_t>(p.left)];
    gguf_vocab::MergeSymbol& r = symbols[static_cast<size_t>(p.right)];
    if (l.len == 0 || r.len == 0 || l.next != p.right || l.len + r.len != p.len) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = p.left;
    try_add(l.prev, p.left);
    try_add(p.left, l.next);
  }
  for (int i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const std::string_view s = text_of(symbols[static_cast<size_t>(i)]);
    if (const TokenId id = token_of(s); id >= 0) {
      out.push_back(id);
      continue;
    }
    // Not a token (a vocabulary without every byte character): its single bytes that are tokens.
    for (char c : s)
      if (const TokenId id = token_of(std::string_view(&c, 1)); id >= 0) out.push_back(id);
  }
}

void GgufBpeTokenizer::encode_fragment(std::string_view raw, std::vector<TokenId>& out) const {
  const std::string text = sanitize_utf8(raw);
  const ByteCharacters& table = byte_characters();
  std::string mapped;
  for (std::string_view word : pre_.split(text)) {
    mapped.clear();
    for (char c : word) mapped += table.of_byte[static_cast<unsigned char>(c)];
    encode_word(mapped, out);
  }
}

void GgufBpeTokenizer::encode_with_user_tokens(std::string_view text, std::vector<TokenId>& out) const {
  for (const Fragment& f : cut_special_tokens(text, user_defined_, pieces_)) {
    if (f.token >= 0) out.push_back(f.token);
    else encode_fragment(text.substr(f.start, f.len), out);
  }
}

std::vector<TokenId> GgufBpeTokenizer::encode(std::string_view text, bool add_bos) const {
  const PromptPart part{std::string(text), false};
  return encode_parts(std::span<const PromptPart>(&part, 1), add_bos);
}

std::vector<TokenId> GgufBpeTokenizer::encode_parts(std::span<const PromptPart> parts, bool add_bos) const {
  std::vector<TokenId> out;
  if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);
  std::string text;
  for (const PromptPart& p : parts) {
    const TokenId special = p.special ? token_of(p.text) : -1;
    if (special < 0) {
      text += p.text;
      continue;
    }
    encode_with_user_tokens(text, out);
    text.clear();
    out.push_back(special);
  }
  encode_with_user_tokens(text, out);
  if (add_bos && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string GgufBpeTokenizer::decode_piece(TokenId /*prev*/, TokenId token) const {
  (void)piece(token);  // range check
  return decoded_[static_cast<size_t>(token)];
}

std::string GgufBpeTokenizer::special_text(TokenId token) const {
  (void)piece(token);  // range check
  return control_[static_cast<size_t>(token)] ? pieces_[static_cast<size_t>(token)] : std::string();
}

}  // namespace pagedkv
