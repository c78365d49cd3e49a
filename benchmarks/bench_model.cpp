// Model runner throughput: batched decode steps on stories260K and on the built-in random model,
// prefill, and the packed matmul — each against an in-run baseline written the way llama2.c's
// run.c computes (one token at a time, one scalar dot product per output).
//
//   build-model/benchmarks/bench_model --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Decode and prefill report tokens per second twice: items_per_second per second of the calling
// thread's CPU time (the compute cost; meaningful on a shared machine when threads = 1) and
// wall_tok/s per second of wall-clock time. With threads = 2 on a busy machine, set
// OMP_WAIT_POLICY=passive: spinning OpenMP barriers then cost a scheduler time slice each.
//
// stories260K is looked up in $PAGEDKV_SHARED_DIR/models, else in shared/models of the current
// directory or any parent of it; its benchmarks are skipped when it is absent.
#include <benchmark/benchmark.h>
#include <fmt/format.h>

#include <immintrin.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <vector>

#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"
#include "pagedkv/model/model_runner.h"
#include "pagedkv/model/format/gguf_writer.h"
#include "pagedkv/model/quant/linear_layer.h"
#include "pagedkv/model/quant/packed_matrix.h"
#include "pagedkv/model/quant/quantized_matrix.h"
#include "pagedkv/model/random_model.h"
#include "pagedkv/storage/float_convert.h"

namespace {

using namespace pagedkv;
namespace fs = std::filesystem;

const Model* stories260k() {
  static std::unique_ptr<Model> model = [] {
    std::vector<fs::path> candidates;
    if (const char* env = std::getenv("PAGEDKV_SHARED_DIR")) candidates.push_back(fs::path(env) / "models");
    for (fs::path dir = fs::current_path(); !dir.empty(); dir = dir.parent_path()) {
      candidates.push_back(dir / "shared" / "models");
      if (dir == dir.parent_path()) break;
    }
    for (const auto& c : candidates)
      if (fs::exists(c / "stories260K.bin"))
        return std::unique_ptr<Model>(new Llama2cCheckpoint((c / "stories260K.bin").string()));
    return std::unique_ptr<Model>();
  }();
  return model.get();
}

const Model* builtin() {
  static std::unique_ptr<Model> model = make_random_model(builtin_random_model_config(), 1);
  return model.get();
}

// B requests, each with `context` tokens already in the cache; every iteration decodes one more
// token per request at position `context` (rewriting the same slot, so the state is steady).
class DecodeBatch {
 public:
  DecodeBatch(const Model& model, int batch, int context, DType kv_dtype = DType::kF32, int block_size = 16)
      : runner_(model), batch_(batch), context_(context) {
    const int blocks_per_seq = (context + 1 + block_size - 1) / block_size;
    arena_ = std::make_unique<KVArena>(runner_.kv_cache_spec(block_size, kv_dtype), model.config().n_layers,
                                       1 + batch * blocks_per_seq);
    stride_ = blocks_per_seq;
    tables_.resize(static_cast<size_t>(batch * blocks_per_seq));
    std::iota(tables_.begin(), tables_.end(), 1);
    // Prefill every request's context in one flattened forward.
    std::vector<TokenId> tokens;
    std::vector<int32_t> positions, query_start{0}, context_lens;
    std::vector<int64_t> slots;
    for (int r = 0; r < batch; ++r) {
      for (int p = 0; p < context; ++p) {
        tokens.push_back(1 + (r * 31 + p * 7) % (model.config().vocab_size - 1));
        positions.push_back(p);
        slots.push_back(slot(r, p, block_size));
      }
      query_start.push_back(static_cast<int32_t>(tokens.size()));
      context_lens.push_back(context);
    }
    ForwardBatch prefill{
        tokens, positions, slots, {batch, query_start.data(), context_lens.data(), tables_.data(), stride_}, {}, {}};
    runner_.forward(prefill, *arena_);
    // The decode step.
    for (int r = 0; r < batch; ++r) {
      tokens_.push_back(2 + r % 50);
      positions_.push_back(context);
      slots_.push_back(slot(r, context, block_size));
      query_start_.push_back(r);
      context_lens_.push_back(context + 1);
      rows_.push_back(r);
    }
    query_start_.push_back(batch);
  }
  Logits step() {
    ForwardBatch b{tokens_, positions_,
                   slots_,  {batch_, query_start_.data(), context_lens_.data(), tables_.data(), stride_},
                   rows_,   {}};
    return runner_.forward(b, *arena_);
  }

