#include "pagedkv/model/tokenizer/gguf_tokenizer.h"

#include <algorithm>
#include <queue>

#include <fmt/format.h>

#include "gguf_vocab_common.h"
#include "pagedkv/core/error.h"
#include "pagedkv/model/tokenizer/gguf_bpe_tokenizer.h"

namespace pagedkv {

namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // U+2581, SentencePiece's visible space

std::string replace_all(std::string_view s, std::string_view from, std::string_view to) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.substr(i, from.size()) == from) {
      out += to;
      i += from.size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

GgufTokenizer::GgufTokenizer(const GgufFile& f) {
  auto fail = [&](const std::string& what) {
    throw FormatError(fmt::format("GGUF tokenizer in '{}': {}", f.name(), what));
  };
  if (!f.find("tokenizer.ggml.model")) fail("the file has no tokenizer (no tokenizer.ggml.model key)");
  model_ = f.get_string("tokenizer.ggml.model");
  if (model_ != "llama")
    fail(fmt::format("tokenizer model '{}' is not SentencePiece-style 'llama'{}", model_,
                     model_ == "gpt2" ? " (byte-level BPE: GgufBpeTokenizer reads it)" : ""));
  const auto tokens = f.at("tokenizer.ggml.tokens").strings("tokenizer.ggml.tokens");
  if (tokens.empty() || tokens.size() > static_cast<size_t>(INT32_MAX)) fail("tokenizer.ggml.tokens is empty");
  const size_t n = tokens.size();
  const GgufValue* scores = f.find("tokenizer.ggml.scores");
  const GgufValue* types = f.find("tokenizer.ggml.token_type");
  if (scores && scores->size() != n) fail(fmt::format("{} scores for {} tokens", scores->size(), n));
  if (types && types->size() != n) fail(fmt::format("{} token types for {} tokens", types->size(), n));
  pieces_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    pieces_.emplace_back(tokens[i]);
    max_piece_bytes_ = std::max(max_piece_bytes_, static_cast<int>(std::min<size_t>(pieces_.back().size(), INT32_MAX)));
    scores_.push_back(scores ? static_cast<float>(scores->number_at(i)) : 0.0f);
    types_.push_back(types ? static_cast<int32_t>(types->int_at(i)) : kNormal);
    ids_by_piece_.emplace(pieces_.back(), static_cast<TokenId>(i));  // the first id of a duplicate wins
  }
  bos_ = gguf_vocab::special_id(f, "tokenizer.ggml.bos_token_id", 1, n);
  eos_ = gguf_vocab::special_id(f, "tokenizer.ggml.eos_token_id", 2, n);
  unk_ = gguf_vocab::special_id(f, "tokenizer.ggml.unknown_token_id", 0, n);
  const TokenId eot = gguf_vocab::special_id(f, "tokenizer.ggml.eot_token_id", -1, n);
  const TokenId eom = gguf_vocab::special_id(f, "tokenizer.ggml.eom_token_id", -1, n);
  gguf_vocab::add_unique(end_of_generation_, eos_);
  gguf_vocab::add_unique(end_of_generation_, eot);
  gguf_vocab::add_unique(end_of_generation_, eom);
  fim_ = gguf_vocab::find_fill_in_middle_tokens(f, n, [this](std::string_view text) { return lookup(text); });
  add_bos_ = f.get_bool("tokenizer.ggml.add_bos_token", true);
  add_eos_ = f.get_bool("tokenizer.ggml.add_eos_token", false);
  add_space_prefix_ = f.get_bool("tokenizer.ggml.add_space_prefix", true);

  for (int b = 0; b < 256; ++b) byte_tokens_[b] = lookup(fmt::format("<0x{:02X}>", b));
  decoded_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& p = pieces_[i];
    if (types_[i] == kByte && p.size() == 6 && hex_value(p[3]) >= 0 && hex_value(p[4]) >= 0)
      decoded_[i] = std::string(1, static_cast<char>(hex_value(p[3]) * 16 + hex_value(p[4])));
    else if (types_[i] == kControl || types_[i] == kUnused) decoded_[i].clear();
    else decoded_[i] = replace_all(p, kSpaceMark, " ");
  }
  // BOS / EOS / UNK and the end-of-generation texts llama.cpp recognises are control tokens even
  // when typed user-defined (llama.cpp overrides their type), so text never produces them.
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<TokenId>(i);
    const bool ends = gguf_vocab::is_end_of_generation_text(pieces_[i]);
    if (ends) gguf_vocab::add_unique(end_of_generation_, id);
    if (types_[i] != kUserDefined || pieces_[i].empty()) continue;
    if (id == bos_ || id == eos_ || id == unk_ || id == eot || id == eom || ends) {
      types_[i] = kControl;
      decoded_[i].clear();
      continue;
    }
    user_defined_.push_back(id);
  }
  std::stable_sort(user_defined_.begin(), user_defined_.end(), [&](TokenId a, TokenId b) {
    return pieces_[static_cast<size_t>(a)].size() > pieces_[static_cast<size_t>(b)].size();
  });
}

