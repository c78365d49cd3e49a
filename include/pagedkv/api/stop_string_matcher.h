// Stop strings over incrementally decoded text. Text arrives a token's piece at a time; a stop
// string may span pieces, so text that could still become the start of a stop string is held
// back until it cannot (or until the end). The stop string itself is emitted only when asked
// (vLLM's include_stop_str_in_output; OpenAI's and vLLM's default leaves it out). Held-back text also includes an
// incomplete trailing UTF-8 sequence, so what is emitted is always whole characters.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace pagedkv::api {

class StopStringMatcher {
 public:
  // `include_stop`: the text ends with the stop string that was found, instead of right before it.
  explicit StopStringMatcher(std::vector<std::string> stops, bool include_stop = false);

  struct Result {
    std::string text;  // safe to emit now
    bool stopped = false;  // a stop string was found; `text` ends right before it (or with it)
  };
  // Appends decoded text; after a stop, further text is ignored.
  Result append(std::string_view text);
  // The end of the sequence: whatever was held back (possibly a partial UTF-8 sequence).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool include_stop_ = false;
  bool stopped_ = false;
};

// The length of the longest prefix of `s` that does not end inside a UTF-8 sequence.
size_t utf8_complete_prefix(std::string_view s);

}  // namespace pagedkv::api
