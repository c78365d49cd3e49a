// The portable kernel: the same tiled online-softmax algorithm as the AVX2 kernel, in plain C++.
// It is the path the tests compare the SIMD path against and the one that runs on CPUs without
// AVX2. Each tile of K and V is first converted to f32 (exact), then all arithmetic is f32. For
// fp8 the tile holds the codes and the scales are folded in as the SIMD kernel folds them: a
// score is k_scale * (q . codes), and p * v_scale weighs a value row of codes. int8 runs the
// SIMD kernels' integer arithmetic (attention_tile.h), the same int32 sums, in
// attend_tile_head_int8.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <vector>

#include "vector_exp.h"
#include "attention_tile.h"
#include "attention_tile_walk.h"
#include "pagedkv/storage/float_convert.h"
#include "pagedkv/storage/fp8_e4m3.h"

namespace pagedkv::attention_detail {
namespace {

using kernels_detail::exp_as_simd;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

float dot(const float* a, const float* b, int n) {
  // Eight independent partial sums: the compiler may vectorise this without reassociating.
  float partial[8] = {};
  int d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) partial[l] += a[d + l] * b[d + l];
  float sum = 0;
  for (; d < n; ++d) sum += a[d] * b[d];
  for (float p : partial) sum += p;
  return sum;
}

// Converts one token's row of KV head h to f32 (int8/fp8: the codes) and returns the row's
// scale (1 for f32/f16/bf16).
float load_row(const KVLayerView& kv, const std::byte* slot, size_t h, float* out) {
  const size_t n = static_cast<size_t>(kv.head_dim);
  const std::byte* row = slot + h * n * kv.element_bytes();
  switch (kv.dtype) {
    case DType::kF32: {
      const auto* src = reinterpret_cast<const float*>(row);
      std::copy(src, src + n, out);
      return 1.0f;
    }
    case DType::kF16: {
      const auto* src = reinterpret_cast<const uint16_t*>(row);
      for (size_t i = 0; i < n; ++i) out[i] = f16_to_f32(src[i]);
      return 1.0f;
    }
    case DType::kBF16: {
      const auto* src = reinterpret_cast<const uint16_t*>(row);
      for (size_t i = 0; i < n; ++i) out[i] = bf16_to_f32(src[i]);
      return 1.0f;
    }
    case DType::kInt8:
    case DType::kFP8: {
      const auto* src = reinterpret_cast<const uint8_t*>(row);
      if (kv.dtype == DType::kInt8)
        for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(static_cast<int8_t>(src[i]));
      else
        for (size_t i = 0; i < n; ++i) out[i] = fp8_e4m3_to_f32(src[i]);
      float scale;
      std::memcpy(&scale, slot + kv.rows_bytes() + h * kKVScaleBytes, sizeof scale);
      return scale;
    }
    default:
      return 0.0f;  // the driver accepts only storage types
  }
}

// The SIMD kernels' softcap256 (attention_tile_simd.h) for one lane, as exp_as_simd
// (vector_exp.h) is their exp: the same operations in the same order (std::fma where they
// fuse; max and min as the vector instructions take a NaN), so the same results. The int8 tiles
// use them: their weights are rounded to 8-bit codes, and std::exp / std::tanh, an ulp away from
// the vector versions, would now and then round a code the other way (1/255 of the tile's largest
// weight).
float softcap_as_simd(float x, float cap) {
  const float y = x * (1.0f / cap);
  const float ay = std::fabs(y);
  const float e = exp_as_simd(ay * -2.0f);
  const float t_large = (1.0f - e) / (1.0f + e);
  const float y2 = ay * ay;
  const float poly = std::fma(std::fma(y2, 2.0f / 15.0f, -1.0f / 3.0f), y2, 1.0f);
  const float t = ay < 0.0625f ? poly * ay : t_large;
  return std::copysign(t, y) * cap;
}

// The online-softmax step of one row over a tile, after its scores s[lo, hi) (largest: tile_max):
// turns them into exp(s - new max) in place (exp_fn), rescales the accumulator to the new max
// and updates the row's max and sum. Shared by the float and the int8 tiles.
template <class Exp>
void online_softmax_step(float* s, int lo, int hi, float tile_max, float& row_max, float& row_sum, float* acc,
                         size_t dim, Exp exp_fn) {
  const float new_max = std::max(row_max, tile_max);
  const float correction = std::exp(row_max - new_max);  // exp(-inf) = 0 on the first tile
  float tile_sum = 0;
  for (int j = lo; j < hi; ++j) {
    s[j] = exp_fn(s[j] - new_max);
    tile_sum += s[j];
  }
  if (correction != 1.0f)
    for (size_t d = 0; d < dim; ++d) acc[d] *= correction;
  row_max = new_max;
  row_sum = row_sum * correction + tile_sum;
}

// One tile of one KV head: updates that head's running max, sum and accumulator.
// key_scale[j] and value_scale[j] multiply token j's key and value rows.
void attend_tile_head(const RowGroupTask& task, int tile, int n, const float* key_tile, const float* value_tile,
                      const float* key_scale, const float* value_scale, float* scores, const float* query,
                      float* acc_out, float* row_max, float* row_sum) {
  const int dim = task.kv->head_dim;
  const auto udim = static_cast<size_t>(dim);
  for (int r = 0; r < task.num_rows; ++r) {
    float* s = scores + static_cast<size_t>(r) * kTileTokens;
    const float* q = query + static_cast<size_t>(r) * udim;
    // Tokens of this tile the row may attend to: [lo, hi).
    const int lo = task.rows_share_range ? 0 : std::clamp(task.row_begin[r] - tile, 0, n);
    const int hi = task.rows_share_range ? n : std::clamp(task.row_end[r] - tile, 0, n);
    if (lo >= hi) continue;
    float tile_max = kNegInf;
    for (int j = lo; j < hi; ++j) {
      float x = key_scale[j] * dot(q, key_tile + static_cast<size_t>(j) * udim, dim);
      if (task.logit_softcap > 0) x = task.logit_softcap * std::tanh(x / task.logit_softcap);
      s[j] = x;
      tile_max = std::max(tile_max, x);
    }
    float* acc = acc_out + static_cast<size_t>(r) * udim;
    online_softmax_step(s, lo, hi, tile_max, row_max[r], row_sum[r], acc, udim, [](float x) { return std::exp(x); });
    for (int j = lo; j < hi; ++j) {
      const float p = s[j] * value_scale[j];
      const float* v = value_tile + static_cast<size_t>(j) * udim;
      for (int d = 0; d < dim; ++d) acc[d] += p * v[d];
    }
  }
}

// The int8 twin of attention_tile_int8.h and attend_tile_int8 (attention_tile_simd.h): int16
// query codes times the key codes, summed in int32; score = sum * (query scale * key scale) +
// query sum * key offset; the softmax in f32 (with the vector kernels' exp and soft-cap, above);
// per row, the weights p * v_scale quantized to 8-bit codes (softmax_weights_rows), and the value
// codes summed in int32 under them, added to the accumulator times the weights' step.
void attend_tile_head_int8(const RowGroupTask& task, int h, int tile, int n, const int8_t* const* keys,
                           const int8_t* const* values, const float* key_scale, const float* key_offset,
                           const float* value_scale, float* scores) {
  const auto dim = static_cast<size_t>(task.kv->head_dim);
  const size_t qstride = padded_query_dim(dim);
  const auto rows = static_cast<size_t>(task.num_rows);
  const int16_t* codes = task.query_codes + static_cast<size_t>(h) * rows * qstride;
  thread_local std::vector<int32_t> value_sums;
  value_sums.resize(dim);
  int32_t* sums = value_sums.data();
  for (size_t r = 0; r < rows; ++r) {
    float* s = scores + r * kTileTokens;
    const int16_t* q = codes + r * qstride;
    const float qs = task.query_scale[static_cast<size_t>(h) * rows + r];
    const float qsum = task.query_sum[static_cast<size_t>(h) * rows + r];
    const int lo = task.rows_share_range ? 0 : std::clamp(task.row_begin[r] - tile, 0, n);
    const int hi = task.rows_share_range ? n : std::clamp(task.row_end[r] - tile, 0, n);
    if (lo >= hi) continue;
    float& row_max = task.row_max[static_cast<size_t>(h) * rows + r];
    float& row_sum = task.row_sum[static_cast<size_t>(h) * rows + r];
    float* acc = task.acc + (static_cast<size_t>(h) * rows + r) * dim;
    float tile_max = kNegInf;
    for (int j = lo; j < hi; ++j) {
      int32_t dot = 0;
      for (size_t d = 0; d < dim; ++d) dot += int32_t{q[d]} * int32_t{keys[j][d]};
      float x = std::fma(qsum, key_offset[j], static_cast<float>(dot) * (qs * key_scale[j]));
      if (task.logit_softcap > 0) x = softcap_as_simd(x, task.logit_softcap);
      s[j] = x;
      tile_max = std::max(tile_max, x);
    }
    online_softmax_step(s, lo, hi, tile_max, row_max, row_sum, acc, dim, exp_as_simd);
    float w[kTileTokens] = {};
    for (int j = lo; j < hi; ++j) w[j] = s[j] * value_scale[j];
    // The weights' 8-bit codes, as softmax_weights_rows (attention_tile_int8.h) makes them.
    float w_max = 0, w_sum = 0;
    for (float x : w) {
      w_max = std::max(w_max, x);
      w_sum += x;
    }
    if (std::isnan(w_sum)) {
      for (size_t d = 0; d < dim; ++d) acc[d] = std::numeric_limits<float>::quiet_NaN();
      continue;
    }
    const float inv = w_max > 0 ? kWeightCodeMax / w_max : 0.0f;
    const float step = w_max / kWeightCodeMax;
    std::fill(sums, sums + dim, 0);
    for (int j = lo; j < hi; ++j) {
      const auto code = static_cast<int32_t>(std::min(kWeightCodeMax, round_to_even(w[j] * inv)));
      for (size_t d = 0; d < dim; ++d) sums[d] += code * int32_t{values[j][d]};
    }
    for (size_t d = 0; d < dim; ++d) acc[d] += step * static_cast<float>(sums[d]);
  }
}

}  // namespace

