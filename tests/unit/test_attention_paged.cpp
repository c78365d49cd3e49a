// Paged attention against a float64 contiguous reference, on fresh random inputs each run.
//
// Every case builds a two-layer arena poisoned with NaN, scatters each request's blocks over a
// shuffled set of physical block ids, writes the context through write_kv (so f16/bf16 round,
// int8/fp8 quantize), and runs the kernel on layer 1. A read of any slot outside the mapped
// tokens (the tail of a last block, another request's block, layer 0, the null block) would bring
// a NaN into the output (int8/fp8 arenas are poisoned through their scales). Errors are
// ||out - ref|| / ||ref|| over the whole output:
//   - against the reference on the original f32 inputs: < 1e-5 for f32 KV, < 1e-2 for f16/bf16,
//     and for int8/fp8 a bound from the quantization step (exact_tolerance below);
//   - against the reference on the stored (rounded, or dequantized) values: < 1e-5 for every
//     type but int8, which shows the 16- and 8-bit paths, scales folded into scores and
//     probabilities, lose nothing beyond the storage rounding; int8's integer path also rounds
//     the query to int16 and each tile's softmax weights to 8-bit codes (stored_tolerance below).
// The scalar path and every SIMD path this CPU has (AVX2, AVX-512) run each case, and each SIMD
// output is also compared with the scalar one (int8: the same tiles, the same exp, so the same
// 8-bit weights and integer sums, < 1e-5 too).
// Requests may share leading blocks with an earlier request (a cached prefix: the same physical
// blocks, the same K/V); then each path also runs with cascade attention off, and the two agree
// (< 1e-5; int8, whose tiles round their softmax weights, within its stored tolerance).
// ctest runs the file a second time with PAGEDKV_VNNI=0, for int8's path without VNNI (the int8
// cases only: skipped_in_this_run), and the cascade cases (AttentionPaged.Cascade*) as an entry
// of their own, side by side with the rest.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "pagedkv/core/error.h"
#include "pagedkv/kernels/paged_attention.h"
#include "pagedkv/kernels/thread_pool.h"
#include "pagedkv/storage/block_table.h"
#include "pagedkv/storage/cpu_isa.h"
#include "pagedkv/storage/kv_arena.h"
#include "pagedkv/storage/kv_ops.h"

namespace pagedkv {
namespace {

struct RequestSpec {
  int q_len = 1;
  int context = 1;
  int share_from = -1;  // an earlier request whose first shared_blocks blocks this one shares
  int shared_blocks = 0;  // (its K/V for those tokens are that request's)
};

struct Case {
  DType dtype = DType::kF32;
  int block_size = 16;
  int q_heads = 8, kv_heads = 2, head_dim = 64;
  int window = 0;
  float softcap = 0;
  float input_scale = 1;  // standard deviation of q, k and v entries
  float key_shift = 0;  // added to every key element, and 4x more to each row's first element
  std::vector<RequestSpec> requests;
  bool null_blocks_before_window = false;  // point unread blocks at the (NaN) null block 0
  bool adjacent_blocks = false;  // physical ids in order: each request one contiguous run

  std::string describe() const {
    std::string s =
        fmt::format("{} bs={} heads={}/{} dim={}", dtype_name(dtype), block_size, q_heads, kv_heads, head_dim);
    if (window > 0) s += fmt::format(" window={}", window);
    if (adjacent_blocks) s += " adjacent";
    if (softcap > 0) s += fmt::format(" softcap={}", softcap);
    if (key_shift != 0) s += fmt::format(" key_shift={}", key_shift);
    s += " requests=";
    for (const auto& r : requests) {
      s += fmt::format("({},{}", r.q_len, r.context);
      if (r.share_from >= 0) s += fmt::format(" shares {} blocks of {}", r.shared_blocks, r.share_from);
      s += ")";
    }
    return s;
  }
};

uint64_t fresh_seed() {
  static std::random_device device;
  return (static_cast<uint64_t>(device()) << 32) | device();
}

// Normal samples drawn from a fixed table of 65,536 standard normal values: one generator call
// each. std::normal_distribution's logarithms took about a third of this file's time, which the
// sanitizer builds multiply; the inputs keep the normal's shape (tails to about 4.3 sigma).
class NormalSamples {
 public:
  NormalSamples(float sigma, uint64_t seed) : sigma_(sigma), rng_(seed) {}
  float operator()() { return sigma_ * table()[rng_() >> 48]; }
  std::mt19937_64& engine() { return rng_; }

