// How long one forward pass takes, for timed replay: a roofline-style model with a fixed part,
// linear prefill (GEMMs), quadratic prefill attention, and per-sequence and per-context-token
// decode costs (reading weights is in the fixed part, reading KV in the per-token part).
//
//   step = linear + prefill_token_pairs * prefill_attention_ms_per_mpair / 1e6  (pairs: new x context)
//        + decode_context_tokens * decode_attention_ms_per_ktoken / 1e3
//        + swapped_blocks * swap_ms_per_block
//   gemm   = prefill_tokens / prefill_tokens_per_s + decode_seqs * decode_ms_per_seq
//   linear = overhead + gemm, or max(overhead, gemm) with overlap_weight_read
//
// overlap_weight_read is the roofline reading of a GPU decode step on one device: the overhead
// is the time to stream the weights once, and the linear layers' matrix multiplies run while
// they stream, so a step takes the longer of the two rather than their sum (until the batch's
// FLOPs outgrow the weight read, adding sequences costs nothing there). Attention reads each
// sequence's own KV in a separate kernel, so its terms still add.
//
// The presets are rough estimates from published hardware peaks (about half of peak FLOP/s and
// of memory bandwidth), not measurements; give the coefficients on the command line to use
// measured ones.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace pagedkv {

// The work of one step, as the cost model sees it.
struct StepWork {
  int64_t prefill_tokens = 0;  // new tokens of chunks that are not single decode tokens
  double prefill_token_pairs = 0;  // Σ new tokens x mean context they attend to
  int64_t decode_seqs = 0;  // sequences producing one decode token
  int64_t decode_context_tokens = 0;
  int64_t swapped_blocks = 0;  // blocks copied between device and host this step
};

struct StepCostModel {
  std::string name = "custom";
  std::string description;
  double step_overhead_ms = 6.0;
  double prefill_tokens_per_s = 20000;
  double prefill_attention_ms_per_mpair = 1.5;
  double decode_ms_per_seq = 0.05;
  double decode_attention_ms_per_ktoken = 0.045;
  double swap_ms_per_block = 0.05;
  bool overlap_weight_read = false;  // linear = max(overhead, gemm), not their sum (see above)

  double step_seconds(const StepWork& w) const;
  void validate() const;  // ConfigError naming the bad coefficient
};

std::span<const StepCostModel> step_cost_presets();
// The preset called `name`; ConfigError listing the presets if there is none.
StepCostModel step_cost_preset(std::string_view name);

}  // namespace pagedkv
