// The pre-tokenizer of a byte-level BPE vocabulary (tokenizer.ggml.pre): regular expressions that
// cut a text into words before any merge, so that merges never cross a word boundary. The
// patterns are llama.cpp's for each name, run by PCRE2 in UTF mode with Unicode properties:
//
//   gpt-2                      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)
//   llama-bpe (Llama 3), qwen2 (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
//                              |[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*
//                              |\s*[\r\n]+|\s+(?!\S)|\s+        (qwen2: \p{N} one digit at a time)
//
// As in llama.cpp, the text between two matches is a word too (nothing is dropped), and \s is
// Unicode's White_Space set (which includes U+0085, unlike PCRE2's own \s).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace pagedkv {

class BpePreTokenizer {
 public:
  // Throws FormatError naming the supported names when `name` is not one of them.
  explicit BpePreTokenizer(std::string_view name);
  ~BpePreTokenizer();
  BpePreTokenizer(BpePreTokenizer&&) noexcept;
  BpePreTokenizer& operator=(BpePreTokenizer&&) noexcept;

  // The words of `text`, which must be valid UTF-8 (see sanitize_utf8), in order; their
  // concatenation is `text`. Views into `text`.
  std::vector<std::string_view> split(std::string_view text) const;

  const std::string& name() const { return name_; }
  // The tokenizer.ggml.pre values understood (aliases llama.cpp treats alike included).
  static std::vector<std::string> supported_names();

 private:
  struct Pattern;
  std::string name_;
  std::vector<std::unique_ptr<Pattern>> patterns_;  // applied one after the other
};

// `text` as valid UTF-8 the way llama.cpp reads it: a byte that does not start a well-formed
// sequence becomes U+FFFD; an overlong sequence is the character it encodes; a surrogate or a
// code point above U+10FFFF becomes U+FFFD.
std::string sanitize_utf8(std::string_view text);

}  // namespace pagedkv