 private:
  static const std::vector<float>& table() {
    static const std::vector<float> values = [] {
      std::mt19937_64 rng(0x5eed);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> v(size_t{1} << 16);
      for (auto& x : v) x = normal(rng);
      return v;
    }();
    return values;
  }
  float sigma_;
  std::mt19937_64 rng_;
};

// A batch built in a poisoned arena, with the f32 inputs kept for the references.
class Fixture {
 public:
  Fixture(const Case& c, uint64_t seed) : c_(c), arena_(spec_of(c), 2, blocks_needed(c) + 3), kv_(arena_.layer(1)) {
    NormalSamples normal(c.input_scale, seed);
    arena_.fill_nan();
    // Physical blocks 1..N-1 in random order; block 0 stays the poisoned null block.
    std::vector<int32_t> free_ids(static_cast<size_t>(arena_.num_blocks() - 1));
    std::iota(free_ids.begin(), free_ids.end(), 1);
    if (!c.adjacent_blocks) std::shuffle(free_ids.begin(), free_ids.end(), normal.engine());
    size_t next_free = 0;

    const int n = static_cast<int>(c.requests.size());
    stride_ = 1;
    for (const auto& r : c.requests) stride_ = std::max(stride_, (r.context + c.block_size - 1) / c.block_size + 1);
    BlockTable table(std::max(1, n), stride_);
    query_start_.push_back(0);
    const size_t token_elems = static_cast<size_t>(c.kv_heads) * static_cast<size_t>(c.head_dim);
    for (int i = 0; i < n; ++i) {
      const RequestSpec& r = c.requests[static_cast<size_t>(i)];
      const int blocks = (r.context + c.block_size - 1) / c.block_size;
      const int shared = r.share_from >= 0 ? r.shared_blocks : 0;
      std::vector<BlockId> ids;
      for (int b = 0; b < blocks; ++b)
        ids.emplace_back(b < shared ? row_ids_[static_cast<size_t>(r.share_from)][static_cast<size_t>(b)]
                                    : BlockId(free_ids[next_free++]));
      row_ids_.push_back(ids);
      // Grow the row in two steps, as a running request does.
      table.append_row(i, std::span(ids).first(static_cast<size_t>(blocks / 2)));
      table.append_row(i, std::span(ids).subspan(static_cast<size_t>(blocks / 2)));

      std::vector<float> k(static_cast<size_t>(r.context) * token_elems), v(k.size());
      for (auto& x : k) x = normal();
      for (auto& x : v) x = normal();
      for (size_t e = 0; e < k.size() && c.key_shift != 0; ++e)
        k[e] += c.key_shift * (e % static_cast<size_t>(c.head_dim) == 0 ? 5.0f : 1.0f);
      if (shared > 0) {  // the shared tokens' K/V are the source request's
        const size_t shared_elems = static_cast<size_t>(shared * c.block_size) * token_elems;
        const auto& src_k = keys_[static_cast<size_t>(r.share_from)];
        const auto& src_v = values_[static_cast<size_t>(r.share_from)];
        std::copy(src_k.begin(), src_k.begin() + static_cast<std::ptrdiff_t>(shared_elems), k.begin());
        std::copy(src_v.begin(), src_v.begin() + static_cast<std::ptrdiff_t>(shared_elems), v.begin());
      }
      std::vector<int64_t> slots(static_cast<size_t>(r.context));
      compute_slot_mapping(table.row(i), c.block_size, 0, r.context, slots.data());
      write_kv(kv_, k.data(), v.data(), slots.data(), r.context);
      keys_.push_back(std::move(k));
      values_.push_back(std::move(v));
      // Stored values, as the kernel sees them (f16/bf16 rounded).
      std::vector<float> sk(keys_.back().size()), sv(sk.size());
      gather_kv(kv_, table.row(i), r.context, sk.data(), sv.data());
      stored_keys_.push_back(std::move(sk));
      stored_values_.push_back(std::move(sv));

      if (c.null_blocks_before_window && c.window > 0) {
        const int first_read = std::max(0, r.context - r.q_len + 1 - c.window);
        for (int b = 0; b < first_read / c.block_size; ++b) table.set_entry(i, b, BlockId(0));
      }
      query_start_.push_back(query_start_.back() + r.q_len);
      context_lens_.push_back(r.context);
    }
    tables_.assign(table.data(), table.data() + static_cast<size_t>(std::max(1, n)) * static_cast<size_t>(stride_));
    query_.resize(static_cast<size_t>(query_start_.back()) * static_cast<size_t>(c.q_heads) *
                  static_cast<size_t>(c.head_dim));
    for (auto& x : query_) x = normal();
  }

