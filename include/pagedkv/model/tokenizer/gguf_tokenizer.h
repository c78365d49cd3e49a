// The tokenizer stored in a GGUF file's metadata (tokenizer.ggml.*), encoding as llama.cpp does.
//
// Supported: tokenizer.ggml.model = "llama" (SentencePiece-style, as in Llama 1/2, Phi-3, the
// tok512 models): the text gets a leading space (unless add_space_prefix is false), spaces become
// U+2581, the text is split into UTF-8 characters and the adjacent pair whose concatenation is the
// highest-scoring vocabulary piece is merged (the leftmost on ties) until none merges; characters
// left outside the vocabulary become byte tokens <0xXX> (or <unk>). User-defined tokens (type 4)
// are cut out of the text first, longest first, as llama.cpp does even without special parsing;
// control tokens come only from a chat template's markers (encode_parts), never from text. Each
// text fragment that starts the text or follows a special token gets the leading space. BOS / EOS
// are added as add_bos_token / add_eos_token say (defaults: BOS yes, EOS no).
// Byte-level BPE ("gpt2": GPT-2, Llama 3, Qwen2) is GgufBpeTokenizer (model/gguf_bpe_tokenizer.h);
// make_gguf_tokenizer picks the one a file names.
//
// Decoding: U+2581 becomes a space, <0xXX> the raw byte, control tokens nothing; a leading space is
// dropped from the first piece of a text and after BOS (SentencePiece's dummy prefix).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pagedkv/model/format/gguf_file.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"

namespace pagedkv {

class GgufTokenizer final : public TextTokenizer {
 public:
  // Reads the tokenizer.ggml.* keys of `file` (which need not outlive this object). Throws
  // FormatError if they are missing, inconsistent, or of an unsupported tokenizer model.
  explicit GgufTokenizer(const GgufFile& file);

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  TokenId bos_id() const override { return bos_; }
  TokenId eos_id() const override { return eos_; }
  std::vector<TokenId> encode(std::string_view text, bool add_bos) const override;
  std::vector<TokenId> encode_parts(std::span<const PromptPart> parts, bool add_bos) const override;
  std::vector<TokenId> end_of_generation_ids() const override { return end_of_generation_; }
  int max_piece_bytes() const override { return max_piece_bytes_; }
  std::string decode_piece(TokenId prev, TokenId token) const override;
  std::string special_text(TokenId token) const override;
  std::optional<FillInMiddleTokens> fill_in_middle_tokens() const override { return fim_; }

  const std::string& model_name() const { return model_; }
  std::string_view piece(TokenId id) const;  // the raw vocabulary piece; throws UsageError if out of range
  bool adds_bos() const { return add_bos_; }

  // llama.cpp's token types (tokenizer.ggml.token_type).
  enum TokenType : int32_t { kNormal = 1, kUnknown = 2, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6 };

 private:
  void encode_text(std::string_view text, std::vector<TokenId>& out) const;  // one fragment, SentencePiece merges
  TokenId lookup(std::string_view s) const;  // -1 if not a piece

  std::string model_;
  std::vector<std::string> pieces_;
  int max_piece_bytes_ = 1;
  std::vector<float> scores_;
  std::vector<int32_t> types_;
  std::vector<std::string> decoded_;  // piece as text (U+2581 -> ' ', <0xXX> -> byte, control -> "")
  std::vector<TokenId> user_defined_;  // longest first
  std::vector<TokenId> end_of_generation_;
  std::optional<FillInMiddleTokens> fim_;
  TokenId byte_tokens_[256];
  TokenId bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = true, add_eos_ = false, add_space_prefix_ = true;
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, TokenId, PieceHash, std::equal_to<>> ids_by_piece_;
};

// The tokenizer of a GGUF file, of the type its tokenizer.ggml.model names: "llama"
// (GgufTokenizer) or "gpt2" (GgufBpeTokenizer). Throws FormatError for a missing or other type.
std::unique_ptr<TextTokenizer> make_gguf_tokenizer(const GgufFile& file);

}  // namespace pagedkv
