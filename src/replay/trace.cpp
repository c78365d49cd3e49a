#include "pagedkv/replay/trace.h"

#include <numeric>

namespace pagedkv {

std::string_view trace_format_name(TraceFormat f) {
  switch (f) {
    case TraceFormat::kAuto:
      return "auto";
    case TraceFormat::kMooncake:
      return "mooncake";
    case TraceFormat::kAzure:
      return "azure";
    case TraceFormat::kTokens:
      return "tokens";
  }
  return "?";
}

void Trace::append_prompt(size_t i, std::vector<TokenId>& out) const {
  const TraceRequest& r = requests[i];
  const size_t start = out.size();
  out.resize(start + static_cast<size_t>(r.input_tokens));
  TokenId* p = out.data() + start;
  for (uint32_t k = 0; k < r.num_runs; ++k) {
    const ContentRun& run = runs[r.first_run + k];
    if (run.is_explicit) {
      const TokenId* src = explicit_tokens.data() + run.first;
      std::copy(src, src + run.length, p);
    } else {
      std::iota(p, p + run.length, static_cast<TokenId>(run.first));
    }
    p += run.length;
  }
}

int64_t Trace::total_prompt_blocks(int block_size) const {
  int64_t total = 0;
  for (size_t i = 0; i < requests.size(); ++i) total += prompt_blocks(i, block_size);
  return total;
}

void Trace::truncate(size_t n) {
  if (n >= requests.size()) return;
  requests.resize(n);
  total_input_tokens = 0;
  total_output_tokens = 0;
  for (const TraceRequest& r : requests) {
    total_input_tokens += r.input_tokens;
    total_output_tokens += r.output_tokens;
  }
}

}  // namespace pagedkv