  AttentionShape shape() const {
    AttentionShape s;
    s.num_q_heads = c_.q_heads;
    s.num_kv_heads = c_.kv_heads;
    s.head_dim = c_.head_dim;
    s.scale = 1.0f / std::sqrt(static_cast<float>(c_.head_dim));
    s.sliding_window = c_.window;
    s.logit_softcap = c_.softcap;
    return s;
  }

  bool shares_blocks() const {
    return std::any_of(c_.requests.begin(), c_.requests.end(),
                       [](const RequestSpec& r) { return r.shared_blocks > 0; });
  }

  PagedAttentionBatch batch(bool cascade = true) const {
    PagedAttentionBatch b;
    b.cascade = cascade;
    b.cascade_min_tokens = 0;  // groups from two shared blocks on, so that short cases form them
    b.num_requests = static_cast<int>(c_.requests.size());
    b.query_start = query_start_.data();
    b.context_lens = context_lens_.data();
    b.block_tables = tables_.data();
    b.block_table_stride = stride_;
    return b;
  }

  std::vector<float> run(KernelIsa isa, bool cascade = true) const {
    std::vector<float> out(query_.size(), -12345.0f);
    paged_attention(shape(), batch(cascade), kv_, query_.data(), out.data(), isa);
    return out;
  }

  // Float64 attention over contiguous copies of the keys and values.
  std::vector<double> reference(bool stored) const {
    const AttentionShape s = shape();
    const size_t dim = static_cast<size_t>(c_.head_dim);
    const int group = c_.q_heads / c_.kv_heads;
    std::vector<double> out(query_.size(), 0.0);
    std::vector<double> scores;
    for (size_t i = 0; i < c_.requests.size(); ++i) {
      const auto& keys = stored ? stored_keys_[i] : keys_[i];
      const auto& values = stored ? stored_values_[i] : values_[i];
      const int q_len = c_.requests[i].q_len, context = c_.requests[i].context;
      for (int j = 0; j < q_len; ++j) {
        const int position = context - q_len + j;
        const int lo = c_.window > 0 ? std::max(0, position + 1 - c_.window) : 0;
        const size_t token = static_cast<size_t>(query_start_[i] + j);
        for (int h = 0; h < c_.q_heads; ++h) {
          const int kvh = h / group;
          const float* q = query_.data() + (token * static_cast<size_t>(c_.q_heads) + static_cast<size_t>(h)) * dim;
          scores.assign(static_cast<size_t>(position + 1 - lo), 0.0);
          double max_score = -INFINITY;
          for (int t = lo; t <= position; ++t) {
            const float* k =
                keys.data() +
                (static_cast<size_t>(t) * static_cast<size_t>(c_.kv_heads) + static_cast<size_t>(kvh)) * dim;
            double dot = 0;
            for (size_t d = 0; d < dim; ++d) dot += static_cast<double>(q[d]) * static_cast<double>(k[d]);
            dot *= static_cast<double>(s.scale);
            if (c_.softcap > 0) dot = c_.softcap * std::tanh(dot / c_.softcap);
            scores[static_cast<size_t>(t - lo)] = dot;
            max_score = std::max(max_score, dot);
          }
          double sum = 0;
          for (double& x : scores) sum += (x = std::exp(x - max_score));
          double* o = out.data() + (token * static_cast<size_t>(c_.q_heads) + static_cast<size_t>(h)) * dim;
          for (int t = lo; t <= position; ++t) {
            const float* v =
                values.data() +
                (static_cast<size_t>(t) * static_cast<size_t>(c_.kv_heads) + static_cast<size_t>(kvh)) * dim;
            const double p = scores[static_cast<size_t>(t - lo)] / sum;
            for (size_t d = 0; d < dim; ++d) o[d] += p * static_cast<double>(v[d]);
          }
        }
      }
    }
    return out;
  }

