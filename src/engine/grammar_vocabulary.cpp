#include "pagedkv/engine/grammar_vocabulary.h"

#include <fmt/format.h>

#include <algorithm>

#include "pagedkv/core/error.h"

namespace pagedkv {

std::vector<std::string> grammar_token_bytes(const TextTokenizer& tokenizer, const std::vector<TokenId>& stop_ids,
                                             int model_vocab_size) {
  const int size = std::max(tokenizer.vocab_size(), model_vocab_size);
  // Any token but BOS as the previous one: SentencePiece drops a piece's leading space only at
  // the start of a text.
  const TokenId prev = tokenizer.bos_id() == 0 ? 1 : 0;
  std::vector<std::string> bytes(static_cast<size_t>(size));
  for (TokenId id = 0; id < tokenizer.vocab_size(); ++id) {
    if (id == tokenizer.bos_id() || id == tokenizer.eos_id()) continue;
    if (std::find(stop_ids.begin(), stop_ids.end(), id) != stop_ids.end()) continue;
    bytes[static_cast<size_t>(id)] = tokenizer.decode_piece(prev, id);
  }
  return bytes;
}

std::shared_ptr<const grammar::TokenVocabulary> make_grammar_vocabulary(const TextTokenizer& tokenizer,
                                                                        std::vector<TokenId> stop_ids,
                                                                        int model_vocab_size) {
  std::vector<std::string> bytes = grammar_token_bytes(tokenizer, stop_ids, model_vocab_size);
  std::sort(stop_ids.begin(), stop_ids.end());
  stop_ids.erase(std::unique(stop_ids.begin(), stop_ids.end()), stop_ids.end());
  for (TokenId id : stop_ids)
    if (id < 0 || id >= static_cast<TokenId>(bytes.size()))
      throw ConfigError(fmt::format("stop token {} is outside the vocabulary [0, {})", id, bytes.size()));
  return grammar::TokenVocabulary::create(std::move(bytes), std::vector<int32_t>(stop_ids.begin(), stop_ids.end()));
}

}  // namespace pagedkv
