// A GGUF file type as llama.cpp's quantizer makes it: one type for most weights and its
// per-tensor rules for the rest (a "mix"), so that the benchmarks' random-weight files carry the
// types a downloaded Q4_K_M or IQ4_XS file does. The rules (llama.cpp's, for these mixes and
// models without an importance matrix):
//   - the output matrix (token_embd when the embeddings are tied) is Q6_K in every K-quant and
//     IQ4 mix;
//   - Q4_K_M / Q5_K_M: attn_v and ffn_down (ffn_down_exps too) are Q6_K in the layers
//     "use_more_bits" picks — the first and last eighth of the layers and every third layer
//     between — and Q4_K / Q5_K elsewhere;
//   - IQ4_XS: attn_v is Q5_K when four or more query heads share a KV head, ffn_down Q5_K in
//     the first eighth of the layers;
//   - everything else 2-D or 3-D gets the mix's type; norms and the router stay F32.
// (llama.cpp's extra rules for models of exactly 8 experts are not modelled.) The plain types
// (F32, F16, BF16, Q8_0, Q4_0, Q6_K) give every matrix that type, as llama-quantize --pure does.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pagedkv/model/format/tensor_type.h"

namespace pagedkv {

class WeightMix {
 public:
  // "F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_K_M", "Q5_K_M", "Q6_K" or "IQ4_XS" (any case);
  // anything else throws ConfigError listing these.
  static WeightMix parse(std::string_view name);
  // The names parse accepts, comma-separated.
  static const char* names();

  const std::string& name() const { return name_; }  // upper case, e.g. "Q4_K_M"
  TensorType base_type() const { return base_; }  // the type of most matrices
  uint32_t file_type() const { return file_type_; }  // general.file_type, as llama.cpp numbers it

  // Where a matrix sits in the model, as the rules above need it.
  enum class Role { kEmbedding, kOutput, kAttnQ, kAttnK, kAttnV, kAttnOutput, kFfnGateUp, kFfnDown };
  // The type of a matrix of `role` in layer `layer` of `layers` (layer ignored for the
  // embedding and output); `gqa` = query heads per KV head.
  TensorType type_of(Role role, int layer, int layers, int gqa) const;

 private:
  std::string name_;
  TensorType base_ = TensorType::kF32;
  uint32_t file_type_ = 0;
};

}  // namespace pagedkv