 private:
  static KVCacheSpec spec_of(const Case& c) {
    KVCacheSpec spec;
    spec.dtype = c.dtype;
    spec.block_size = c.block_size;
    spec.num_kv_heads = c.kv_heads;
    spec.head_dim = c.head_dim;
    return spec;
  }
  static int blocks_needed(const Case& c) {
    int n = 0;
    for (const auto& r : c.requests) n += (r.context + c.block_size - 1) / c.block_size;
    return n;
  }

  Case c_;
  KVArena arena_;
  KVLayerView kv_;
  int stride_ = 1;
  std::vector<int32_t> query_start_, context_lens_, tables_;
  std::vector<float> query_;
  std::vector<std::vector<float>> keys_, values_, stored_keys_, stored_values_;
  std::vector<std::vector<BlockId>> row_ids_;
};

double relative_error(const std::vector<float>& out, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double d = static_cast<double>(out[i]) - ref[i];
    num += d * d;
    den += ref[i] * ref[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> bd(b.begin(), b.end());
  return relative_error(a, bd);
}

std::vector<KernelIsa> isas() {
  std::vector<KernelIsa> v{KernelIsa::kScalar};
  if (has_avx2(best_available_isa())) v.push_back(KernelIsa::kAvx2);
  if (best_available_isa() == KernelIsa::kAvx512) v.push_back(KernelIsa::kAvx512);
  return v;
}

// Relative error of the output against attention on the unrounded inputs. For the quantized
// formats it follows from the quantization step. The RMS error of an element, relative to the
// inputs' standard deviation sigma: int8 rounds to a step of amax / 127 with amax up to ~4 sigma
// (the largest of up to 256 normal samples), RMS step / sqrt(12) = 0.009; fp8 keeps 3 mantissa
// bits, a step of up to 2^-3 of the value, RMS 2^-3 / sqrt(12) = 0.036 relative. The output, a
// convex combination of value rows, carries that error; a key's error moves each score by the
// same fraction of the score, whose spread grows as input_scale^2: hence (1 + input_scale^2 / 4).
// With the margin of 1.5, the bounds are 1.8-2.2x the largest errors the cases below showed.
double exact_tolerance(const Case& c) {
  const double spread = 1 + static_cast<double>(c.input_scale) * static_cast<double>(c.input_scale) / 4;
  switch (c.dtype) {
    case DType::kF32:
      return 1e-5;
    case DType::kInt8:
      return 1.5 * 0.009 * spread;
    case DType::kFP8:
      return 1.5 * 0.036 * spread;
    default:
      return 1e-2;
  }
}

// Relative error against attention on the stored values. int8 rounds each query row to int16
// codes (a step of 2^-15 of the row's largest element; measured 2.6e-5 to 5.1e-5 of error when
// the weights were int16 too) and each tile's softmax weights (times the value scales) to 8-bit
// codes, a step of 1/255 of the tile's largest weight: RMS 1/(255 sqrt 12) = 1.1e-3 of it. Where
// one token carries most of a tile's weight (scores spread over several units, input_scale >= 1)
// the output moves by about that fraction of its value row, so this error does not grow with the
// score spread; measured 8e-4 to 4.5e-3 at input_scale 1 and 1.7e-3 to 2.9e-3 at 2.5. With a
// margin of 1.5, 7e-3.
double stored_tolerance(const Case& c) { return c.dtype == DType::kInt8 ? 7e-3 : 1e-5; }

// The run with PAGEDKV_VNNI=0 (ctest's test_attention_paged_novnni) changes only int8's tiles,
// and only on a CPU that has VNNI to switch off: it checks those cases alone.
bool skipped_in_this_run(DType dtype) {
  static const bool vnni_off = [] {
    const char* v = std::getenv("PAGEDKV_VNNI");
    return v != nullptr && std::string(v) == "0";
  }();
  return vnni_off && (dtype != DType::kInt8 || !(cpu_has_avx512_vnni() || cpu_has_avx_vnni()));
}

// Runs one case on every available path and checks it against both references.
void check(const Case& c) {
  if (skipped_in_this_run(c.dtype)) return;  // the default run checks it
  const uint64_t seed = fresh_seed();
  SCOPED_TRACE(testing::Message() << c.describe() << " seed " << seed);
  const Fixture f(c, seed);
  const std::vector<double> exact = f.reference(false);
  const std::vector<double> stored = f.reference(true);
  const double tolerance = exact_tolerance(c);
  std::vector<std::vector<float>> outputs;
  for (KernelIsa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    std::vector<float> out = f.run(isa);
    ASSERT_TRUE(std::none_of(out.begin(), out.end(), [](float x) { return std::isnan(x); }))
        << "NaN in the output: the kernel read a slot outside the request's mapped tokens";
    EXPECT_LT(relative_error(out, exact), tolerance);
    EXPECT_LT(relative_error(out, stored), stored_tolerance(c));
    if (f.shares_blocks()) {
      const std::vector<float> plain = f.run(isa, false);
      EXPECT_LT(relative_difference(out, plain), c.dtype == DType::kInt8 ? stored_tolerance(c) : 1e-5)
          << "cascade on vs off";
    }
    outputs.push_back(std::move(out));
  }
  for (size_t i = 1; i < outputs.size(); ++i)
    EXPECT_LT(relative_difference(outputs[i], outputs[0]), 1e-5) << "scalar vs " << isa_name(isas()[i]);
}

constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8, DType::kFP8};

TEST(AttentionPaged, DecodeAcrossBlockSizes) {
  for (DType dtype : kTypes)
    for (int bs : {1, 16, 64, 256}) {
      Case c;
      c.dtype = dtype;
      c.block_size = bs;
      c.requests = {{1, 1}, {1, 17}, {1, 300}, {1, 777}};  // contexts ending mid-block
      check(c);
    }
}

TEST(AttentionPaged, DecodeOverScatteredAndAdjacentBlocks) {
  // Decode tasks whose K/V stream (over 1 MiB per task: the 2,500- and 4,099-token contexts on
  // one thread) read scattered blocks as interleaved streams (TileWalk), adjacent blocks in
  // order; short ranges stay in order either way. Thread counts change the partitions, so the
  // streams start at different places. Head size 256 makes f32 and f16 slots wide (4 and 2 KiB
  // of K per token): eight streams instead of four.
  for (int threads : {1, 2, 3}) {
    set_kernel_threads(threads);
    for (DType dtype : kTypes)
      for (bool adjacent : {false, true}) {
        Case c;
        c.dtype = dtype;
        c.adjacent_blocks = adjacent;
        c.q_heads = 16;
        c.kv_heads = 4;
        c.requests = {{1, 3}, {1, 5}, {1, 97}, {1, 2500}, {1, 4099}};
        check(c);
        c.q_heads = 4;
        c.head_dim = 256;
        c.requests = {{1, 2500}, {1, 1031}};
        check(c);
      }
  }
  set_kernel_threads(2);
}

TEST(AttentionPaged, MixedDecodeAndPrefillBatches) {
  for (DType dtype : kTypes)
    for (int bs : {1, 16, 64, 256}) {
      Case c;
      c.dtype = dtype;
      c.block_size = bs;
      // decode, a full prefill, chunked prefill on a cached prefix, an idle request, a long chunk
      c.requests = {{1, 50}, {37, 37}, {20, 300}, {0, 10}, {1, 1}, {70, 201}};
      check(c);
    }
}

TEST(AttentionPaged, HeadDims) {
  // 8, 40 and 48 (AVX2) and 48 and 80 (AVX-512) end in half a vector of int16 query codes; 8 and
  // 40 (AVX2, value groups of 16 dimensions) and 48, 80 and 96 (AVX-512, 64) in value tails.
  for (int dim : {8, 40, 48, 64, 80, 96, 128, 256})
    for (DType dtype : kTypes) {
      Case c;
      c.dtype = dtype;
      c.head_dim = dim;
      c.requests = {{1, 129}, {9, 100}, {1, 33}};
      check(c);
    }
  Case odd;  // not a multiple of 8: the AVX2 request falls back to the scalar path
  odd.head_dim = 12;
  odd.requests = {{1, 40}, {5, 40}};
  check(odd);
  odd.dtype = DType::kInt8;  // and odd rows: the scales of a slot start at a byte offset
  odd.head_dim = 13;
  check(odd);
}

// Keys far from zero: a shift of every element (unrotated heads: int8 rows lean to one side) and
// more of each row's first element (rotated heads: H spreads it into an offset of the row), so
// int8 keys' offsets carry much of each score and a kernel that dropped or misplaced the
// key offset x query sum term would miss both references.
TEST(AttentionPaged, KeysFarFromZero) {
  for (int dim : {8, 13, 16, 64, 96})
    for (DType dtype : kTypes) {
      Case c;
      c.dtype = dtype;
      c.head_dim = dim;
      c.key_shift = 0.5f;
      c.requests = {{1, 70}, {4, 50}};
      check(c);
    }
}

TEST(AttentionPaged, GqaRatios) {
  // 8, 12 and 16 KV heads: the int8 tiles' scales are read eight heads at a time, the rest one
  // at a time.
  const std::pair<int, int> heads[] = {{4, 4},  {8, 4},  {8, 2},  {8, 1},   {12, 2},
                                       {16, 2}, {32, 1}, {16, 8}, {24, 12}, {32, 16}};
  for (auto [q, kv] : heads)
    for (DType dtype : {DType::kF32, DType::kF16, DType::kInt8, DType::kFP8}) {
      Case c;
      c.dtype = dtype;
      c.q_heads = q;
      c.kv_heads = kv;
      c.head_dim = 32;
      c.requests = {{1, 90}, {6, 70}, {1, 5}};
      check(c);
    }
}

TEST(AttentionPaged, SlidingWindow) {
  for (int window : {1, 7, 64, 1000})
    for (DType dtype : kTypes) {
      Case c;
      c.dtype = dtype;
      c.window = window;
      c.null_blocks_before_window = true;
      c.requests = {{1, 300}, {40, 200}, {1, 5}, {3, 130}};
      check(c);
    }
}

TEST(AttentionPaged, LogitSoftcap) {
  for (DType dtype : kTypes)
    for (float cap : {5.0f, 30.0f}) {
      Case c;
      c.dtype = dtype;
      c.softcap = cap;
      c.input_scale = 2.5f;  // logits of several units up to tens: the cap matters
      c.requests = {{1, 200}, {17, 150}};
      check(c);
      c.window = 33;
      check(c);
    }
}

TEST(AttentionPaged, LongContextsSplitAcrossThreads) {
  // Few requests, long contexts: the driver splits them into partitions and merges the partial
  // softmax states. Different thread counts give different splits; all must match.
  for (int threads : {1, 2, 3}) {
    set_kernel_threads(threads);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kInt8}) {
      Case c;
      c.dtype = dtype;
      c.q_heads = 8;
      c.kv_heads = 1;
      c.requests = {{1, 6000}};
      check(c);
      c.requests = {{1, 5000}, {3, 4100}, {1, 100}};
      c.window = 3000;
      check(c);
    }
  }
  set_kernel_threads(2);
}

