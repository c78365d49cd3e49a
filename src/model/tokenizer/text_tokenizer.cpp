#include "pagedkv/model/tokenizer/text_tokenizer.h"

namespace pagedkv {

std::vector<TokenId> TextTokenizer::encode_parts(std::span<const PromptPart> parts, bool add_bos) const {
  std::string text;
  for (const PromptPart& p : parts) text += p.text;
  return encode(text, add_bos);
}

std::vector<TokenId> TextTokenizer::end_of_generation_ids() const {
  if (eos_id() < 0) return {};
  return {eos_id()};
}

std::string TextTokenizer::special_text(TokenId) const { return {}; }

std::optional<FillInMiddleTokens> TextTokenizer::fill_in_middle_tokens() const { return std::nullopt; }

std::string TextTokenizer::render(std::span<const TokenId> ids) const {
  std::string out;
  for (size_t i = 1; i < ids.size(); ++i) out += decode_piece(ids[i - 1], ids[i]);
  return out;
}

std::string TextTokenizer::detokenize(std::span<const TokenId> ids) const {
  if (ids.empty()) return {};
  return decode_piece(-1, ids.front()) + render(ids);
}

}  // namespace pagedkv