// Tiles outermost and the task's KV heads inside, as in the AVX2 kernel: with all heads in one
// task, each slot (all heads of a token) is then read front to back once, not once per head.
void attend_rows_scalar(const RowGroupTask& task) {
  const KVLayerView& kv = *task.kv;
  const auto udim = static_cast<size_t>(kv.head_dim);
  const auto rows = static_cast<size_t>(task.num_rows);
  const size_t block = rows * udim;
  const auto heads = static_cast<size_t>(task.num_kv_heads);

  thread_local std::vector<float> key_tile, value_tile, scores;
  key_tile.resize(static_cast<size_t>(kTileTokens) * udim);
  value_tile.resize(static_cast<size_t>(kTileTokens) * udim);
  scores.resize(rows * kTileTokens);

  std::fill(task.acc, task.acc + heads * block, 0.0f);
  std::fill(task.row_max, task.row_max + heads * rows, kNegInf);
  std::fill(task.row_sum, task.row_sum + heads * rows, 0.0f);

  // The SIMD kernel's walk (attention_tile_walk.h): the same tokens in each tile.
  const size_t read_offset = static_cast<size_t>(task.first_kv_head) * udim * kv.element_bytes();
  const size_t read_bytes =
      static_cast<int>(heads) == kv.num_kv_heads ? kv.slot_bytes() - read_offset : heads * udim * kv.element_bytes();
  TileWalk walk(task, streams_from_memory(task, read_bytes), read_bytes);
  const std::byte* key_slots[kTileTokens];
  const std::byte* value_slots[kTileTokens];
  float key_scale[kTileTokens], key_offset[kTileTokens], value_scale[kTileTokens];
  for (int k = 0; k < walk.num_tiles(); ++k) {
    const int tile = task.token_begin + k * kTileTokens;  // its first position, when tiles are consecutive
    const int n = walk.next(key_slots, value_slots);
    for (size_t h = 0; h < heads; ++h) {
      const size_t head = static_cast<size_t>(task.first_kv_head) + h;
      if (kv.dtype == DType::kInt8) {
        const int8_t* keys[kTileTokens];
        const int8_t* values[kTileTokens];
        for (int j = 0; j < n; ++j) {
          keys[j] = reinterpret_cast<const int8_t*>(key_slots[j]) + head * udim;
          values[j] = reinterpret_cast<const int8_t*>(value_slots[j]) + head * udim;
          uint32_t packed;  // f16 scale and offset (storage/kv_quantize.h)
          std::memcpy(&packed, key_slots[j] + kv.rows_bytes() + head * kKVScaleBytes, sizeof packed);
          const KeyScaleOffset so = unpack_key_scale_offset(packed);
          key_scale[j] = so.scale;
          key_offset[j] = so.offset;
          std::memcpy(&value_scale[j], value_slots[j] + kv.rows_bytes() + head * kKVScaleBytes, sizeof(float));
        }
        attend_tile_head_int8(task, static_cast<int>(h), tile, n, keys, values, key_scale, key_offset, value_scale,
                              scores.data());
        continue;
      }
      for (int j = 0; j < n; ++j) {
        key_scale[j] = load_row(kv, key_slots[j], head, key_tile.data() + static_cast<size_t>(j) * udim);
        value_scale[j] = load_row(kv, value_slots[j], head, value_tile.data() + static_cast<size_t>(j) * udim);
      }
      attend_tile_head(task, tile, n, key_tile.data(), value_tile.data(), key_scale, value_scale, scores.data(),
                       task.query + h * block, task.acc + h * block, task.row_max + h * rows, task.row_sum + h * rows);
    }
  }
}

}  // namespace pagedkv::attention_detail