TEST(AttentionPaged, ShortDecodeBatchesSplitHeadsAndPartitions) {
  // A batch too small to feed every thread, yet above the size the driver keeps on the calling
  // thread (kMinParallelMultiplyAdds): the driver splits the KV
  // heads of decode tasks too, alone (2-3 threads) or together with context partitions (16).
  for (int threads : {2, 3, 16}) {
    set_kernel_threads(threads);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kInt8}) {
      Case c;
      c.dtype = dtype;
      c.q_heads = 32;
      c.kv_heads = 8;
      c.head_dim = 256;
      c.requests = {{1, 500}};  // 8.2 M multiply-adds, one 500-token range: heads split
      check(c);
      c.head_dim = 64;
      c.requests = {{1, 2100}};  // 8.6 M: partitions, and with 16 threads heads too
      check(c);
      c.requests = {{1, 1100}, {2, 600}};
      check(c);
      c.q_heads = 64;  // 16 KV heads: with 2 threads, tasks of 8 heads from head 0 and from head 8
      c.kv_heads = 16;
      c.requests = {{1, 600}};
      check(c);
    }
  }
  set_kernel_threads(2);
}

// Decode requests sharing cached prefixes: cascade groups (the shared blocks read once for the
// group) merged with each request's suffix. Prefixes of several lengths, a request sharing fewer
// blocks than a group member, two groups with different prefixes, a request whose whole context
// is shared (no suffix), one sharing a single block (below the minimum), a prefill request on a
// shared prefix (not grouped), and requests alone.
std::vector<RequestSpec> shared_prefix_requests(int block_size) {
  const int b = block_size;
  std::vector<RequestSpec> r;
  r.push_back({1, 10 * b + 5});  // 0: the first prefix's owner
  r.push_back({1, 9 * b + 3, 0, 8});  // 1: 8 blocks of 0
  r.push_back({1, 12 * b, 0, 10});  // 2: 10 blocks of 0, ends on a block boundary
  r.push_back({1, 7 * b + 1, 0, 4});  // 3: 4 blocks of 0
  r.push_back({1, 3 * b + 7});  // 4: alone
  r.push_back({1, 6 * b + 2});  // 5: the second prefix's owner
  r.push_back({1, 5 * b + 9, 5, 3});  // 6: 3 blocks of 5
  r.push_back({1, 4 * b, 5, 4});  // 7: its whole context is 5's first 4 blocks
  r.push_back({1, 2 * b + 1, 5, 1});  // 8: one block of 5
  r.push_back({5, 9 * b + 2, 0, 6});  // 9: prefill on 6 blocks of 0
  r.push_back({1, 10 * b + 5, 0, 10});  // 10: 0's whole blocks
  return r;
}

