// The model runner: one forward pass of a LLaMA-architecture model over a flattened batch of
// tokens from many requests (vLLM v1 style — no prefill/decode distinction), with the KV cache
// in a paged KVArena.
//
// The caller (the engine) decides which tokens run this step and where their K/V live; the runner
// only computes. For each step it passes, for T scheduled tokens grouped by request:
//   token_ids[T], positions[T]  each token and its position in its sequence;
//   slot_mapping[T]             the KV slot each token's K/V is written to
//                               (block_id * block_size + position % block_size; see
//                               storage/block_table.h compute_slot_mapping; -1 skips the write);
//   attention                   query_start / context_lens / block tables of the requests, as
//                               paged_attention takes them (request i's rows are
//                               [query_start[i], query_start[i+1]), their positions end at
//                               context_lens[i] - 1);
//   logits_rows                 the rows whose next-token logits are wanted — usually the last
//                               row of each request that samples this step (a prefill chunk that
//                               does not reach the end of its prompt needs none).
// Every layer computes q, k, v for all T tokens, writes k and v into the arena through the slot
// mapping (write_kv), attends through the block tables (paged_attention), and runs the SwiGLU
// feed-forward block; finally only the requested rows go through the final norm and classifier.
//
// Example: two requests, A prefilling 3 prompt tokens at positions 0..2 and B decoding position 9:
//     token_ids = {a0, a1, a2, b9}; positions = {0, 1, 2, 9}; slot_mapping from each block table;
//     query_start = {0, 3, 4}; context_lens = {3, 10}; logits_rows = {2, 3};
//     Logits out = runner.forward(batch, arena);   // out.row(0): A's next token, out.row(1): B's
// ForwardBatchBuilder (model/forward_batch.h) assembles these arrays from per-request pieces.
//
// Architectures (ModelConfig): llama2.c's and GGUF's llama, qwen2, qwen3, phi3, gemma2, gemma3 and
// qwen3moe — RoPE on adjacent pairs or halves with the model's theta (and Llama 3 frequency
// divisors), q/k/v biases, per-head q/k norms, post norms, GeGLU, embedding scale, attention and
// final soft-caps, sliding-window layers, and mixture-of-experts feed-forward blocks (moe_ffn). A
// model with sliding and full layers keeps two KV-cache groups: group 1's block tables and slots
// come in ForwardBatch::extra_groups, and every layer lives at ModelConfig::arena_layer(l) of the
// arena (kv_arena_layers() layers).
//
// Numerics follow llama2.c's run.c operation by operation (RMSNorm with eps 1e-5, RoPE on adjacent
// pairs with theta 10000, SwiGLU, matmuls summed left to right in float, bit-identical to run.c's
// matmul): with an f32 arena the only difference from run.c is inside the attention kernel
// (its summation order and online softmax). The three goldens of ../shared/models come out
// byte for byte, alone or batched, at any block size (tests/unit/test_model_runner.cpp).
//
// Threads: the matmuls use OpenMP with kernel_threads() threads (kernels/thread_pool.h), as does
// paged_attention; small products stay on the calling thread. On a machine shared with other busy
// processes, run with OMP_WAIT_POLICY=passive (or PAGEDKV_NUM_THREADS=1): spinning OpenMP
// barriers otherwise cost a scheduler time slice each. A runner is not thread-safe (it reuses
// scratch buffers); use one per thread.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pagedkv/core/ids.h"
#include "pagedkv/kernels/paged_attention.h"
#include "pagedkv/model/forward_batch.h"
#include "pagedkv/model/quant/linear_layer.h"
#include "pagedkv/model/model.h"
#include "pagedkv/storage/kv_arena.h"

namespace pagedkv {

class ModelRunner {
 public:
  // `model` must outlive the runner. Repacks the F32 weights for the batched matmuls (a copy of
  // every F32 matrix: packed_weight_bytes()); matrices of other types are read in place, as
  // are the embedding, norms and biases. Throws UsageError for weights it cannot run. `isa` selects the matmul and
  // attention builds (kAuto: the best this CPU runs; kScalar forces the baseline build, for comparisons).
  explicit ModelRunner(const Model& model, KernelIsa isa = KernelIsa::kAuto);

