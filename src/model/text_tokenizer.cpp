#include "pagedkv/model/text_tokenizer.h"

namespace pagedkv {

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
