// The llama2.c BPE tokenizer (tok*.bin files), encoding and decoding exactly as llama2.c's run.c.
//
// File format (little-endian): int32 max_token_length, then for each of vocab_size tokens
// (id = index): float32 score, int32 len, len bytes of the piece (UTF-8, no terminator). The file
// does not record vocab_size; it comes from the model header. Loading validates the file the way
// the checkpoint loader does: a truncated, oversized or inconsistent file throws FormatError with
// the expected and actual byte counts.
//
// Conventions fixed by llama2.c: id 0 is <unk>, 1 is BOS, 2 is EOS, ids 3..258 are the byte-
// fallback tokens <0x00>..<0xFF> (byte b is id b + 3).
//
// Typical use, reproducing what `run` prints for a finished sequence `ids` (BOS first):
//     std::string text = tok.render(ids) + "\n";
// or incrementally, token by token:
//     out += Tokenizer::safe_piece(tok.decode(prev, next));   // = tok.decode_piece(prev, next)
// As a TextTokenizer (the interface the serving code uses), decode_piece is exactly that printed
// text, so render() and detokenize() print what run.c prints.
#pragma once

#include <span>
#include <string>
#include <functional>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/model/tokenizer/text_tokenizer.h"

namespace pagedkv {

class Tokenizer final : public TextTokenizer {
 public:
  static constexpr TokenId kUnk = 0;
  static constexpr TokenId kBos = 1;
  static constexpr TokenId kEos = 2;
  static constexpr TokenId kFirstByteToken = 3;  // <0x00>

  // Reads `path`, which must hold exactly `vocab_size` pieces. Throws Error if unreadable,
  // FormatError if malformed (names the token and the byte offsets involved).
  Tokenizer(const std::string& path, int vocab_size);
  // The same from bytes already in memory; `name` is used in error messages.
  Tokenizer(std::span<const std::byte> file, int vocab_size, std::string name);

  int vocab_size() const override { return static_cast<int>(pieces_.size()); }
  TokenId bos_id() const override { return kBos; }
  TokenId eos_id() const override { return kEos; }
  int max_token_length() const { return max_token_length_; }
  int max_piece_bytes() const override { return max_token_length_; }  // every piece fits it (checked at load)
  std::string_view piece(TokenId id) const;  // raw piece bytes; throws UsageError if out of range
  float score(TokenId id) const;

  // run.c's encode: optional BOS, then (if text is non-empty) the dummy-prefix piece " ", then
  // one token per UTF-8 code point (byte-fallback tokens for code points not in the vocab), then
  // repeatedly merge the adjacent pair whose concatenation is the highest-scoring piece (the
  // leftmost on ties) until none merges; then optional EOS. Like run.c's C string, the text ends
  // at its first NUL byte. Throws FormatError if the vocab lacks what encoding needs (" " piece,
  // byte tokens).
  std::vector<TokenId> encode(std::string_view text, bool add_bos, bool add_eos) const;
  std::vector<TokenId> encode(std::string_view text, bool add_bos = true) const override {
    return encode(text, add_bos, false);
  }

  // run.c's decode: the piece of `token`, without its leading space when `prev` is BOS; a piece
  // spelled <0xHH> is the single raw byte 0xHH. The view lives as long as the tokenizer.
  std::string_view decode(TokenId prev, TokenId token) const;

  // What run.c's safe_printf prints for a decoded piece: nothing for an empty piece or a single
  // byte that is neither printable nor whitespace (C locale), else the piece up to its first NUL.
  static std::string_view safe_piece(std::string_view piece);

  // safe_piece(decode(prev, token)): what run.c prints for `token` after `prev`. With it,
  // TextTokenizer::render(ids) is the text run.c prints for a token sequence (ids[0], normally
  // BOS, is context only), without the final newline.
  std::string decode_piece(TokenId prev, TokenId token) const override {
    return std::string(safe_piece(decode(prev, token)));
  }

 private:
  void check_id(TokenId id) const;
  TokenId lookup(std::string_view s) const;  // -1 if not a piece

  int max_token_length_ = 0;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::vector<std::string> decoded_;  // decode(prev != BOS, id)
  std::vector<std::string> decoded_after_bos_;  // decode(BOS, id)
  // Heterogeneous lookup: find() takes a string_view without building a std::string.
  struct PieceHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  std::unordered_map<std::string, TokenId, PieceHash, std::equal_to<>> ids_by_piece_;
  std::string name_;
};

}  // namespace pagedkv
