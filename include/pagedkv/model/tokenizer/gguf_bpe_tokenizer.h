// A GGUF file's byte-level BPE tokenizer (tokenizer.ggml.model = "gpt2": GPT-2, Llama 3, Qwen2/3),
// encoding as llama.cpp does:
//  1. Special tokens are cut out of the text first: user-defined tokens (type 4) always, longest
//     first, every occurrence; control tokens (type 3) only when a caller asks for them by name
//     (encode_parts: a chat template's markers), never from plain text.
//  2. Each remaining fragment (invalid UTF-8 read as U+FFFD) is cut into words by the
//     pre-tokenizer named by tokenizer.ggml.pre (model/bpe_pretokenizer.h).
//  3. Each word's bytes are written as GPT-2's printable stand-ins (byte b -> one character,
//     e.g. ' ' -> U+0120 'Ġ'), split into those characters, and the adjacent pair with the
//     lowest rank in tokenizer.ggml.merges is merged (the leftmost on ties) until no pair has a
//     rank. llama-bpe first takes a whole word that is a token as it is (ignore_merges).
//  4. BOS / EOS are added as add_bos_token / add_eos_token say (default: neither).
//
// Decoding: a normal token gives the bytes its characters stand for (a multi-byte character may
// be split over several tokens), a user-defined token its text, control and unused tokens nothing.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pagedkv/model/tokenizer/bpe_pretokenizer.h"
#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"

namespace pagedkv {

class GgufBpeTokenizer final : public TextTokenizer {
 public:
  // Reads the tokenizer.ggml.* keys of `file` (which need not outlive this object). Throws
  // FormatError if they are missing or inconsistent, or name an unsupported pre-tokenizer.
  explicit GgufBpeTokenizer(const GgufFile& file);

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  TokenId bos_id() const override { return bos_; }  // -1 when the file names none (Qwen)
  TokenId eos_id() const override { return eos_; }
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override;
  std::vector<TokenId> encode_parts(std::span<const PromptPart> parts, bool add_bos) const override;
  int max_piece_bytes() const override { return max_piece_bytes_; }
  std::string decode_piece(TokenId prev, TokenId token) const override;
  std::string special_text(TokenId token) const override;
  std::optional<FillInMiddleTokens> fill_in_middle_tokens() const override { return fim_; }
  std::vector<TokenId> end_of_generation_ids() const override { return end_of_generation_; }

  const std::string& pre_tokenizer() const { return pre_.name(); }
  std::string_view piece(TokenId id) const;  // the raw vocabulary piece; throws UsageError if out of range
  TokenId token_of(std::string_view piece) const;  // -1 if no token has exactly this text

 private:
  // Appends the ids of one fragment of raw text (no special tokens inside).
  void encode_fragment(std::string_view text, std::vector<TokenId>& out) const;
  void encode_word(std::string_view mapped_word, std::vector<TokenId>& out) const;
  // Cuts user-defined tokens out of `text`, encoding the fragments between them.
  void encode_with_user_tokens(std::string_view text, std::vector<TokenId>& out) const;
  int merge_rank(std::string_view left, std::string_view right, std::string& scratch) const;

  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  BpePreTokenizer pre_;
  std::vector<std::string> pieces_;
  std::vector<std::string> decoded_;  // the bytes each token stands for
  std::vector<bool> control_;  // control tokens (type 3, or BOS/EOS/end-of-turn)
  StringMap ids_by_piece_;
  StringMap merge_ranks_;  // "left right" -> rank
  std::vector<TokenId> user_defined_;  // longest first
  std::vector<TokenId> end_of_generation_;
  std::optional<FillInMiddleTokens> fim_;
  int max_piece_bytes_ = 1;
  TokenId bos_ = -1, eos_ = -1;
  bool add_bos_ = false, add_eos_ = false, ignore_merges_ = false;
};

}  // namespace pagedkv