  KernelIsa isa() const { return isa_; }

  const ModelConfig& config() const { return config_; }

  // The arena spec for this model: KVArena arena(runner.kv_cache_spec(16), config().kv_arena_layers(), blocks).
  KVCacheSpec kv_cache_spec(int block_size, DType dtype = DType::kF32) const {
    return config_.kv_cache_spec(block_size, dtype);
  }

  // Runs one step (see the file comment). Throws UsageError, naming the bad value, if the batch
  // is inconsistent (sizes differ, a token or position out of range, positions that do not end at
  // their request's context length, a logits row out of range) or the arena does not fit the
  // model (layers, KV heads, head_dim). Block tables and slots are checked by the kernels.
  Logits forward(const ForwardBatch& batch, KVArena& kv);

  size_t packed_weight_bytes() const;

 private:
  struct Layer {
    const float* attn_norm = nullptr;
    const float* post_attn_norm = nullptr;  // or null
    const float* ffn_norm = nullptr;
    const float* post_ffn_norm = nullptr;  // or null
    const float* q_norm = nullptr;  // gemma3: per-head gains, or null
    const float* k_norm = nullptr;
    bool sliding_rope = false;  // RoPE from the sliding layers' table (gemma3)
    LinearLayer wqkv;  // [wq; wk; wv] (+ biases) -> [T][q_dim + 2 kv_dim]
    LinearLayer wo;  //                         -> [T][dim]
    LinearLayer gate_up;  // [gate; up]              -> [T][2 hidden_dim]
    LinearLayer down;  //                         -> [T][dim]
    // Mixture of experts (ModelConfig::is_moe; gate_up and down are then empty).
    LinearLayer router;  //                         -> [T][n_experts]
    std::vector<LinearLayer> expert_gate_up;  // per expert: [gate; up] -> [n][2 expert_hidden_dim]
    std::vector<LinearLayer> expert_down;  // per expert:            -> [n][dim]
    AttentionShape attention;  // per layer: sliding window or not
    int group = 0;  // KV-cache group
    int arena_layer = 0;  // layer index in the KV arena
  };
  void validate(const ForwardBatch& batch, const KVArena& kv) const;
  void rmsnorm_rows(const float* x, const float* weight, int rows, float* out) const;
  void apply_rope(float* x, int num_heads, const float* cos_sin) const;
  void rmsnorm_heads(float* x, int num_heads, const float* weight) const;
  // out[t] = the mixture-of-experts FFN of xb[t] for every token.
  void moe_ffn(const Layer& layer, const float* xb, int num_tokens, float* out);

  ModelConfig config_;
  WeightTensor token_embedding_;
  const float* output_norm_;
  std::vector<Layer> layers_;
  LinearLayer output_;  // -> [rows][vocab]
  std::vector<float> rope_inv_freq_;  // [rotary_dims / 2]: 1 / theta^(2i / rotary_dims) (/ Llama 3 divisor)
  std::vector<float> rope_inv_freq_sliding_;  // the sliding layers' own, or empty (gemma3)
  KernelIsa isa_;

  // Scratch, grown to the largest batch seen.
  std::vector<float> x_, xb_, qkv_, q_, k_, v_, att_, proj_, gate_up_, hidden_, rope_, rope_sliding_, final_, logits_;
  std::vector<float> router_logits_, expert_in_, expert_gate_up_, expert_hidden_, expert_out_, expert_slots_;
  std::vector<int> expert_choice_;  // [T][n_experts_used]: the chosen experts, most probable first
  std::vector<float> expert_weight_;  // [T][n_experts_used]: their weights
  std::vector<int> expert_tokens_;  // the (token, choice) pairs t * n_experts_used + j, grouped by expert
  std::vector<int> expert_first_;  // [n_experts + 1]: where each expert's pairs start in expert_tokens_
  std::vector<int> expert_fill_;  // scratch of the grouping
  std::vector<LinearLayer::Call> expert_calls_;  // one per expert used in the step
};

}  // namespace pagedkv