 private:
  int64_t slot(int r, int p, int bs) const {
    return static_cast<int64_t>(tables_[static_cast<size_t>(r * stride_ + p / bs)]) * bs + p % bs;
  }
  ModelRunner runner_;
  std::unique_ptr<KVArena> arena_;
  int batch_, context_, stride_ = 0;
  std::vector<int32_t> tables_, positions_, query_start_, context_lens_, rows_;
  std::vector<TokenId> tokens_;
  std::vector<int64_t> slots_;
};

void decode(benchmark::State& state, const Model* model, DType kv_dtype = DType::kF32) {
  if (model == nullptr) {
    state.SkipWithError("stories260K.bin not found (set PAGEDKV_SHARED_DIR)");
    return;
  }
  const int batch = static_cast<int>(state.range(0)), context = static_cast<int>(state.range(1));
  set_kernel_threads(static_cast<int>(state.range(2)));
  DecodeBatch d(*model, batch, context, kv_dtype);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(d.step().data);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // items_per_second: generated tokens per second of this thread's CPU time (the compute cost,
  // robust on a shared machine); wall_tok/s: per second of wall-clock time.
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["wall_tok/s"] = static_cast<double>(state.iterations()) * batch / wall;
}

void BM_DecodeStories260K(benchmark::State& state) { decode(state, stories260k()); }
void BM_DecodeBuiltin(benchmark::State& state) { decode(state, builtin()); }

void decode_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"batch", "context", "threads"});
  for (int threads : {1, 2})
    for (int batch : {1, 8, 32, 64}) b->Args({batch, 128, threads});
  b->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_DecodeStories260K)->Apply(decode_args);
BENCHMARK(BM_DecodeBuiltin)->Apply(decode_args);

// One stories260K decode step with an int8 KV cache, quantize-on-write included (write_kv once
// per layer, the search of PAGEDKV_ISA's build): the step whose time the writes are
// measured against, beside bench_attention's BM_WriteKV/3/4/8 (the writes alone) in the same sitting.
void BM_DecodeStories260KInt8KV(benchmark::State& state) { decode(state, stories260k(), DType::kInt8); }
BENCHMARK(BM_DecodeStories260KInt8KV)
    ->ArgNames({"batch", "context", "threads"})
    ->Args({1, 128, 1})
    ->Args({1, 384, 1})
    ->Unit(benchmark::kMicrosecond);

// Prefill of one prompt of `tokens` tokens in a single forward (logits for the last row only).
void BM_PrefillStories260K(benchmark::State& state) {
  const Model* model = stories260k();
  if (model == nullptr) {
    state.SkipWithError("stories260K.bin not found (set PAGEDKV_SHARED_DIR)");
    return;
  }
  const int n = static_cast<int>(state.range(0));
  set_kernel_threads(static_cast<int>(state.range(1)));
  ModelRunner runner(*model);
  KVArena arena(runner.kv_cache_spec(16), model->config().n_layers, 1 + (n + 15) / 16);
  std::vector<int32_t> table((n + 15) / 16), positions(n), qs = {0, n}, ctx = {n}, rows = {n - 1};
  std::iota(table.begin(), table.end(), 1);
  std::vector<TokenId> tokens(n);
  std::vector<int64_t> slots(n);
  for (int p = 0; p < n; ++p) tokens[p] = 3 + p % 500, positions[p] = p, slots[p] = table[p / 16] * 16 + p % 16;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    ForwardBatch b{tokens, positions, slots, {1, qs.data(), ctx.data(), table.data(), static_cast<int>(table.size())},
                   rows,   {}};
    benchmark::DoNotOptimize(runner.forward(b, arena).data);
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state.SetItemsProcessed(state.iterations() * n);
  state.counters["wall_tok/s"] = static_cast<double>(state.iterations()) * n / wall;
}
BENCHMARK(BM_PrefillStories260K)
    ->ArgNames({"tokens", "threads"})
    ->Args({512, 1})
    ->Args({512, 2})
    ->Unit(benchmark::kMicrosecond);

// ---- the in-run baseline: run.c's single-stream forward, written as run.c writes it ----------

