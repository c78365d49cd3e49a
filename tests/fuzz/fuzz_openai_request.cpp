// libFuzzer target: the request bodies of pagedkv serve's completion, /tokenize and /detokenize
// endpoints, and the stop-string matcher that scans generated text. Any input must end in a parsed request or an
// ApiError (a 4xx answer); anything else — another exception, a crash, a sanitizer report — is a
// bug. Built and run by scripts/fuzz.sh (clang, libFuzzer, ASan+UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/api/api_error.h"
#include "pagedkv/api/openai_request.h"
#include "pagedkv/api/stop_string_matcher.h"

namespace {

using namespace pagedkv::api;

using pagedkv::fuzz::check;

void parse_both(std::string_view body) {
  for (ApiEndpoint e : {ApiEndpoint::kCompletions, ApiEndpoint::kChatCompletions}) {
    try {
      const CompletionRequest r = parse_completion_request(body, e, RequestLimits{});
      // What the parser accepts stays inside the limits it promises.
      check(r.n >= 1 && r.n <= RequestLimits{}.max_n);
      check(r.logprobs >= -1 && r.logprobs <= RequestLimits{}.max_logprobs);
      check(!r.max_tokens || *r.max_tokens >= 1);
      check(r.temperature >= 0 && r.top_p > 0 && r.top_p <= 1);
      check(static_cast<int>(r.stop.size()) <= RequestLimits{}.max_stop_strings);
      for (const std::string& s : r.stop) check(!s.empty());
      if (e == ApiEndpoint::kChatCompletions) check(!r.messages.empty() && !render_chat_prompt(r.messages).empty());
      else check(!r.prompts.empty());
    } catch (const ApiError& err) {
      check(err.status() == 400);
    }
  }
}

void parse_token_endpoints(std::string_view body) {
  try {
    const TokenizeRequest r = parse_tokenize_request(body);
    check(r.prompt.has_value() || (!r.messages.empty() && !render_chat_prompt(r.messages).empty()));
  } catch (const ApiError& err) {
    check(err.status() == 400);
  }
  constexpr int kVocab = 512;
  try {
    for (pagedkv::TokenId t : parse_detokenize_request(body, kVocab)) check(t >= 0 && t < kVocab);
  } catch (const ApiError& err) {
    check(err.status() == 400);
  }
}

// The first byte picks how many stop strings and how long; the rest is text fed in pieces.
void stop_strings(const uint8_t* data, size_t size) {
  if (size < 2) return;
  const size_t num = data[0] % 4, len = 1 + data[1] % 6;
  std::string_view rest(reinterpret_cast<const char*>(data) + 2, size - 2);
  std::vector<std::string> stops;
  for (size_t i = 0; i < num && rest.size() >= len; ++i) {
    stops.emplace_back(rest.substr(0, len));
    rest.remove_prefix(len);
  }
  StopStringMatcher m(stops);
  std::string emitted;
  bool stopped = false;
  for (size_t at = 0; at < rest.size() && !stopped;) {
    const size_t piece = 1 + static_cast<unsigned char>(rest[at]) % 5;
    const auto r = m.append(rest.substr(at, piece));
    emitted += r.text;
    stopped = r.stopped;
    at += piece;
  }
  if (!stopped) emitted += m.finish();
  // What is emitted is always a prefix of the text; without a stop, all of it; with one, the text
  // up to the earliest stop string, which never appears in what was emitted.
  check(std::string_view(rest).substr(0, emitted.size()) == emitted);
  if (!stopped) check(emitted.size() == rest.size());
  for (const std::string& s : stops) check(emitted.find(s) == std::string::npos);
  check(utf8_complete_prefix(emitted) <= emitted.size());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  parse_both(std::string_view(reinterpret_cast<const char*>(data), size));
  parse_token_endpoints(std::string_view(reinterpret_cast<const char*>(data), size));
  stop_strings(data, size);
  return 0;
}
