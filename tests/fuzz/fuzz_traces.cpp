// libFuzzer target: the trace readers of `pagedkv replay` (Mooncake JSONL, Azure CSV, pagedkv
// JSONL), strict and lenient. Any input must end in a Trace that holds together or a
// FormatError naming the line; anything else — another exception, a crash, a sanitizer report —
// is a bug. Built and run by scripts/fuzz.sh (clang, libFuzzer, ASan+UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/replay/trace_reader.h"

namespace {

using namespace pagedkv;

using pagedkv::fuzz::check;

// What every reader promises of the trace it returns: each request's runs lie inside `runs`,
// their lengths add up to its prompt, explicit runs lie inside `explicit_tokens`, the totals are
// the sums.
void check_trace(const Trace& t) {
  int64_t input = 0, output = 0;
  for (size_t i = 0; i < t.size(); ++i) {
    const TraceRequest& r = t.requests[i];
    check(r.input_tokens >= 0 && r.output_tokens >= 0);
    check(static_cast<size_t>(r.first_run) + r.num_runs <= t.runs.size());
    int64_t covered = 0;
    for (uint32_t k = r.first_run; k < r.first_run + r.num_runs; ++k) {
      const ContentRun& run = t.runs[k];
      check(run.length >= 0);
      if (run.is_explicit)
        check(run.first >= 0 &&
              static_cast<size_t>(run.first) + static_cast<size_t>(run.length) <= t.explicit_tokens.size());
      covered += run.length;
    }
    check(covered == r.input_tokens);
    if (r.input_tokens <= (1 << 16)) {  // a trace may claim billions of tokens: rebuild only short prompts
      std::vector<TokenId> prompt;
      t.append_prompt(i, prompt);
      check(static_cast<int64_t>(prompt.size()) == r.input_tokens);
    }
    input += r.input_tokens;
    output += r.output_tokens;
  }
  check(input == t.total_input_tokens && output == t.total_output_tokens);
}

template <typename Reader>
void read_both_ways(const std::string& text, Reader read) {
  for (const bool lenient : {false, true}) {
    TraceReadOptions o;
    o.lenient = lenient;
    std::istringstream in(text);
    try {
      check_trace(read(in, "fuzz", o));
    } catch (const FormatError&) {
      // a bad record (strict), or no valid record at all (lenient): both named, both fine
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  read_both_ways(text, [](std::istream& in, const std::string& name, const TraceReadOptions& o) {
    return read_mooncake_trace(in, name, o);
  });
  read_both_ways(text, [](std::istream& in, const std::string& name, const TraceReadOptions& o) {
    return read_azure_trace(in, name, o);
  });
  read_both_ways(text, [](std::istream& in, const std::string& name, const TraceReadOptions& o) {
    return read_token_trace(in, name, o);
  });
  return 0;
}