TEST(AttentionPaged, CascadeSharedPrefixes) {
  for (int threads : {1, 2, 3}) {
    set_kernel_threads(threads);
    for (DType dtype : kTypes)
      for (int bs : {1, 16, 64}) {
        Case c;
        c.dtype = dtype;
        c.block_size = bs;
        c.requests = shared_prefix_requests(bs);
        check(c);
      }
  }
  set_kernel_threads(2);
}

TEST(AttentionPaged, CascadeGqaRatiosAndLargeGroups) {
  // G = 1 to 16: groups of up to 64 rows (G x members), so 20 requests on one prefix make one
  // group at G <= 3 and several at larger G; softcap on the merged partial states.
  const std::pair<int, int> heads[] = {{4, 4}, {8, 2}, {8, 1}, {12, 2}, {32, 2}, {32, 8}};
  for (auto [q, kv] : heads)
    for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16, DType::kInt8, DType::kFP8}) {
      Case c;
      c.dtype = dtype;
      c.q_heads = q;
      c.kv_heads = kv;
      c.head_dim = 32;
      c.requests.push_back({1, 200});
      for (int i = 1; i < 20; ++i) c.requests.push_back({1, 160 + 7 * i, 0, 8 + i % 3});
      check(c);
      c.softcap = 20.0f;
      check(c);
    }
}

