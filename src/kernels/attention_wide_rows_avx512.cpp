// The AVX-512 build of the prefix kernel with the query rows in vector lanes (attention_wide_rows.h).
// GCC 12 flags the deliberately undefined pass-through operand inside _mm512_cvtph_ps as
// uninitialized (GCC bug 105593, fixed in 13): silence only that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "attention_isa_avx512.h"
#include "attention_tile_simd.h"
#include "attention_wide_rows.h"

namespace pagedkv::attention_detail {
namespace {

using Isa = Avx512Isa<false>;
constexpr int kLanes = 16;

// Tokens per score block and dimensions per value strip for R vectors of rows: R x NT and R x DT
// accumulators (24) stay in registers next to the R row vectors.
template <int R>
constexpr int kWideScoreTokens = R == 4   ? 6
                                 : R == 3 ? 8
                                 : R == 2 ? 12
                                          : 24;
template <int R>
constexpr int kWideValueDims = 24 / R;
static_assert(kTileTokens % kWideScoreTokens<4> == 0 && kTileTokens % kWideScoreTokens<3> == 0);

// 16-bit K/V: converts the next head's (or the next tile's first head's) K and V rows to f32 a
// few vectors per step(), called from inside the score and value blocks, so that the loads, which
// may wait on the L2 or DRAM, overlap the multiply-adds instead of stalling a conversion loop.
template <class L>
class RowConverter {
 public:
  using T = typename L::Storage;
  // Rows keys[j] + offset and values[j] + offset (j < n) into key_dst and value_dst (dim apart),
  // over about `calls` steps.
  void start(const T* const* keys, const T* const* values, int n, size_t offset, float* key_dst, float* value_dst,
             size_t dim, long calls) {
    for (int j = 0; j < n; ++j) {
      src_[2 * j] = keys[j] + offset;
      src_[2 * j + 1] = values[j] + offset;
      dst_[2 * j] = key_dst + static_cast<size_t>(j) * dim;
      dst_[2 * j + 1] = value_dst + static_cast<size_t>(j) * dim;
    }
    rows_ = 2 * n;
    dim_ = dim;
    row_ = 0;
    d_ = 0;
    const long vectors = static_cast<long>(rows_) * static_cast<long>(dim / kLanes);
    per_step_ = static_cast<int>(std::max(1L, (vectors + calls - 1) / std::max(1L, calls)));
  }
  void step() { convert(per_step_); }
  void finish() { convert(std::numeric_limits<int>::max()); }

 private:
  void convert(int vectors) {
    int row = row_;
    size_t d = d_;
    for (; vectors > 0 && row < rows_; --vectors) {
      _mm512_storeu_ps(dst_[row] + d, L::load(src_[row] + d));
      d += kLanes;
      if (d == dim_) {
        d = 0;
        ++row;
      }
    }
    row_ = row;
    d_ = d;
  }
  const T* src_[2 * kTileTokens] = {};
  float* dst_[2 * kTileTokens] = {};
  int rows_ = 0, row_ = 0, per_step_ = 1;
  size_t dim_ = 0, d_ = 0;
};

// f32 K/V are read where they are: nothing to convert.
struct NoConverter {
  void step() {}
};

// The prefetcher's and the converter's steps, taken together from the blocks.
template <class C>
struct Steps {
  Prefetcher& pf;
  C& conv;
  void step() const {
    pf.step();
    conv.step();
  }
};

// s[t][rows] = sum_d k[t][d] * qt[d][rows] for NT tokens; each key element is broadcast into the
// FMA (an embedded broadcast), the rows come from qt's vectors.
template <int R, int NT, class S>
__attribute__((noinline)) void wide_scores(const float* qt, const float* const* k, size_t dim, float* s, S pf) {
  constexpr size_t P = R * kLanes;
  __m512 acc[R][NT];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 24
    for (int t = 0; t < NT; ++t) acc[i][t] = _mm512_setzero_ps();
  for (size_t d = 0; d < dim; ++d) {
    __m512 q[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) q[i] = _mm512_loadu_ps(qt + d * P + kLanes * i);
#pragma GCC unroll 24
    for (int t = 0; t < NT; ++t) {
      const __m512 kb = _mm512_set1_ps(k[t][d]);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) acc[i][t] = _mm512_fmadd_ps(q[i], kb, acc[i][t]);
    }
  }
  pf.step();  // once per block: inside the loop its state would take registers from the pointers
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 24
    for (int t = 0; t < NT; ++t) _mm512_storeu_ps(s + static_cast<size_t>(t) * P + kLanes * i, acc[i][t]);
}

// ot[d0 .. d0 + DT)[rows] += sum_{t < n} v[t][d] * p[t][rows].
template <int R, int DT, class S>
__attribute__((noinline)) void wide_values(const float* p, const float* const* v, int n, size_t d0, float* ot, S pf) {
  constexpr size_t P = R * kLanes;
  __m512 acc[R][DT];
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < DT; ++c) acc[i][c] = _mm512_loadu_ps(ot + (d0 + c) * P + kLanes * i);
  for (int t = 0; t < n; ++t) {
    __m512 pr[R];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) pr[i] = _mm512_loadu_ps(p + static_cast<size_t>(t) * P + kLanes * i);
#pragma GCC unroll 16
    for (int c = 0; c < DT; ++c) {
      const __m512 vb = _mm512_set1_ps(v[t][d0 + c]);
#pragma GCC unroll 4
      for (int i = 0; i < R; ++i) acc[i][c] = _mm512_fmadd_ps(pr[i], vb, acc[i][c]);
    }
  }
  pf.step();
