#include "pagedkv/replay/step_cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

StepCostModel preset(std::string name, std::string description, double overhead_ms, double prefill_tps,
                     double attention_ms_per_mpair, double decode_ms_per_seq, double decode_attention_ms_per_ktoken,
                     double swap_ms_per_block, bool overlap_weight_read = false) {
  StepCostModel m;
  m.name = std::move(name);
  m.description = std::move(description);
  m.step_overhead_ms = overhead_ms;
  m.prefill_tokens_per_s = prefill_tps;
  m.prefill_attention_ms_per_mpair = attention_ms_per_mpair;
  m.decode_ms_per_seq = decode_ms_per_seq;
  m.decode_attention_ms_per_ktoken = decode_attention_ms_per_ktoken;
  m.swap_ms_per_block = swap_ms_per_block;
  m.overlap_weight_read = overlap_weight_read;
  return m;
}

// Derivations (bf16, ~50% of peak):
//  llama3-8b-h100: 16 GFLOP/token -> ~22k tok/s of 990 TFLOP/s; weights 16 GB / 3.35 TB/s ->
//    ~5 ms a step; KV 128 KiB/token -> 1,000 tokens read in ~0.045 ms; attention 4*4096*32 FLOP
//    per (token, context) pair -> ~1.5 ms per million pairs; 16-token block of 2 MiB over
//    PCIe 5 (~50 GB/s) -> 0.04 ms.
//  llama2-70b-8xa800 (the Mooncake paper's testbed): 140 GFLOP/token over 8 x 312 TFLOP/s ->
//    ~9k tok/s; weights 140 GB / (8 x 2 TB/s) plus all-reduce -> ~15 ms; KV 320 KiB/token ->
//    0.02 ms per 1,000 tokens across 8 GPUs; 4*8192*80 FLOP per pair -> ~2.1 ms per million.
//    A 10k-token uncached prefill then takes ~1.2 s (the paper's Fig. 10: 1.37 s per request).
//  opt-13b-a100 (the PagedAttention paper's Fig. 12a testbed, fp16): 26 GFLOP/token of 156
//    TFLOP/s -> ~6k tok/s and 0.17 ms per decode sequence; weights 26 GB / 1.55 TB/s -> ~20 ms a
//    step; KV 800 KiB/token -> 1,000 tokens read in ~0.65 ms; 4*5120*40 FLOP per pair -> ~5.3 ms
//    per million; a 16-token block of 12.5 MiB over PCIe 4 (~25 GB/s) -> 0.5 ms. One GPU, no
//    collective between the weight read and the matrix multiplies, so they overlap (roofline
//    max): the GEMMs of a step cost more than the 20 ms weight read only past ~120 sequences
//    (120 x 0.17 ms). The other two presets predate this term and still add them.
const std::array<StepCostModel, 3>& presets() {
  static const std::array<StepCostModel, 3> p = {
      preset("llama3-8b-h100", "LLaMA-3 8B on one H100 (rough roofline estimate)", 6.0, 20000, 1.5, 0.05, 0.045, 0.05),
      preset("llama2-70b-8xa800", "LLaMA-2 70B, tensor parallel over 8 A800 (rough roofline estimate)", 15.0, 9000, 2.1,
             0.1, 0.02, 0.15),
      preset("opt-13b-a100", "OPT-13B on one A100-40GB, the PagedAttention paper's testbed (rough roofline estimate)",
             20.0, 6000, 5.3, 0.17, 0.65, 0.5, /*overlap_weight_read=*/true),
  };
  return p;
}

}  // namespace

double StepCostModel::step_seconds(const StepWork& w) const {
  const double gemm_ms = static_cast<double>(w.prefill_tokens) / prefill_tokens_per_s * 1e3 +
                         static_cast<double>(w.decode_seqs) * decode_ms_per_seq;
  double ms = overlap_weight_read ? std::max(step_overhead_ms, gemm_ms) : step_overhead_ms + gemm_ms;
  ms += w.prefill_token_pairs * prefill_attention_ms_per_mpair / 1e6;
  ms += static_cast<double>(w.decode_context_tokens) * decode_attention_ms_per_ktoken / 1e3;
  ms += static_cast<double>(w.swapped_blocks) * swap_ms_per_block;
  return ms / 1e3;
}

void StepCostModel::validate() const {
  auto check = [](const char* field, double v, bool positive) {
    if (!std::isfinite(v) || v < 0 || (positive && v == 0))
      throw ConfigError(fmt::format("cost model: {} must be {}, got {}", field, positive ? "positive" : ">= 0", v));
  };
  check("step_overhead_ms", step_overhead_ms, false);
  check("prefill_tokens_per_s", prefill_tokens_per_s, true);
  check("prefill_attention_ms_per_mpair", prefill_attention_ms_per_mpair, false);
  check("decode_ms_per_seq", decode_ms_per_seq, false);
  check("decode_attention_ms_per_ktoken", decode_attention_ms_per_ktoken, false);
  check("swap_ms_per_block", swap_ms_per_block, false);
  if (step_overhead_ms == 0 && decode_ms_per_seq == 0 && decode_attention_ms_per_ktoken == 0)
    throw ConfigError("cost model: a decode step would take no time (set step_overhead_ms or a decode cost)");
}

std::span<const StepCostModel> step_cost_presets() { return presets(); }

StepCostModel step_cost_preset(std::string_view name) {
  std::string names;
  for (const StepCostModel& m : presets()) {
    if (m.name == name) return m;
    if (!names.empty()) names += ", ";
    names += m.name;
  }
  throw ConfigError(fmt::format("unknown cost preset '{}' (choose {})", name, names));
}

}  // namespace pagedkv