TEST(AttentionPaged, CascadeRowsInLanes) {
  // The prefix kernel with the stacked rows in vector lanes (16 to 64 rows per KV head, f32/f16/
  // bf16): G = 1, 2, 4, 8 and 2 to 17 members, so row counts that fill 1-4 vectors of 16 lanes
  // partly or wholly, below 16 rows (the row-group kernel) and above 64 (several groups); a
  // prefix of 5 blocks of 16 (80 tokens, not a whole number of 24-token tiles) and one of 22
  // blocks (352), and head dims whose value strips end in a shorter strip (32, 80). Against the
  // scalar twin, cascade off and the references at 1e-5 (check): swapped rows or keys fail it.
  const std::pair<int, int> heads[] = {{8, 8}, {8, 4}, {8, 2}, {16, 2}};
  for (int threads : {1, 2}) {
    set_kernel_threads(threads);
    for (auto [q, kv] : heads)
      for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16})
        for (int members : {2, 4, 5, 9, 17})
          for (int prefix_blocks : {5, 22}) {
            if (threads == 2 && prefix_blocks == 5) continue;  // with two threads, the long prefix only
            Case c;
            c.dtype = dtype;
            c.q_heads = q;
            c.kv_heads = kv;
            c.head_dim = members % 2 == 0 ? 32 : 80;
            c.requests.push_back({1, prefix_blocks * 16 + 3});
            for (int i = 1; i < members; ++i) c.requests.push_back({1, prefix_blocks * 16 + 5 * i, 0, prefix_blocks});
            check(c);
          }
  }
  set_kernel_threads(2);
}