#pragma GCC unroll 4
  for (int i = 0; i < R; ++i)
#pragma GCC unroll 16
    for (int c = 0; c < DT; ++c) _mm512_storeu_ps(ot + (d0 + c) * P + kLanes * i, acc[i][c]);
}

// All strips of a head: DT dimensions at a time, then what is left (dim % 16 == 0, so an even
// count) in strips of 8, 4 and 2.
template <int R, int DT, class S>
void wide_value_strips(const float* p, const float* const* v, int n, size_t dim, float* ot, S pf) {
  size_t d0 = 0;
  for (; d0 + DT <= dim; d0 += DT) wide_values<R, DT>(p, v, n, d0, ot, pf);
  if constexpr (DT > 8) {
    for (; d0 + 8 <= dim; d0 += 8) wide_values<R, 8>(p, v, n, d0, ot, pf);
  }
  if constexpr (DT > 4) {
    for (; d0 + 4 <= dim; d0 += 4) wide_values<R, 4>(p, v, n, d0, ot, pf);
  }
  for (; d0 < dim; d0 += 2) wide_values<R, 2>(p, v, n, d0, ot, pf);
}

// The online-softmax step of one tile, lane-wise: the scores s[t < n] become exp(s - new max) in
// place, the running max m and sum l move on, and ot is rescaled where a row's max grew.
template <int R>
void wide_softmax(float* s, int n, float* m, float* l, float* ot, size_t dim) {
  constexpr size_t P = R * kLanes;
  __m512 alpha[R];
  __mmask16 grew = 0;
  for (int i = 0; i < R; ++i) {
    __m512 tile_max = _mm512_loadu_ps(s + kLanes * i);
    for (int t = 1; t < n; ++t)
      tile_max = _mm512_max_ps(tile_max, _mm512_loadu_ps(s + static_cast<size_t>(t) * P + kLanes * i));
    const __m512 old_max = _mm512_loadu_ps(m + kLanes * i);
    const __m512 new_max = _mm512_max_ps(old_max, tile_max);
    alpha[i] = exp512(_mm512_sub_ps(old_max, new_max));  // exp(-inf) = 0 on the first tile
    grew |= _mm512_cmp_ps_mask(old_max, new_max, _CMP_NEQ_UQ);
    __m512 sum = _mm512_setzero_ps();
    for (int t = 0; t < n; ++t) {
      float* st = s + static_cast<size_t>(t) * P + kLanes * i;
      const __m512 e = exp512(_mm512_sub_ps(_mm512_loadu_ps(st), new_max));
      _mm512_storeu_ps(st, e);
      sum = _mm512_add_ps(sum, e);
    }
    _mm512_storeu_ps(m + kLanes * i, new_max);
    _mm512_storeu_ps(l + kLanes * i, _mm512_fmadd_ps(_mm512_loadu_ps(l + kLanes * i), alpha[i], sum));
  }
  if (grew == 0) return;  // no row's max moved: every factor is 1
  for (size_t d = 0; d < dim; ++d)
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      float* o = ot + d * P + kLanes * i;
      _mm512_storeu_ps(o, _mm512_mul_ps(_mm512_loadu_ps(o), alpha[i]));
    }
}

