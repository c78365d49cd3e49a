// libFuzzer target: GGUF models with the weight types and architectures of real downloads, from
// the loader through two forward passes. The input describes a small model — its architecture
// (llama, qwen2, qwen3, phi3, qwen3moe), the type of every weight matrix (any runnable type: F32,
// F16, BF16, the legacy quants, the K-quants, IQ4), and a few deliberate inconsistencies (a
// dimension off by one, a missing tensor, a key that claims more layers, heads or experts than the
// tensors hold, a tensor of the wrong rank) — and the rest of its bytes are the tensors' contents,
// scales included, so NaN and infinite scales and weights occur. The file must be refused with a
// FormatError, or load and run a prompt and a decode step whose logits have the vocabulary's size
// and whose greedy and sampled tokens are in the vocabulary. Anything else (another exception, a
// crash, a sanitizer report such as an out-of-bounds read of a quantized row) is a bug. Built and
// run by scripts/fuzz.sh; the seeds describe valid models of each architecture, and nan-weights is a model
// whose NaN weights reach the activation quantizers (format/int8_rounding.h) and the sampler.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "fuzz_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/format/gguf_writer.h"
#include "pagedkv/model/forward_batch.h"
#include "pagedkv/model/gguf_model.h"
#include "pagedkv/model/model_runner.h"
#include "pagedkv/model/sampler.h"
#include "pagedkv/storage/kv_arena.h"

namespace {

using pagedkv::TensorType;
using pagedkv::fuzz::check;

// Matrix types: every runnable one. Rows are 256 values (the K-quants' super-block) wide.
constexpr TensorType kMatrixTypes[] = {TensorType::kF32,  TensorType::kF16,    TensorType::kBF16,  TensorType::kQ8_0,
                                       TensorType::kQ4_0, TensorType::kQ4_1,   TensorType::kQ5_0,  TensorType::kQ5_1,
                                       TensorType::kQ2_K, TensorType::kQ3_K,   TensorType::kQ4_K,  TensorType::kQ5_K,
                                       TensorType::kQ6_K, TensorType::kIQ4_NL, TensorType::kIQ4_XS};
constexpr const char* kArchitectures[] = {"llama", "qwen2", "qwen3", "phi3", "qwen3moe"};

constexpr int64_t kDim = 256, kHidden = 256, kVocab = 24, kHeads = 4, kKvHeads = 2, kHeadDim = kDim / kHeads;
constexpr int64_t kExperts = 4, kExpertsUsed = 2;

// Builds the file the input describes. Tensor contents cycle through the input's remaining bytes.
class ModelDescription {
 public:
  explicit ModelDescription(pagedkv::fuzz::ByteReader& r) : r_(r) {
    arch_ = kArchitectures[r_.next() % std::size(kArchitectures)];
    layers_ = 1 + r_.next() % 2;
    flaws_ = r_.next();  // a bit per kind of inconsistency
    flaws_ = flaws_ >= 192 ? flaws_ & 63 : 0;  // a quarter of the inputs have some
    payload_ = std::span(r_.data, r_.size).subspan(std::min(r_.at + 32, r_.size));
  }

  std::vector<std::byte> bytes() {
    pagedkv::GgufWriter w;
    const std::string a = arch_;
    w.add_string("general.architecture", a);
    w.add_u32(a + ".context_length", 64);
    w.add_u32(a + ".embedding_length", kDim);
    w.add_u32(a + ".block_count", static_cast<uint32_t>(layers_ + (flaw(0) ? 1 : 0)));  // a layer without tensors
    w.add_u32(a + ".feed_forward_length", kHidden);
    w.add_u32(a + ".attention.head_count", static_cast<uint32_t>(kHeads * (flaw(1) ? 2 : 1)));
    w.add_u32(a + ".attention.head_count_kv", kKvHeads);
    w.add_f32(a + ".attention.layer_norm_rms_epsilon", 1e-6f);
    if (a == "qwen3" || a == "qwen3moe") w.add_u32(a + ".attention.key_length", kHeadDim);
    if (a == "qwen3moe") {
      w.add_u32(a + ".expert_count",
                static_cast<uint32_t>(kExperts + (flaw(2) ? 4 : 0)));  // more than the tensors stack
      w.add_u32(a + ".expert_used_count", kExpertsUsed);
      w.add_u32(a + ".expert_feed_forward_length", kHidden);
    }
    const int64_t q = kHeads * kHeadDim, kv = kKvHeads * kHeadDim;
    matrix(w, "token_embd.weight", kDim, kVocab);
    vector(w, "output_norm.weight", kDim);
    if (r_.next() & 1) matrix(w, "output.weight", kDim, kVocab);
    for (int l = 0; l < layers_; ++l) {
      const std::string b = fmt::format("blk.{}.", l);
      vector(w, b + "attn_norm.weight", kDim);
      vector(w, b + "ffn_norm.weight", kDim);
      if (a == "phi3") {
        matrix(w, b + "attn_qkv.weight", kDim, q + 2 * kv);
      } else {
        matrix(w, b + "attn_q.weight", kDim, q);
        matrix(w, b + "attn_k.weight", kDim, kv);
        if (!flaw(3)) matrix(w, b + "attn_v.weight", kDim, kv);  // a missing tensor
      }
      matrix(w, b + "attn_output.weight", q, kDim + (flaw(4) ? 1 : 0));  // one row too many
      if (a == "qwen2")
        for (const char* bias : {"attn_q.bias", "attn_k.bias", "attn_v.bias"})
          vector(w, b + bias, std::string(bias) == "attn_q.bias" ? q : kv);
      if (a == "qwen3" || a == "qwen3moe") {
        vector(w, b + "attn_q_norm.weight", kHeadDim);
        vector(w, b + "attn_k_norm.weight", kHeadDim);
      }
      if (a == "qwen3moe") {
        f32_matrix(w, b + "ffn_gate_inp.weight", kDim, kExperts);
        const int64_t rank_flaw = flaw(5) ? 1 : 0;  // a 3-D tensor written with one expert less
        stacked(w, b + "ffn_gate_exps.weight", kDim, kHidden, kExperts - rank_flaw);
        stacked(w, b + "ffn_up_exps.weight", kDim, kHidden, kExperts);
        stacked(w, b + "ffn_down_exps.weight", kHidden, kDim, kExperts);
      } else if (a == "phi3") {
        matrix(w, b + "ffn_up.weight", kDim, 2 * kHidden);
        matrix(w, b + "ffn_down.weight", kHidden, kDim);
      } else {
        matrix(w, b + "ffn_gate.weight", kDim, kHidden);
        matrix(w, b + "ffn_up.weight", kDim, kHidden);
        matrix(w, b + "ffn_down.weight", kHidden, kDim);
      }
    }
    return w.bytes();
  }