TokenId GgufTokenizer::lookup(std::string_view s) const {
  auto it = ids_by_piece_.find(s);
  return it == ids_by_piece_.end() ? -1 : it->second;
}

std::string_view GgufTokenizer::piece(TokenId id) const {
  if (id < 0 || id >= vocab_size())
    throw UsageError(fmt::format("token id {} is outside the vocabulary [0, {})", id, vocab_size()));
  return pieces_[static_cast<size_t>(id)];
}

// SentencePiece merges over one fragment of raw text (already given its space prefix).
void GgufTokenizer::encode_text(std::string_view raw, std::vector<TokenId>& out) const {
  const std::string text = replace_all(raw, " ", kSpaceMark);
  std::vector<gguf_vocab::MergeSymbol> symbols = gguf_vocab::character_symbols(text);
  if (symbols.empty()) return;

  struct Bigram {
    int left, right;
    float score;
    size_t len;
  };
  // Highest score first; on ties the leftmost pair.
  auto worse = [](const Bigram& a, const Bigram& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::priority_queue<Bigram, std::vector<Bigram>, decltype(worse)> queue(worse);
  auto try_add = [&](int left, int right) {
    if (left < 0 || right < 0) return;
    const size_t len = symbols[static_cast<size_t>(left)].len + symbols[static_cast<size_t>(right)].len;
    const TokenId id = lookup(std::string_view(text).substr(symbols[static_cast<size_t>(left)].start, len));
    if (id < 0) return;
    queue.push({left, right, scores_[static_cast<size_t>(id)], len});
  };
  for (size_t i = 1; i < symbols.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    gguf_vocab::MergeSymbol& l = symbols[static_cast<size_t>(b.left)];
    gguf_vocab::MergeSymbol& r = symbols[static_cast<size_t>(b.right)];
    if (l.len == 0 || r.len == 0 || l.len + r.len != b.len || l.next != b.right) continue;  // stale
    l.len += r.len;
    r.len = 0;
    l.next = r.next;
    if (r.next >= 0) symbols[static_cast<size_t>(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
  for (int i = 0; i >= 0; i = symbols[static_cast<size_t>(i)].next) {
    const gguf_vocab::MergeSymbol& s = symbols[static_cast<size_t>(i)];
    const std::string_view piece = std::string_view(text).substr(s.start, s.len);
    const TokenId id = lookup(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (unsigned char c : piece) {
      const TokenId bt = byte_tokens_[c];
      out.push_back(bt >= 0 ? bt : unk_);
    }
  }
}

std::vector<TokenId> GgufTokenizer::encode(std::string_view text, bool add_bos) const {
  const PromptPart part{std::string(text), false};
  return encode_parts(std::span<const PromptPart>(&part, 1), add_bos);
}

std::vector<TokenId> GgufTokenizer::encode_parts(std::span<const PromptPart> parts, bool add_bos) const {
  std::vector<TokenId> out;
  if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);
  // As llama.cpp: a text fragment that starts the text or follows a special token (a template's
  // marker or a user-defined token cut out of the text) gets the leading space.
  bool after_special = true;
  auto encode_plain = [&](std::string_view text) {
    for (const gguf_vocab::Fragment& f : gguf_vocab::cut_special_tokens(text, user_defined_, pieces_)) {
      if (f.token >= 0) {
        out.push_back(f.token);
        after_special = true;
        continue;
      }
      std::string fragment = add_space_prefix_ && after_special ? " " : "";
      fragment += text.substr(f.start, f.len);
      encode_text(fragment, out);
      after_special = false;
    }
  };
  std::string text;
  for (const PromptPart& p : parts) {
    const TokenId special = p.special ? lookup(p.text) : -1;
    if (special < 0) {
      text += p.text;
      continue;
    }
    encode_plain(text);
    text.clear();
    out.push_back(special);
    after_special = true;
  }
  encode_plain(text);
  if (add_bos && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string GgufTokenizer::decode_piece(TokenId prev, TokenId token) const {
  (void)piece(token);  // range check
  const std::string& text = decoded_[static_cast<size_t>(token)];
  const bool at_start = prev < 0 || prev == bos_;
  if (at_start && add_space_prefix_ && !text.empty() && text.front() == ' ') return text.substr(1);
  return text;
}

std::string GgufTokenizer::special_text(TokenId token) const {
  (void)piece(token);  // range check
  return types_[static_cast<size_t>(token)] == kControl ? pieces_[static_cast<size_t>(token)] : std::string();
}

std::unique_ptr<TextTokenizer> make_gguf_tokenizer(const GgufFile& file) {
  if (file.find("tokenizer.ggml.model") && file.get_string("tokenizer.ggml.model") == "gpt2")
    return std::make_unique<GgufBpeTokenizer>(file);
  return std::make_unique<GgufTokenizer>(file);
}

}  // namespace pagedkv
