#include "pagedkv/model/random_model.h"

#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace pagedkv {

namespace {

// splitmix64's finaliser: a bijective 64-bit mix, good enough to turn (seed, tensor, index)
// counters into independent-looking uniform bits.
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1), from the top 24 bits (exactly representable in a float).
float uniform_pm1(uint64_t seed, uint64_t tensor, uint64_t index) {
  const uint64_t bits = mix64(mix64(seed ^ (tensor * 0x9E3779B97F4A7C15ull)) + index);
  return static_cast<float>(bits >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

class RandomModel final : public Model {
 public:
  RandomModel(const ModelConfig& config, uint64_t seed) {
    config.validate();
    config_ = config;
    storage_.assign(llama2c_body_floats(config), 0.0f);
    weights_ = llama2c_weight_views(config, storage_.data());
    source_ = fmt::format("built-in random model (seed {})", seed);

    const size_t d = static_cast<size_t>(config.dim), h = static_cast<size_t>(config.hidden_dim),
                 l = static_cast<size_t>(config.n_layers), v = static_cast<size_t>(config.vocab_size),
                 kv = static_cast<size_t>(config.kv_dim());
    uint64_t tensor = 0;
    // Fills n floats at p with amplitude * U[-1, 1); each tensor gets its own counter stream.
    auto fill = [&](const float* p, size_t n, float amplitude) {
      float* out = storage_.data() + (p - storage_.data());
      const uint64_t t = ++tensor;
#pragma omp parallel for schedule(static) if (n > (1u << 16))
      for (size_t i = 0; i < n; ++i) out[i] = amplitude * uniform_pm1(seed, t, i);
    };
    auto fill_ones = [&](const float* p, size_t n) {
      float* out = storage_.data() + (p - storage_.data());
      for (size_t i = 0; i < n; ++i) out[i] = 1.0f;
      ++tensor;
    };
    // Unit output variance for unit-variance input: Var(U[-a, a]) = a^2 / 3.
    auto amp = [](size_t in) { return std::sqrt(3.0f / static_cast<float>(in)); };
    fill(weights_.token_embedding, v * d, 1.0f);
    fill_ones(weights_.rms_att, l * d);
    fill(weights_.wq, l * d * d, amp(d));
    fill(weights_.wk, l * kv * d, amp(d));
    fill(weights_.wv, l * kv * d, amp(d));
    fill(weights_.wo, l * d * d, amp(d));
    fill_ones(weights_.rms_ffn, l * d);
    fill(weights_.w1, l * h * d, amp(d));
    fill(weights_.w2, l * d * h, amp(h));
    fill(weights_.w3, l * h * d, amp(d));
    fill_ones(weights_.rms_final, d);
    if (!config.shared_classifier) fill(weights_.wcls, v * d, amp(d));
  }

 private:
  std::vector<float> storage_;  // llama2.c body layout, so the views are the checkpoint's
};

}  // namespace

ModelConfig builtin_random_model_config() {
  ModelConfig c;
  c.dim = 128;
  c.hidden_dim = 352;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.vocab_size = 512;
  c.seq_len = 2048;
  c.shared_classifier = true;
  return c;
}

ModelConfig builtin_random_hybrid_model_config() {
  ModelConfig c = builtin_random_model_config();
  c.sliding_window = 32;
  c.sliding_window_period = 2;
  return c;
}

std::unique_ptr<Model> make_random_model(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<RandomModel>(config, seed);
}

}  // namespace pagedkv
