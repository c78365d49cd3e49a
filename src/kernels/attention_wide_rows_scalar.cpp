// The scalar twin of the prefix kernel with the query rows in vector lanes (attention_wide_rows.h):
// the same tiles (TileWalk), and per row the AVX-512 build's lane arithmetic in the same order
// (each dot product and each value sum token by token or element by element, the tile's
// exponentials as exp_as_simd, summed token by token), so the two differ only where the AVX-512
// build fuses a product and a sum: it is the reference that build is tested against. Products
// are rounded before they are added: std::fma is a library call, and a slow one on the CPUs
// without FMA where this path is the one that runs.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <vector>

#include "vector_exp.h"
#include "attention_tile_walk.h"
#include "attention_wide_rows.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv::attention_detail {
namespace {

using kernels_detail::exp_as_simd;

template <class T, class Convert>
void attend_wide_scalar(const RowGroupTask& task, Convert convert) {
  const size_t dim = static_cast<size_t>(task.kv->head_dim);
  const auto rows = static_cast<size_t>(task.num_rows);
  const int heads = task.num_kv_heads;
  std::fill(task.acc, task.acc + static_cast<size_t>(heads) * rows * dim, 0.0f);
  std::fill(task.row_max, task.row_max + static_cast<size_t>(heads) * rows, -std::numeric_limits<float>::infinity());
  std::fill(task.row_sum, task.row_sum + static_cast<size_t>(heads) * rows, 0.0f);
  thread_local std::vector<float> key_tile, value_tile, probs;
  key_tile.resize(kTileTokens * dim);
  value_tile.resize(kTileTokens * dim);
  probs.resize(kTileTokens);
  const size_t read_offset = static_cast<size_t>(task.first_kv_head) * dim * sizeof(T);
  const size_t read_bytes = heads == task.kv->num_kv_heads ? task.kv->slot_bytes() - read_offset
                                                           : static_cast<size_t>(heads) * dim * sizeof(T);
  TileWalk walk(task, streams_from_memory(task, read_bytes), read_bytes);
  const T* keys[kTileTokens];
  const T* values[kTileTokens];
  for (int k = 0; k < walk.num_tiles(); ++k) {
    const int n = walk.next(keys, values);
    for (int h = 0; h < heads; ++h) {
      const size_t head_offset = static_cast<size_t>(task.first_kv_head + h) * dim;
      for (int j = 0; j < n; ++j)
        for (size_t d = 0; d < dim; ++d) {
          key_tile[static_cast<size_t>(j) * dim + d] = convert(keys[j][head_offset + d]);
          value_tile[static_cast<size_t>(j) * dim + d] = convert(values[j][head_offset + d]);
        }
      for (size_t r = 0; r < rows; ++r) {
        const size_t row = static_cast<size_t>(h) * rows + r;
        const float* q = task.query + row * dim;
        float* acc = task.acc + row * dim;
        float tile_max = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < n; ++j) {
          const float* key = key_tile.data() + static_cast<size_t>(j) * dim;
          float s = 0;
          for (size_t d = 0; d < dim; ++d) s += q[d] * key[d];
          probs[static_cast<size_t>(j)] = s;
          tile_max = std::max(tile_max, s);
        }
        const float new_max = std::max(task.row_max[row], tile_max);
        const float correction = exp_as_simd(task.row_max[row] - new_max);  // 0 on the first tile
        float tile_sum = 0;
        for (int j = 0; j < n; ++j) {
          probs[static_cast<size_t>(j)] = exp_as_simd(probs[static_cast<size_t>(j)] - new_max);
          tile_sum += probs[static_cast<size_t>(j)];
        }
        if (new_max != task.row_max[row])
          for (size_t d = 0; d < dim; ++d) acc[d] *= correction;
        task.row_max[row] = new_max;
        task.row_sum[row] = task.row_sum[row] * correction + tile_sum;
        for (size_t d = 0; d < dim; ++d) {
          float o = acc[d];
          for (int j = 0; j < n; ++j) o += probs[static_cast<size_t>(j)] * value_tile[static_cast<size_t>(j) * dim + d];
          acc[d] = o;
        }
      }
    }
  }
}

}  // namespace

void attend_wide_rows_scalar(const RowGroupTask& task) {
  switch (task.kv->dtype) {
    case DType::kF32:
      return attend_wide_scalar<float>(task, [](float x) { return x; });
    case DType::kF16:
      return attend_wide_scalar<uint16_t>(task, [](uint16_t x) { return f16_to_f32(x); });
    case DType::kBF16:
      return attend_wide_scalar<uint16_t>(task, [](uint16_t x) { return bf16_to_f32(x); });
    default:
      return;  // the driver sends only these (wide_rows_fit)
  }
}

}  // namespace pagedkv::attention_detail
