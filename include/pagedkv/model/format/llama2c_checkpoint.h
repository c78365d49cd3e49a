// llama2.c checkpoints ("version 0", fp32), memory-mapped.
//
// File layout (little-endian): a 28-byte header of seven int32
//     dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len
// then fp32 arrays back to back: token_embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3,
// rms_final, two legacy RoPE tables (seq_len * head_dim / 2 floats each, ignored), and — only when
// the header's vocab_size is negative — a separate classifier wcls [vocab][dim]. A positive
// vocab_size means the classifier is the token embedding.
//
// Opening validates everything before any weight is read: the header fields (each positive,
// dim % n_heads == 0, n_heads % n_kv_heads == 0, even head_dim) and the exact file size the
// header implies. A truncated, oversized or inconsistent file throws FormatError naming the
// problem, with the expected and actual byte counts.
#pragma once

#include <cstddef>
#include <string>

#include "pagedkv/model/model.h"

namespace pagedkv {

class Llama2cCheckpoint final : public Model {
 public:
  static constexpr size_t kHeaderBytes = 28;

  // Maps `path` read-only. Throws Error if the file cannot be opened or mapped, FormatError if
  // its contents are not a valid checkpoint.
  explicit Llama2cCheckpoint(const std::string& path);
  ~Llama2cCheckpoint() override;

  size_t file_bytes() const { return file_bytes_; }

  // The file size a header implies (header + body), or throws FormatError for a header whose
  // fields are invalid or whose size overflows 64 bits. Exposed for tools and tests.
  static size_t expected_file_bytes(const ModelConfig& config);

 private:
  void* mapping_ = nullptr;
  size_t file_bytes_ = 0;
};

// Writes `weights` of `config` as a llama2.c checkpoint (a separate classifier when
// !config.shared_classifier; zeros for the legacy RoPE tables). Tests and tools use it to make
// checkpoints from generated models. Throws Error on I/O failure.
void write_llama2c_checkpoint(const std::string& path, const ModelConfig& config, const ModelWeights& weights);

}  // namespace pagedkv