class RunCStyleForward {
 public:
  explicit RunCStyleForward(const Model& m) : m_(m), c_(m.config()) {
    cache_k_.assign(static_cast<size_t>(c_.n_layers) * c_.seq_len * c_.kv_dim(), 0.0f);
    cache_v_ = cache_k_;
    const int d = c_.dim, h = c_.hidden_dim;
    x_.resize(d), xb_.resize(d), xb2_.resize(d), q_.resize(d), hb_.resize(h), hb2_.resize(h);
    att_.resize(static_cast<size_t>(c_.seq_len)), logits_.resize(static_cast<size_t>(c_.vocab_size));
  }
  const float* forward(TokenId token, int pos) {
    const auto& w = m_.weights();
    const int d = c_.dim, kv = c_.kv_dim(), hd = c_.head_dim(), h = c_.hidden_dim;
    std::copy(w.token_embedding + token * d, w.token_embedding + (token + 1) * d, x_.begin());
    for (int l = 0; l < c_.n_layers; ++l) {
      rmsnorm(xb_.data(), x_.data(), w.rms_att + l * d);
      float* kc = cache_k_.data() + (static_cast<size_t>(l) * c_.seq_len + pos) * kv;
      float* vc = cache_v_.data() + (static_cast<size_t>(l) * c_.seq_len + pos) * kv;
      matmul(q_.data(), xb_.data(), w.wq + static_cast<size_t>(l) * d * d, d, d);
      matmul(kc, xb_.data(), w.wk + static_cast<size_t>(l) * kv * d, d, kv);
      matmul(vc, xb_.data(), w.wv + static_cast<size_t>(l) * kv * d, d, kv);
      for (int i = 0; i < d; i += 2) {
        const float freq = 1.0f / std::pow(10000.0f, static_cast<float>(i % hd) / static_cast<float>(hd));
        const float val = static_cast<float>(pos) * freq, fcr = std::cos(val), fci = std::sin(val);
        for (int which = 0; which < (i < kv ? 2 : 1); ++which) {
          float* vec = which == 0 ? q_.data() : kc;
          const float v0 = vec[i], v1 = vec[i + 1];
          vec[i] = v0 * fcr - v1 * fci;
          vec[i + 1] = v0 * fci + v1 * fcr;
        }
      }
      for (int head = 0; head < c_.n_heads; ++head) {
        const int kvh = head / c_.queries_per_kv_head();
        for (int t = 0; t <= pos; ++t) {
          const float* kt = cache_k_.data() + (static_cast<size_t>(l) * c_.seq_len + t) * kv + kvh * hd;
          float s = 0;
          for (int i = 0; i < hd; ++i) s += q_[head * hd + i] * kt[i];
          att_[t] = s / std::sqrt(static_cast<float>(hd));
        }
        float mx = att_[0];
        for (int t = 1; t <= pos; ++t) mx = std::max(mx, att_[t]);
        float sum = 0;
        for (int t = 0; t <= pos; ++t) sum += (att_[t] = std::exp(att_[t] - mx));
        for (int t = 0; t <= pos; ++t) att_[t] /= sum;
        float* o = xb_.data() + head * hd;
        std::fill(o, o + hd, 0.0f);
        for (int t = 0; t <= pos; ++t) {
          const float* vt = cache_v_.data() + (static_cast<size_t>(l) * c_.seq_len + t) * kv + kvh * hd;
          for (int i = 0; i < hd; ++i) o[i] += att_[t] * vt[i];
        }
      }
      matmul(xb2_.data(), xb_.data(), w.wo + static_cast<size_t>(l) * d * d, d, d);
      for (int i = 0; i < d; ++i) x_[i] += xb2_[i];
      rmsnorm(xb_.data(), x_.data(), w.rms_ffn + l * d);
      matmul(hb_.data(), xb_.data(), w.w1 + static_cast<size_t>(l) * h * d, d, h);
      matmul(hb2_.data(), xb_.data(), w.w3 + static_cast<size_t>(l) * h * d, d, h);
      for (int i = 0; i < h; ++i) hb_[i] = hb_[i] * (1.0f / (1.0f + std::exp(-hb_[i]))) * hb2_[i];
      matmul(xb_.data(), hb_.data(), w.w2 + static_cast<size_t>(l) * d * h, h, d);
      for (int i = 0; i < d; ++i) x_[i] += xb_[i];
    }
    rmsnorm(x_.data(), x_.data(), w.rms_final);
    matmul(logits_.data(), x_.data(), w.wcls, d, c_.vocab_size);
    return logits_.data();
  }

  static void matmul(float* out, const float* x, const float* w, int n, int d) {
    for (int i = 0; i < d; ++i) {
      float val = 0;
      for (int j = 0; j < n; ++j) val += w[static_cast<size_t>(i) * n + j] * x[j];
      out[i] = val;
    }
  }

 private:
  void rmsnorm(float* o, const float* x, const float* w) const {
    float ss = 0;
    for (int j = 0; j < c_.dim; ++j) ss += x[j] * x[j];
    ss = 1.0f / std::sqrt(ss / static_cast<float>(c_.dim) + 1e-5f);
    for (int j = 0; j < c_.dim; ++j) o[j] = w[j] * (ss * x[j]);
  }
  const Model& m_;
  ModelConfig c_;
  std::vector<float> cache_k_, cache_v_, x_, xb_, xb2_, q_, hb_, hb2_, att_, logits_;
};

// run.c-style decode of one stream at the same context as BM_Decode*: the baseline ratio.
void reference_decode(benchmark::State& state, const Model* model) {
  if (model == nullptr) {
    state.SkipWithError("stories260K.bin not found (set PAGEDKV_SHARED_DIR)");
    return;
  }
  const int context = static_cast<int>(state.range(0));
  RunCStyleForward f(*model);
  for (int p = 0; p < context; ++p) f.forward(1 + p % 100, p);
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) benchmark::DoNotOptimize(f.forward(5, context));
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  state.SetItemsProcessed(state.iterations());
  state.counters["wall_tok/s"] = static_cast<double>(state.iterations()) / wall;
}
void BM_RunCStyleDecodeStories260K(benchmark::State& state) { reference_decode(state, stories260k()); }
void BM_RunCStyleDecodeBuiltin(benchmark::State& state) { reference_decode(state, builtin()); }
BENCHMARK(BM_RunCStyleDecodeStories260K)->ArgNames({"context"})->Arg(128)->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_RunCStyleDecodeBuiltin)->ArgNames({"context"})->Arg(128)->Unit(benchmark::kMicrosecond);

