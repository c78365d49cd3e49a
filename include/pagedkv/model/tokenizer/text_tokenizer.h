// What the serving code needs from a tokenizer, whatever file it came from: the llama2.c
// tokenizer (model/tokenizer.h, tok*.bin) and a GGUF file's own (model/gguf_tokenizer.h) both
// implement it, so generate, serve and the Python module work with either.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/core/ids.h"

namespace pagedkv {

// One piece of a prompt that a chat template rendered: the template's own markers name special
// tokens by their text ("<|im_start|>", "<end_of_turn>"); message contents are plain text, never
// read as special tokens (a user cannot end a turn by typing "<|im_end|>").
struct PromptPart {
  std::string text;
  bool special = false;
};

// The tokens of fill-in-the-middle prompting (code models): the prompt is
// prefix-token <prefix text> suffix-token <suffix text> middle-token, and the model writes the middle.
struct FillInMiddleTokens {
  TokenId prefix = -1, suffix = -1, middle = -1;
};

class TextTokenizer {
 public:
  virtual ~TextTokenizer() = default;

  virtual int vocab_size() const = 0;
  virtual TokenId bos_id() const = 0;
  virtual TokenId eos_id() const = 0;  // -1 when the vocabulary has none

  // The ids of `text` (plain text: strings that look like special tokens are not special), BOS
  // first when add_bos.
  virtual std::vector<TokenId> encode(std::string_view text, bool add_bos) const = 0;

  // The ids of a prompt made of parts, BOS first when add_bos: adjacent plain parts are one text
  // (tokens may span their boundary, as in the concatenated text); a special part that is a
  // token of the vocabulary becomes that token, one that is not is plain text. The default, for a
  // vocabulary without special tokens, encodes the concatenation.
  virtual std::vector<TokenId> encode_parts(std::span<const PromptPart> parts, bool add_bos) const;

  // The tokens that end a generation: EOS and, where the vocabulary has them, its end-of-turn
  // tokens (<|eot_id|>, <|im_end|>, <end_of_turn>, <|eom_id|>, ...). Default: EOS if there is one.
  virtual std::vector<TokenId> end_of_generation_ids() const;

  // Bytes of the longest piece. No piece is shorter than the input bytes it stands for, so a
  // text of n bytes encodes to at least n / max_piece_bytes() tokens: a server refuses a prompt
  // that cannot fit the model before encoding it (the llama2c tokenizer's encoding is quadratic).
  virtual int max_piece_bytes() const = 0;

  // Incremental detokenization: the bytes token `token` adds to the text when it follows `prev`
  // (-1 for the first token of a text). Concatenating these for a sequence gives its text;
  // a multi-byte character may arrive over several tokens, one byte each.
  virtual std::string decode_piece(TokenId prev, TokenId token) const = 0;

  // The text of a control token as the vocabulary writes it ("</s>", "<|im_end|>"), which
  // decode_piece leaves out: what an output keeping special tokens shows (vLLM's
  // skip_special_tokens false). Empty for every other token; the default (a vocabulary without
  // control tokens) is always empty.
  virtual std::string special_text(TokenId token) const;

  // The vocabulary's fill-in-the-middle tokens when it has all three; the default: none.
  virtual std::optional<FillInMiddleTokens> fill_in_middle_tokens() const;

  // The text of ids[1..] with ids[0] as context only (run.c's convention: ids[0] is normally BOS):
  // decode_piece(ids[i-1], ids[i]) for i = 1 .. size-1.
  std::string render(std::span<const TokenId> ids) const;
  // The text of every id: decode_piece(-1, ids[0]) followed by render(ids).
  std::string detokenize(std::span<const TokenId> ids) const;

 protected:
  TextTokenizer() = default;
  TextTokenizer(const TextTokenizer&) = default;
  TextTokenizer& operator=(const TextTokenizer&) = default;
};

}  // namespace pagedkv