template <class L, int R>
void attend_wide(const RowGroupTask& task) {
  using T = typename L::Storage;
  constexpr size_t P = R * kLanes;
  constexpr int NT = kWideScoreTokens<R>;
  constexpr int DT = kWideValueDims<R>;
  const size_t dim = static_cast<size_t>(task.kv->head_dim);
  const auto rows = static_cast<size_t>(task.num_rows);
  const int heads = task.num_kv_heads;
  const size_t head_block = dim * P;

  // Buffers from thread_scratch, not containers of this file's own (thread_scratch.h says why).
  const auto zeroed_floats = [](ScratchBuffer buffer, size_t count) {
    float* p = thread_scratch_floats(buffer, count);
    std::memset(p, 0, count * sizeof(float));
    return p;
  };
  float* qt = zeroed_floats(ScratchBuffer::kWideQueries, static_cast<size_t>(heads) * head_block);
  float* ot = zeroed_floats(ScratchBuffer::kWideOutputs, static_cast<size_t>(heads) * head_block);
  float* zero_row = zeroed_floats(ScratchBuffer::kWideZeroRow, dim);
  float* key_tile = thread_scratch_floats(ScratchBuffer::kWideKeys, 2 * kTileTokens * dim);
  float* value_tile = thread_scratch_floats(ScratchBuffer::kWideValues, 2 * kTileTokens * dim);
  float* scores = thread_scratch_floats(ScratchBuffer::kWideScores, kTileTokens * P);
  float* run_max = thread_scratch_floats(ScratchBuffer::kWideRunningStats, 2 * static_cast<size_t>(heads) * P);
  float* run_sum = run_max + static_cast<size_t>(heads) * P;
  std::fill(run_max, run_max + static_cast<size_t>(heads) * P, kNegInf);
  std::fill(run_sum, run_sum + static_cast<size_t>(heads) * P, 0.0f);
  for (int h = 0; h < heads; ++h)
    for (size_t r = 0; r < rows; ++r) {
      const float* q = task.query + (static_cast<size_t>(h) * rows + r) * dim;
      float* dst = qt + static_cast<size_t>(h) * head_block + r;
      for (size_t d = 0; d < dim; ++d) dst[d * P] = q[d];
    }

  const size_t read_offset = static_cast<size_t>(task.first_kv_head) * dim * sizeof(T);
  const size_t read_bytes = heads == task.kv->num_kv_heads ? task.kv->slot_bytes() - read_offset
                                                           : static_cast<size_t>(heads) * dim * sizeof(T);
  const long steps_per_head = static_cast<long>(kTileTokens / NT + dim / DT + 2);
  const bool streaming = streams_from_memory(task, read_bytes);
  TileWalk walk(task, streaming, read_bytes);
  const T* key_slots[2][kTileTokens];
  const T* value_slots[2][kTileTokens];
  Prefetcher prefetcher;
  constexpr bool kConverted = !std::is_same_v<T, float>;
  using Converter = std::conditional_t<kConverted, RowConverter<L>, NoConverter>;
  Converter converter;
  const Steps<Converter> steps{prefetcher, converter};
  int buffer = 0;
  int set = 0;  // 16-bit K/V: which half of key_tile and value_tile holds the current head's rows
  // As the row-group kernel: a second walk touches one line of each slot kTouchDistance tiles
  // ahead, so that a scattered block's TLB miss overlaps the tiles in between.
  constexpr int kTouchDistance = 4;
  TileWalk ahead = walk;
  const T* ahead_keys[kTileTokens];
  const T* ahead_values[kTileTokens];
  if (streaming)
    for (int k = 0; k < kTouchDistance && k < walk.num_tiles(); ++k) (void)ahead.next(ahead_keys, ahead_values);
  int next_n = walk.next(key_slots[0], value_slots[0]);
  if constexpr (kConverted) {  // the first tile's first head, before the loop
    converter.start(key_slots[0], value_slots[0], next_n, static_cast<size_t>(task.first_kv_head) * dim, key_tile,
                    value_tile, dim, 1);
    converter.finish();
  }
  for (int k = 0; k < walk.num_tiles(); ++k) {
    const int n = next_n;
    next_n = k + 1 < walk.num_tiles() ? walk.next(key_slots[buffer ^ 1], value_slots[buffer ^ 1]) : 0;
    if (streaming && k + kTouchDistance < walk.num_tiles()) {
      const int m = ahead.next(ahead_keys, ahead_values);
      for (int j = 0; j < m; ++j) {
        _mm_prefetch(reinterpret_cast<const char*>(ahead_keys[j]) + read_offset, _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(ahead_values[j]) + read_offset, _MM_HINT_T1);
      }
    }
    if (next_n > 0)
      prefetcher.start(key_slots[buffer ^ 1], value_slots[buffer ^ 1], next_n, read_offset, read_bytes,
                       heads * steps_per_head);
    for (int h = 0; h < heads; ++h) {
      const size_t head_offset = static_cast<size_t>(task.first_kv_head + h) * dim;
      // f32 rows are read where they are; 16-bit rows were converted while the previous head was
      // computed, and the next head's are converted during this one. Tokens past a short tile's
      // end read a zero row (their scores are not used).
      const float* krows[kTileTokens];
      const float* vrows[kTileTokens];
      for (int j = n; j < kTileTokens; ++j) krows[j] = vrows[j] = zero_row;
      for (int j = 0; j < n; ++j) {
        if constexpr (kConverted) {
          krows[j] = key_tile + (static_cast<size_t>(set) * kTileTokens + static_cast<size_t>(j)) * dim;
          vrows[j] = value_tile + (static_cast<size_t>(set) * kTileTokens + static_cast<size_t>(j)) * dim;
        } else {
          krows[j] = key_slots[buffer][j] + head_offset;
          vrows[j] = value_slots[buffer][j] + head_offset;
        }
      }
      if constexpr (kConverted) {
        float* kd = key_tile + static_cast<size_t>(set ^ 1) * kTileTokens * dim;
        float* vd = value_tile + static_cast<size_t>(set ^ 1) * kTileTokens * dim;
        if (h + 1 < heads)
          converter.start(key_slots[buffer], value_slots[buffer], n, head_offset + dim, kd, vd, dim, steps_per_head);
        else if (next_n > 0)
          converter.start(key_slots[buffer ^ 1], value_slots[buffer ^ 1], next_n,
                          static_cast<size_t>(task.first_kv_head) * dim, kd, vd, dim, steps_per_head);
        else converter.start(key_slots[buffer], value_slots[buffer], 0, 0, kd, vd, dim, steps_per_head);
      }
      const float* q = qt + static_cast<size_t>(h) * head_block;
      float* o = ot + static_cast<size_t>(h) * head_block;
      for (int t0 = 0; t0 < kTileTokens; t0 += NT)
        wide_scores<R, NT>(q, krows + t0, dim, scores + static_cast<size_t>(t0) * P, steps);
      wide_softmax<R>(scores, n, run_max + static_cast<size_t>(h) * P, run_sum + static_cast<size_t>(h) * P, o, dim);
      wide_value_strips<R, DT>(scores, vrows, n, dim, o, steps);
      if constexpr (kConverted) {
        converter.finish();
        set ^= 1;
      }
    }
    prefetcher.finish();
    buffer ^= 1;
  }
  for (int h = 0; h < heads; ++h)
    for (size_t r = 0; r < rows; ++r) {
      const size_t out_row = static_cast<size_t>(h) * rows + r;
      const float* src = ot + static_cast<size_t>(h) * head_block + r;
      float* dst = task.acc + out_row * dim;
      for (size_t d = 0; d < dim; ++d) dst[d] = src[d * P];
      task.row_max[out_row] = run_max[static_cast<size_t>(h) * P + r];
      task.row_sum[out_row] = run_sum[static_cast<size_t>(h) * P + r];
    }
}

template <class L>
void attend_wide_rows_of(const RowGroupTask& task) {
  switch ((task.num_rows + kLanes - 1) / kLanes) {
    case 1:
      return attend_wide<L, 1>(task);
    case 2:
      return attend_wide<L, 2>(task);
    case 3:
      return attend_wide<L, 3>(task);
    default:
      return attend_wide<L, 4>(task);
  }
}

}  // namespace

void attend_wide_rows_avx512(const RowGroupTask& task) {
  switch (task.kv->dtype) {
    case DType::kF32:
      return attend_wide_rows_of<LoadF32<Isa>>(task);
    case DType::kF16:
      return attend_wide_rows_of<LoadF16<Isa>>(task);
    case DType::kBF16:
      return attend_wide_rows_of<LoadBF16<Isa>>(task);
    default:
      return;  // the driver sends only these (wide_rows_fit)
  }
}

}  // namespace pagedkv::attention_detail