// A quantized product's inputs: normally distributed, as a layer's inputs roughly are. Quantized per
// block (Q8_0, Q8_K), the largest value of a block sets the scale and most codes are small, which
// the K-quant tiles' int16 chains count on; a repeating ramp of seven values put every code near
// the scale and sent them down their rarely taken wide path.
void fill_layer_inputs(std::vector<float>& x) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : x) v = normal(rng);
}

// ---- the matmul alone: packed and batched vs one scalar dot product per output -------------

void BM_PackedMatmul(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), cols = static_cast<int>(state.range(1));
  const int tokens = static_cast<int>(state.range(2));
  const KernelIsa isa = state.range(3) == 0 ? KernelIsa::kScalar : KernelIsa::kAuto;
  state.SetLabel(isa_name(resolve_isa(isa)));
  set_kernel_threads(1);
  std::vector<float> w(static_cast<size_t>(rows) * cols), x(static_cast<size_t>(tokens) * cols),
      y(static_cast<size_t>(tokens) * rows);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) * 0.01f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.1f;
  const PackedMatrix packed(w.data(), rows, cols);
  for (auto _ : state) {
    packed.multiply(x.data(), static_cast<size_t>(cols), tokens, y.data(), static_cast<size_t>(rows), isa);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * tokens * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
void BM_RunCStyleMatmul(benchmark::State& state) {
  const int rows = static_cast<int>(state.range(0)), cols = static_cast<int>(state.range(1));
  const int tokens = static_cast<int>(state.range(2));
  std::vector<float> w(static_cast<size_t>(rows) * cols), x(static_cast<size_t>(tokens) * cols),
      y(static_cast<size_t>(tokens) * rows);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) * 0.01f;
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) * 0.1f;
  for (auto _ : state) {
    for (int t = 0; t < tokens; ++t)
      RunCStyleForward::matmul(y.data() + static_cast<size_t>(t) * rows, x.data() + static_cast<size_t>(t) * cols,
                               w.data(), cols, rows);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * rows * cols * tokens * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
// isa 0: the baseline (SSE2) build; 1: the best this CPU runs.
void matmul_args(benchmark::internal::Benchmark* b, bool with_isa) {
  b->ArgNames({"rows", "cols", "tokens", "isa"});
  for (int isa : with_isa ? std::vector<int>{0, 1} : std::vector<int>{0})
    for (int tokens : {1, 8, 32}) {
      b->Args({64, 64, tokens, isa});  // stories260K wq / wo
      b->Args({344, 64, tokens, isa});  // stories260K [w1; w3]
      b->Args({512, 64, tokens, isa});  // stories260K classifier
      b->Args({704, 128, tokens, isa});  // built-in [w1; w3]
    }
}
BENCHMARK(BM_PackedMatmul)->Apply([](auto* b) { matmul_args(b, true); });
BENCHMARK(BM_RunCStyleMatmul)->Apply([](auto* b) { matmul_args(b, false); });

// ---- weights kept in their stored type (QuantizedMatrix): one Llama-3.2-1B FFN matrix -----------

// type: 0 F16, 1 BF16, 2 Q8_0, 3 Q4_0, 4 Q4_K, 5 Q5_K, 6 Q6_K, 7 IQ4_XS, 8 Q3_K, 9 Q2_K, 10 IQ4_NL
// (4-10: random levels and scales, fp16 d / dmin of ordinary size: GgufWriter does not quantize to
// most of them); isa: 0 scalar twin, 1 AVX2, 2 AVX-512 (skipped where absent).
constexpr TensorType kMatmulTypes[] = {TensorType::kF16,  TensorType::kBF16, TensorType::kQ8_0,  TensorType::kQ4_0,
                                       TensorType::kQ4_K, TensorType::kQ5_K, TensorType::kQ6_K,  TensorType::kIQ4_XS,
                                       TensorType::kQ3_K, TensorType::kQ2_K, TensorType::kIQ4_NL};

// rows x cols weights of a block format `type` as random bytes (every bit pattern is a valid
// block) with sane fp16 scales (0.004); Q8_0 / Q4_0 too.
std::vector<std::byte> random_blocks_of(TensorType type, int rows, int cols) {
  const size_t block_bytes = static_cast<size_t>(tensor_type_traits(static_cast<uint32_t>(type))->block_bytes);
  std::vector<std::byte> file(static_cast<size_t>(rows) * tensor_row_bytes(type, cols));
  for (size_t i = 0; i < file.size(); ++i) file[i] = static_cast<std::byte>((i * 2654435761u) >> 13);
  const uint16_t d = f32_to_f16(0.004f);
  for (size_t k = 0; k < file.size() / block_bytes; ++k)
    for (size_t f : type == TensorType::kQ6_K                                    ? std::vector<size_t>{208}
                    : type == TensorType::kQ3_K                                  ? std::vector<size_t>{108}
                    : type == TensorType::kQ2_K                                  ? std::vector<size_t>{80, 82}
                    : type == TensorType::kIQ4_XS || type == TensorType::kIQ4_NL ? std::vector<size_t>{0}
                                                                                 : std::vector<size_t>{0, 2})
      std::memcpy(file.data() + k * block_bytes + f, &d, 2);
  return file;
}

// `rows` x 2048 weights of `type` (random blocks with sane scales where `random_blocks`, else the
// values quantized by GgufWriter) times `tokens` tokens on one thread.
void run_quantized_matmul(benchmark::State& state, TensorType type, KernelIsa isa, int tokens, int rows,
                          bool random_blocks) {
  const int cols = 2048;
  if (isa != KernelIsa::kScalar &&
      !(best_available_isa() == isa || (isa == KernelIsa::kAvx2 && has_avx2(best_available_isa())))) {
    state.SkipWithError("ISA not available");
    return;
  }
  state.SetLabel(fmt::format("{} {}", tensor_type_name(type), isa_name(isa)));
  set_kernel_threads(1);
  std::vector<float> values;
  std::vector<std::byte> file;
  const std::byte* data = nullptr;
  if (random_blocks) {
    file = random_blocks_of(type, rows, cols);
    data = file.data();
  } else {
    values.resize(static_cast<size_t>(rows) * cols);
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 2654435761u) % 1000) * 0.001f - 0.5f;
  }
  GgufWriter writer;
  if (data == nullptr) writer.add_tensor_f32("w", type, {cols, rows}, values);
  const std::vector<std::byte> gguf_bytes = data == nullptr ? writer.bytes() : std::vector<std::byte>{};
  const std::optional<GgufFile> gguf =
      data == nullptr ? std::optional<GgufFile>(std::in_place, gguf_bytes, "w") : std::nullopt;
  const QuantizedMatrix m(WeightTensor{type, data != nullptr ? data : gguf->tensors()[0].data, rows, cols});
  std::vector<float> x(static_cast<size_t>(tokens) * cols), y(static_cast<size_t>(tokens) * rows);
  fill_layer_inputs(x);
  for (auto _ : state) {
    m.multiply(x.data(), static_cast<size_t>(cols), tokens, y.data(), static_cast<size_t>(rows), isa);
    benchmark::DoNotOptimize(y.data());
  }
  const auto iterations = static_cast<double>(state.iterations());
  state.counters["GMAC/s"] = benchmark::Counter(static_cast<double>(rows) * cols * tokens * iterations,
                                                benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["weight GB/s"] = benchmark::Counter(static_cast<double>(m.bytes()) * iterations,
                                                     benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// One Llama-3.2-1B FFN matrix, 8192 x 2048 (ffn_gate / ffn_up: 16-32 MB, about the L3 cache).
void BM_QuantizedMatmul(benchmark::State& state) {
  const KernelIsa isas[] = {KernelIsa::kScalar, KernelIsa::kAvx2, KernelIsa::kAvx512};
  run_quantized_matmul(state, kMatmulTypes[state.range(0)], isas[state.range(1)], static_cast<int>(state.range(2)),
                       8192, state.range(0) >= 4);
}
// 512 tokens: a prompt's prefill, whose activations (4 MiB here) no longer fit in L2.
BENCHMARK(BM_QuantizedMatmul)
    ->ArgNames({"type", "isa", "tokens"})
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {0, 1, 2}, {1, 32, 512}});