 private:
  bool flaw(int bit) const { return (flaws_ >> bit) & 1; }

  std::vector<std::byte> contents(size_t n) {
    std::vector<std::byte> out(n);
    if (payload_.empty()) return out;
    for (size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>(payload_[(offset_ + i) % payload_.size()]);
    offset_ = (offset_ + n) % payload_.size();
    return out;
  }
  void add(pagedkv::GgufWriter& w, const std::string& name, TensorType t, std::vector<int64_t> ne) {
    int64_t rows = 1;
    for (size_t i = 1; i < ne.size(); ++i) rows *= ne[i];
    const auto data = contents(pagedkv::tensor_row_bytes(t, ne[0]) * static_cast<size_t>(rows));
    w.add_tensor(name, t, std::move(ne), data);
  }
  TensorType next_type() { return kMatrixTypes[r_.next() % std::size(kMatrixTypes)]; }
  void matrix(pagedkv::GgufWriter& w, const std::string& name, int64_t cols, int64_t rows) {
    add(w, name, next_type(), {cols, rows});
  }
  void stacked(pagedkv::GgufWriter& w, const std::string& name, int64_t cols, int64_t rows, int64_t n) {
    add(w, name, next_type(), {cols, rows, n});
  }
  void f32_matrix(pagedkv::GgufWriter& w, const std::string& name, int64_t cols, int64_t rows) {
    add(w, name, TensorType::kF32, {cols, rows});
  }
  void vector(pagedkv::GgufWriter& w, const std::string& name, int64_t n) { add(w, name, TensorType::kF32, {n}); }

  pagedkv::fuzz::ByteReader& r_;
  std::string arch_;
  int layers_ = 1;
  unsigned flaws_ = 0;
  std::span<const uint8_t> payload_;  // the tensors' contents, cycled
  size_t offset_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool single_threaded = (pagedkv::set_kernel_threads(1), true);
  (void)single_threaded;
  pagedkv::fuzz::ByteReader r{data, size};
  std::unique_ptr<pagedkv::GgufModel> model;
  try {
    ModelDescription description(r);
    const std::vector<std::byte> bytes = description.bytes();
    model = std::make_unique<pagedkv::GgufModel>(std::make_unique<pagedkv::GgufFile>(bytes, "fuzz.gguf"));
    // The model keeps the file, which views `bytes`: run while they live.
    pagedkv::ModelRunner runner(*model);
    const auto& c = runner.config();
    check(c.vocab_size == kVocab);
    constexpr int kBlockSize = 16;
    pagedkv::KVArena arena(runner.kv_cache_spec(kBlockSize), c.kv_arena_layers(), 4);
    const std::vector<pagedkv::TokenId> prompt = {1, static_cast<pagedkv::TokenId>(data[0] % kVocab), 5, 7};
    const std::vector<int32_t> blocks = {1, 2};
    pagedkv::ForwardBatchBuilder batch(kBlockSize);
    batch.add_request(prompt, 0, blocks, true);
    pagedkv::Logits logits = runner.forward(batch.batch(), arena);
    check(logits.num_rows == 1 && logits.vocab_size == kVocab);
    const pagedkv::TokenId next = pagedkv::Sampler::argmax(logits.row(0));
    check(next >= 0 && next < kVocab);
    batch.clear();
    batch.add_request(std::vector<pagedkv::TokenId>{next}, static_cast<int>(prompt.size()), blocks, true);
    logits = runner.forward(batch.batch(), arena);
    check(logits.num_rows == 1 && logits.vocab_size == kVocab);
    const pagedkv::TokenId second = pagedkv::Sampler::argmax(logits.row(0));
    check(second >= 0 && second < kVocab);
    // Sampling settings pick a token of the vocabulary from any logits (NaN and infinities too).
    pagedkv::SamplingParams params;
    params.temperature = 0.8f;
    params.top_k = data[0] % 3 == 0 ? 5 : 0;
    params.top_p = data[0] % 2 == 0 ? 0.9f : 1.0f;
    params.min_p = data[0] % 5 == 0 ? 0.1f : 0.0f;
    pagedkv::Sampler sampler(kVocab, params);
    const pagedkv::TokenId sampled = sampler.sample(logits.row(0));
    check(sampled >= 0 && sampled < kVocab);
  } catch (const pagedkv::FormatError&) {
  }
  return 0;
}