TEST(AttentionPaged, CascadeLongPrefixSplitAcrossThreads) {
  // A long shared prefix: with several threads the group's prefix is cut into partitions, its
  // members' suffixes too, and all partial states of a request merge into its row.
  for (int threads : {1, 2, 3, 16}) {
    set_kernel_threads(threads);
    for (DType dtype : {DType::kF32, DType::kF16, DType::kInt8}) {
      Case c;
      c.dtype = dtype;
      c.q_heads = 16;
      c.kv_heads = 4;
      c.requests.push_back({1, 3000});
      for (int i = 1; i < 6; ++i) c.requests.push_back({1, 3000 + 600 * i, 0, 3000 / 16});
      check(c);
      c.requests = {{1, 2100}, {1, 2100, 0, 131}};  // two requests: heads split too
      check(c);
    }
  }
  set_kernel_threads(2);
}

TEST(AttentionPaged, EmptyBatchAndIdleRequestsWriteNothing) {
  Case c;
  c.requests = {{0, 10}, {0, 0}};
  const Fixture f(c, fresh_seed());
  EXPECT_TRUE(f.run(KernelIsa::kAuto).empty());
  PagedAttentionBatch empty;
  KVArena arena(KVCacheSpec{}, 1, 2);
  AttentionShape s{1, 1, 1, 1.0f, 0, 0.0f};
  EXPECT_NO_THROW(paged_attention(s, empty, arena.layer(0), nullptr, nullptr));
}

TEST(AttentionPaged, RejectsInconsistentInputs) {
  Case c;
  c.requests = {{2, 20}};
  const Fixture f(c, fresh_seed());
  KVArena arena(KVCacheSpec{AttentionKind::kFull, 16, 2, 64, DType::kF32, 0}, 1, 4);
  const KVLayerView kv = arena.layer(0);
  std::vector<float> q(2 * 8 * 64), out(q.size());
  auto expect_usage_error = [&](AttentionShape s, PagedAttentionBatch b, const std::string& needle) {
    try {
      paged_attention(s, b, kv, q.data(), out.data());
      ADD_FAILURE() << "expected UsageError mentioning '" << needle << "'";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  AttentionShape s = f.shape();
  PagedAttentionBatch b = f.batch();
  auto bad = s;
  bad.num_q_heads = 7;
  expect_usage_error(bad, b, "7 query heads");
  bad = s;
  bad.head_dim = 32;
  expect_usage_error(bad, b, "dim 32");
  bad = s;
  bad.scale = 0;
  expect_usage_error(bad, b, "scale");
  bad = s;
  bad.sliding_window = -1;
  expect_usage_error(bad, b, "sliding_window");
  const int32_t qs[] = {0, 3};
  const int32_t ctx[] = {2};
  auto bb = b;
  bb.query_start = qs;
  bb.context_lens = ctx;
  expect_usage_error(s, bb, "3 query tokens");
  const int32_t long_ctx[] = {1000};
  bb = b;
  bb.context_lens = long_ctx;
  expect_usage_error(s, bb, "needs 63 blocks");
  const int32_t bad_table[] = {1, 4};
  bb = b;
  bb.block_tables = bad_table;
  bb.block_table_stride = 2;
  expect_usage_error(s, bb, "block 4");
  bb = b;
  bb.cascade_min_tokens = -1;
  expect_usage_error(s, bb, "cascade_min_tokens");
}

}  // namespace
}  // namespace pagedkv