// The types of the decode benchmarks below (kMatmulTypes' indices): F16, BF16, Q8_0, Q4_0, Q4_K, Q6_K, IQ4_XS.
const std::vector<int64_t> kDecodeTypeArgs = {0, 1, 2, 3, 4, 6, 7};

// One decode token against 65536 x 2048 weights (70-140 MB: well past any L3), on the CPU's best
// build: the one-token tiles as a decode step meets them, streaming from memory (random blocks
// for every type; Q8_0 / Q4_0 too).
void BM_QuantizedMatvecFromMemory(benchmark::State& state) {
  const TensorType type = kMatmulTypes[state.range(0)];
  run_quantized_matmul(state, type, best_available_isa(), 1, 65536, true);
}
BENCHMARK(BM_QuantizedMatvecFromMemory)
    ->ArgNames({"type"})
    ->ArgsProduct({kDecodeTypeArgs})
    ->Unit(benchmark::kMillisecond);

// One decode token through a Llama-3.2-1B step's matrices, one after another as the model calls
// them (16 layers of q, k, v, o, gate, up, down, then the 128256-row classifier; 0.7-1.3 GB, each
// matrix its own allocation), on every kernel thread, wall time: what QuantizedMatvecFromMemory's
// one matrix does not show, the per-call costs a step pays ~113 times (waking the threads, a
// late thread at the closing barrier, k and v's small matrices). The activations are not
// chained from call to call; the attention and norms between the calls are left out.
void BM_DecodeLayerSequence(benchmark::State& state) {
  const TensorType type = kMatmulTypes[state.range(0)];
  state.SetLabel(fmt::format("{} {} threads", tensor_type_name(type), kernel_threads()));
  struct Shape {
    int rows, cols;
  };
  constexpr Shape kLayer[] = {{2048, 2048}, {512, 2048},  {512, 2048}, {2048, 2048},
                              {8192, 2048}, {8192, 2048}, {2048, 8192}};
  std::vector<std::unique_ptr<QuantizedMatrix>> step;
  std::vector<std::vector<std::byte>> files;  // the weights the QuantizedMatrix views (Q8_0 / Q4_0 read them in place)
  size_t bytes = 0;
  const auto add = [&](int rows, int cols) {
    files.push_back(random_blocks_of(type, rows, cols));
    step.push_back(std::make_unique<QuantizedMatrix>(WeightTensor{type, files.back().data(), rows, cols}));
    bytes += step.back()->bytes();
  };
  for (int layer = 0; layer < 16; ++layer)
    for (const Shape& m : kLayer) add(m.rows, m.cols);
  add(128256, 2048);
  std::vector<float> x(8192), y(128256);
  fill_layer_inputs(x);
  for (auto _ : state) {
    for (const auto& m : step) m->multiply(x.data(), static_cast<size_t>(m->cols()), 1, y.data(), 0);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_DecodeLayerSequence)
    ->ArgNames({"type"})
    ->ArgsProduct({kDecodeTypeArgs})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One decode token through the experts a mixture of experts uses in a step (qwen3moe-8l-32e's
// shape: 8 of 32 experts, gate and up 1536 x 2048, down 2048 x 768; 8 layers, each expert its own
// allocation, 40 MB a layer in Q8_0), on every kernel thread, wall time: each expert's products as
// their own calls (together:0), or each layer's gate / up and then its downs in one parallel region
// (together:1, LinearLayer::multiply_all, as ModelRunner::moe_ffn runs them). The SiLU between
// them is left out. Compare the variants each in its own process (a filter of one): on a Zen 3 VM
// whichever ran second in a process ran up to 2x faster than in a process of its own.
void BM_ExpertProducts(benchmark::State& state) {
  const TensorType type = kMatmulTypes[state.range(0)];
  const bool together = state.range(1) != 0;
  state.SetLabel(fmt::format("{} {} threads", tensor_type_name(type), kernel_threads()));
  constexpr int kLayers = 8, kExperts = 8, kDim = 2048, kHidden = 768;
  std::vector<std::vector<std::byte>> files;
  std::vector<LinearLayer> gate_up, down;
  size_t bytes = 0;
  for (int i = 0; i < kLayers * kExperts; ++i) {
    files.push_back(random_blocks_of(type, 2 * kHidden, kDim));
    gate_up.emplace_back(std::initializer_list<WeightTensor>{{type, files.back().data(), 2 * kHidden, kDim}});
    files.push_back(random_blocks_of(type, kDim, kHidden));
    down.emplace_back(std::initializer_list<WeightTensor>{{type, files.back().data(), kDim, kHidden}});
    bytes += gate_up.back().bytes() + down.back().bytes();
  }
  std::vector<float> x(kDim), hidden(static_cast<size_t>(kExperts) * 2 * kHidden),
      y(static_cast<size_t>(kExperts) * kDim);
  fill_layer_inputs(x);
  std::vector<LinearLayer::Call> calls;
  for (auto _ : state) {
    for (int l = 0; l < kLayers; ++l) {
      const auto run = [&](const std::vector<LinearLayer>& layers, const float* in, size_t in_stride, float* out,
                           size_t out_stride) {
        calls.clear();
        for (int e = 0; e < kExperts; ++e) {
          const LinearLayer& m = layers[static_cast<size_t>(l * kExperts + e)];
          const float* xe = in + static_cast<size_t>(e) * in_stride;
          float* ye = out + static_cast<size_t>(e) * out_stride;
          if (together) calls.push_back({&m, xe, static_cast<size_t>(m.cols()), 1, ye, static_cast<size_t>(m.rows())});
          else m.multiply(xe, static_cast<size_t>(m.cols()), 1, ye, static_cast<size_t>(m.rows()));
        }
        if (together) LinearLayer::multiply_all(calls);
      };
      run(gate_up, x.data(), 0, hidden.data(), 2 * kHidden);
      run(down, hidden.data(), 2 * kHidden, y.data(), kDim);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["weight GB/s"] =
      benchmark::Counter(static_cast<double>(bytes) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_ExpertProducts)
    ->ArgNames({"type", "together"})
    ->ArgsProduct({{2, 4}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// One core's peak of the multiply-add instructions the matmuls could use, so that
// QuantizedMatmul's GMAC/s read as a fraction of it: 16 independent accumulator chains (more than
// latency x throughput), operands in registers, CPU time. MACs per instruction: vfmadd231ps 16
// (f32), vdpbf16ps 32 (bf16 pairs), vpdpbusd 64 (u8 x s8 quads).
constexpr int kPeakChains = 16;
constexpr int64_t kPeakSteps = 1 << 20;  // per iteration: 16 Mi instructions

__attribute__((target("avx512f"))) void peak_fma(benchmark::State& state) {
  __m512 acc[kPeakChains];
  __m512 a = _mm512_set1_ps(1.0001f);
  const __m512 b = _mm512_set1_ps(0.9999f);
  for (auto _ : state) {
    for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
    for (int64_t s = 0; s < kPeakSteps; ++s) {
#pragma GCC unroll 16
      for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_fmadd_ps(a, b, acc[i]);
      __asm__ volatile("" : "+v"(a));  // keeps the loop from being folded
    }
    for (int i = 0; i < kPeakChains; ++i) benchmark::DoNotOptimize(acc[i]);
  }
}

__attribute__((target("avx512f,avx512bf16"))) void peak_bf16_dot(benchmark::State& state) {
  __m512 acc[kPeakChains];
  __m512bh a = reinterpret_cast<__m512bh>(_mm512_set1_epi32(0x3F803F80));  // bf16 1.0, 1.0
  const __m512bh b = a;
  for (auto _ : state) {
    for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_set1_ps(static_cast<float>(i));
    for (int64_t s = 0; s < kPeakSteps; ++s) {
#pragma GCC unroll 16
      for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_dpbf16_ps(acc[i], a, b);
      __asm__ volatile("" : "+v"(a));
    }
    for (int i = 0; i < kPeakChains; ++i) benchmark::DoNotOptimize(acc[i]);
  }
}

__attribute__((target("avx512f,avx512vnni"))) void peak_vnni(benchmark::State& state) {
  __m512i acc[kPeakChains];
  __m512i a = _mm512_set1_epi8(1);
  const __m512i b = _mm512_set1_epi8(1);
  for (auto _ : state) {
    for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_set1_epi32(i);
    for (int64_t s = 0; s < kPeakSteps; ++s) {
#pragma GCC unroll 16
      for (int i = 0; i < kPeakChains; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
      __asm__ volatile("" : "+v"(a));
    }
    for (int i = 0; i < kPeakChains; ++i) benchmark::DoNotOptimize(acc[i]);
  }
}

// Without AVX-512 (AMD Zen 2 / 3, Intel client cores): vfmadd231ps ymm, 8 MACs, and the AVX2
// K-quant kernels' byte product, vpmaddubsw ymm (u8 x s8, adjacent pairs summed to int16: 32 MACs)
// with the vpaddw that sums its pairs, as their inner loops issue them. 12 FMA chains: with the two
// operands they fill 14 of the 16 ymm registers (16 chains would spill).
constexpr int kPeakChainsYmm = 12;

__attribute__((target("avx2,fma"))) void peak_fma_avx2(benchmark::State& state) {
  __m256 acc[kPeakChainsYmm];
  __m256 a = _mm256_set1_ps(1.0001f);
  const __m256 b = _mm256_set1_ps(0.9999f);
  for (auto _ : state) {
    for (int i = 0; i < kPeakChainsYmm; ++i) acc[i] = _mm256_set1_ps(static_cast<float>(i));
    for (int64_t s = 0; s < kPeakSteps; ++s) {
#pragma GCC unroll 16
      for (int i = 0; i < kPeakChainsYmm; ++i) acc[i] = _mm256_fmadd_ps(a, b, acc[i]);
      __asm__ volatile("" : "+x"(a));
    }
    for (int i = 0; i < kPeakChainsYmm; ++i) benchmark::DoNotOptimize(acc[i]);
  }
}

// The integer products in inline assembly: in C++ the compiler either computes a product shared by
// all chains once or, kept from that, spills accumulators to the stack. 8 accumulators (ymm0-7),
// each step's 8 products from independent operand pairs (ymm10-15), temporaries ymm8-9; STEP(a, b,
// temporary, accumulator) is one chain's product and sum.
// clang-format off
#define PAGEDKV_PEAK_LOOP(STEP)                                                                    \
  __asm__ volatile(                                                                                \
      "vpcmpeqb %%ymm15, %%ymm15, %%ymm15\n\t"                                                     \
      "vpabsb %%ymm15, %%ymm14\n\t"                                                                \
      "vpaddb %%ymm14, %%ymm14, %%ymm13\n\t"                                                       \
      "vpaddb %%ymm13, %%ymm14, %%ymm12\n\t"                                                       \
      "vpaddb %%ymm13, %%ymm13, %%ymm11\n\t"                                                       \
      "vpaddb %%ymm11, %%ymm14, %%ymm10\n\t"                                                       \
      "1:\n\t"                                                                                     \
      STEP(14, 15, 8, 0) STEP(13, 15, 9, 1) STEP(12, 15, 8, 2) STEP(11, 15, 9, 3)                  \
      STEP(10, 14, 8, 4) STEP(13, 14, 9, 5) STEP(12, 14, 8, 6) STEP(11, 14, 9, 7)                  \
      "dec %0\n\t"                                                                                 \
      "jnz 1b\n\t"                                                                                 \
      : "+r"(steps)                                                                                \
      :                                                                                            \
      : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10",   \
        "xmm11", "xmm12", "xmm13", "xmm14", "xmm15")
// clang-format on
constexpr int kPeakChainsInt = 8;

// vpmaddubsw and the vpaddw that sums its pairs, as the K-quant and Q4_0 tiles issue them.
#define PAGEDKV_MADDUBS_ADDW(a, b, t, acc) \
  "vpmaddubsw %%ymm" #b ", %%ymm" #a ", %%ymm" #t "\n\tvpaddw %%ymm" #t ", %%ymm" #acc ", %%ymm" #acc "\n\t"
__attribute__((target("avx2"))) void peak_maddubs_avx2(benchmark::State& state) {
  for (auto _ : state) {
    int64_t steps = kPeakSteps;
    PAGEDKV_PEAK_LOOP(PAGEDKV_MADDUBS_ADDW);
  }
}

// The Q8_0 tiles' product without VNNI: vpmaddubsw's int16 pairs widened and summed by vpmaddwd,
// then vpaddd (32 MACs per vpmaddubsw + vpmaddwd, both on the same two pipes of a Zen 3 core).
#define PAGEDKV_MADDUBS_MADDWD_ADDD(a, b, t, acc)                                                                     \
  "vpmaddubsw %%ymm" #b ", %%ymm" #a ", %%ymm" #t "\n\tvpmaddwd %%ymm" #t ", %%ymm15, %%ymm" #t "\n\tvpaddd %%ymm" #t \
  ", %%ymm" #acc ", %%ymm" #acc "\n\t"
__attribute__((target("avx2"))) void peak_maddubs_maddwd_avx2(benchmark::State& state) {
  for (auto _ : state) {
    int64_t steps = kPeakSteps;
    PAGEDKV_PEAK_LOOP(PAGEDKV_MADDUBS_MADDWD_ADDD);
  }
}
#undef PAGEDKV_MADDUBS_MADDWD_ADDD
#undef PAGEDKV_MADDUBS_ADDW
#undef PAGEDKV_PEAK_LOOP

void BM_PeakMultiplyAdd(benchmark::State& state) {
  struct Kind {
    const char* name;
    bool available;
    int macs;
    int chains;
    void (*run)(benchmark::State&);
  };
  __builtin_cpu_init();
  const bool avx512 = best_available_isa() == KernelIsa::kAvx512;
  const Kind kinds[] = {
      {"vfmadd231ps zmm (f32)", avx512, 16, kPeakChains, peak_fma},
      {"vdpbf16ps zmm (bf16 pairs)", avx512 && __builtin_cpu_supports("avx512bf16"), 32, kPeakChains, peak_bf16_dot},
      {"vpdpbusd zmm (u8 x s8)", avx512 && __builtin_cpu_supports("avx512vnni"), 64, kPeakChains, peak_vnni},
      {"vfmadd231ps ymm (f32)", __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"), 8, kPeakChainsYmm,
       peak_fma_avx2},
      {"vpmaddubsw ymm + vpaddw (u8 x s8 pairs)", __builtin_cpu_supports("avx2") != 0, 32, kPeakChainsInt,
       peak_maddubs_avx2},
      {"vpmaddubsw + vpmaddwd ymm (u8 x s8, Q8_0's product)", __builtin_cpu_supports("avx2") != 0, 32, kPeakChainsInt,
       peak_maddubs_maddwd_avx2}};
  const Kind& k = kinds[state.range(0)];
  if (!k.available) {
    state.SkipWithError("instruction not available");
    return;
  }
  state.SetLabel(k.name);
  k.run(state);
  const double instructions = static_cast<double>(state.iterations()) * kPeakSteps * k.chains;
  state.counters["GMAC/s"] =
      benchmark::Counter(instructions * k.macs, benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
  state.counters["instr/ns"] = benchmark::Counter(instructions / 1e9, benchmark::Counter::kIsRate);
}
BENCHMARK(BM_PeakMultiplyAdd)->ArgNames({"kind"})->DenseRange(0, 5)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
