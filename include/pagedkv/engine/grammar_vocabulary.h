// The grammar layer's view of a model's vocabulary: the bytes each token id adds to a text, and
// the ids that end a generation. Built once per model (the server builds it on the first
// structured-output request) and shared by every grammar compiled for that model.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/grammar/token_vocabulary.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"

namespace pagedkv {

// The raw bytes of every token of `tokenizer`, as it adds them in the middle of a text:
// TextTokenizer::decode_piece after a token that is not BOS, so SentencePiece's '▁' is a space
// and its <0xNN> pieces are single bytes; byte-level BPE pieces are their bytes. BOS, EOS and
// `stop_ids` have no bytes (a grammar allows a stop id only where it can end). Ids from the
// tokenizer's size up to `model_vocab_size` (a model's padded vocabulary) have none either.
std::vector<std::string> grammar_token_bytes(const TextTokenizer& tokenizer, const std::vector<TokenId>& stop_ids,
                                             int model_vocab_size);

// grammar_token_bytes as a grammar::TokenVocabulary whose stop ids are `stop_ids` (those that
// end a generation of this model: EOS, end-of-turn tokens). Throws ConfigError for a stop id
// outside the vocabulary.
std::shared_ptr<const grammar::TokenVocabulary> make_grammar_vocabulary(const TextTokenizer& tokenizer,
                                                                        std::vector<TokenId> stop_ids,
                                                                        int model_vocab_size);

}  // namespace pagedkv
