// The AVX2 build (with FMA and F16C) of QuantizedMatrix's super-block products (Q4_K, Q5_K, Q6_K, IQ4_XS, Q3_K, Q2_K),
// on the weights repacked in panels of 16 rows (quantized_panels.h): the AVX-512 build's panels, each 64-byte register
// of 16 rows x 4 bytes read as two 32-byte halves of 8 rows. It runs where AVX-512 with VNNI does not (AMD Zen 2 / Zen
// 3, Intel client cores); the activations are quantized to Q8_K as the scalar twin's quantizer does (the same codes),
// and the results equal the twin's (block_dot.h) bit for bit: inside a super-block every product is an exact integer
// sum whatever its order, and the super-block's contribution, (d * d_x) * sum - (dmin * d_x) * mins, is added to each
// row's float accumulator in block order with the twin's very float operations (this file is compiled without fused
// multiply-adds).
//
// Lanes are rows, as in the AVX-512 build: a token's 4 activation bytes are broadcast against 8
// rows x 4 columns of levels, so a tile's results need no horizontal sums and its unpacking and
// block scales are shared by all its tokens. Without VNNI the byte products are vpmaddubsw
// (unsigned level x signed activation byte, adjacent pairs summed to int16), several registers'
// pairs are added as int16 while they cannot overflow, and vpmaddwd with the sub-block scale in
// both halves of a lane (Q4_K / Q5_K: 6-bit scales; Q6_K: int8) widens them to int32 and scales
// them in one instruction. With |x| <= 128 a pair is at most 2 * 15 * 128 = 3840 for Q4_K (8
// registers would stay below 32767; the tile adds 4), 2 * 31 * 128 for Q5_K (4 registers) and
// 2 * 63 * 128 for Q6_K (2 registers).
//   Q4_K / Q5_K: the mins meet the activation's 32-value sums, as (min, min) int16 pairs
//     against (sum, sum) pairs with vpmaddwd.
//   Q6_K: the levels are the file's q + 32 (0..63, unsigned); the offset is taken out once per
//     super-block and token: 32 times the scales against the activation's 16-value sums.
//   IQ4_XS: signed levels (kIq4NlValues), with the sign trick; each register's pairs scaled.
//   Q3_K (levels q + 4) / Q2_K: 16-value sub-blocks; Q3_K's offset and Q2_K's mins against the
//     16-value sums.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>

#include "block_dot.h"
#include "lanes_avx2.h"
#include "pagedkv/model/format/block_formats.h"
#include "quantized_kernels.h"
#include "spread_prefetch.h"

namespace pagedkv::quant_detail {
namespace {

// ---- prepared activations ------------------------------------------------------------------------

// One token's Q8_K super-block (the twin's quantizer's values) with the sums the tiles meet.
struct Q8KRecord {
  int8_t q[kSuperBlock];
  float d;
  int32_t sum32_pairs[4];  // Q4_K / Q5_K: the sums of sub-blocks 2c and 2c + 1 (32 values each), an int16 pair
  int32_t sum16_pairs[8];  // Q6_K: the sums of the 16-value groups 2k and 2k + 1, an int16 pair
  int32_t unused[3];
};
static_assert(sizeof(Q8KRecord) == 320);

// Records are stored token by token, each token's super-blocks in order.
size_t prepared_bytes(TensorType, int cols, int num_tokens) {
  return static_cast<size_t>(num_tokens) * static_cast<size_t>(cols / kSuperBlock) * sizeof(Q8KRecord);
}

int32_t int16_pair(int lo, int hi) {
  // |a sum of 32 values| <= 4096: an int16
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint16_t>(lo)) |
                              (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16));
}

// One super-block of a token quantized to Q8_K as quantize_row_q8_k does (block_formats.cpp:
// the first value of largest magnitude sets iscale = -127 / max, codes round(iscale * x) with ties
// to even, d = 1 / iscale), 8 lanes at a time; equal to it for finite inputs (tested through the
// products).
void quantize_record(const float* v, Q8KRecord& r) {
  constexpr int kVectors = kSuperBlock / 8;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 amax8 = _mm256_setzero_ps();
  for (int i = 0; i < kVectors; ++i) amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, _mm256_loadu_ps(v + 8 * i)));
  const float amax = max_lane(amax8);
  int16_t bsums[kSuperBlock / 16] = {};
  if (amax == 0.0f) {
    std::memset(r.q, 0, sizeof r.q);
    r.d = 0.0f;
  } else {
    float max = 0.0f;  // the first value of magnitude amax, with its sign
    for (int i = 0; i < kVectors; ++i) {
      const __m256 x = _mm256_loadu_ps(v + 8 * i);
      const int hits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, x), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hits != 0) {
        max = v[8 * i + __builtin_ctz(static_cast<unsigned>(hits))];
        break;
      }
    }
    const float iscale = -127.0f / max;
    const __m256 scale = _mm256_set1_ps(iscale);
    for (int i = 0; i < kVectors; i += 4) {
      __m256i codes[4];
      for (int k = 0; k < 4; ++k) codes[k] = _mm256_cvtps_epi32(_mm256_mul_ps(scale, _mm256_loadu_ps(v + 8 * (i + k))));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(r.q + 8 * i), codes_as_bytes(codes));
    }
    for (int g = 0; g < kSuperBlock / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += r.q[16 * g + j];
      bsums[g] = static_cast<int16_t>(sum);
    }
    r.d = 1.0f / iscale;
  }
  for (int c = 0; c < 4; ++c)
    r.sum32_pairs[c] = int16_pair(bsums[4 * c] + bsums[4 * c + 1], bsums[4 * c + 2] + bsums[4 * c + 3]);
  for (int k = 0; k < 8; ++k) r.sum16_pairs[k] = int16_pair(bsums[2 * k], bsums[2 * k + 1]);
  std::memset(r.unused, 0, sizeof r.unused);
}

void prepare(TensorType, const float* x, size_t x_stride, int num_tokens, int cols, std::byte* out) {
  const int blocks = cols / kSuperBlock;
  auto* records = reinterpret_cast<Q8KRecord*>(out);
  for (int t = 0; t < num_tokens; ++t)
    for (int b = 0; b < blocks; ++b)
      quantize_record(x + static_cast<size_t>(t) * x_stride + static_cast<size_t>(b) * kSuperBlock,
                      records[static_cast<size_t>(t) * static_cast<size_t>(blocks) + static_cast<size_t>(b)]);
}

// ---- byte-lane helpers -------------------------------------------------------------------------------

// Half h (rows 8h..8h+7) of the 64-byte panel register at p.
__m256i load_half(const std::byte* p, int h) { return _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32 * h)); }
__m256i bytes(int v) { return _mm256_set1_epi8(static_cast<char>(v)); }
// A pshufb pattern that makes every dword an int16 pair of two of its own bytes, (byte first, byte
// second): each in the low byte of its int16 with zero above, or (kHigh) in the high byte, so that
// an arithmetic shift by 8 extends a signed byte. The sub-block scales are (j, j), the scales or
// mins of two sub-blocks (j, j + 1). From a table: built on the stack, a pattern costs a store
// forwarding stall per sub-block.
template <bool kHigh>
__m256i int16_pair_pattern(int first, int second) {
  alignas(32) static constexpr auto kPatterns = [] {
    std::array<std::array<int8_t, 32>, 16> p{};
    constexpr int at = kHigh ? 1 : 0;
    for (int f = 0; f < 4; ++f)
      for (int s = 0; s < 4; ++s)
        for (int k = 0; k < 8; ++k) {  // dword k's bytes are 4k.. of its 128-bit lane
          std::array<int8_t, 32>& q = p[static_cast<size_t>(4 * f + s)];
          q[static_cast<size_t>(4 * k + at)] = static_cast<int8_t>((4 * k + f) % 16);
          q[static_cast<size_t>(4 * k + 2 + at)] = static_cast<int8_t>((4 * k + s) % 16);
          q[static_cast<size_t>(4 * k + 1 - at)] = q[static_cast<size_t>(4 * k + 3 - at)] = -128;
        }
    return p;
  }();
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(kPatterns[static_cast<size_t>(4 * first + second)].data()));
}
// a | (b & c)
__m256i or_masked(__m256i a, __m256i b, __m256i c) { return _mm256_or_si256(a, _mm256_and_si256(b, c)); }
// Every byte's bits moved left by k (right for negative k), within 16-bit lanes.
__m256i shift_bits(__m256i v, int k) {
  return k >= 0 ? _mm256_sll_epi16(v, _mm_cvtsi32_si128(k)) : _mm256_srl_epi16(v, _mm_cvtsi32_si128(-k));
}

// The sum over k of pairs[k] . token[k]: int16 pairs of each row (lanes) against a token's int16
// pairs (broadcast), as int32 (the mins against the 32-value sums, Q6_K's scales against the
// 16-value sums).
template <int K>
__m256i pair_products(const __m256i (&pairs)[K], const int32_t* token) {
  __m256i sum = _mm256_setzero_si256();
#pragma GCC unroll 8
  for (int k = 0; k < K; ++k) sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs[k], _mm256_set1_epi32(token[k])));
  return sum;
}

// The records of one super-block for a tile's tokens: token t's is stride records after token
// t - 1's. An address computed in the token loops, not a pointer loaded there from an array.
struct TokenRecords {
  const Q8KRecord* first;
  size_t stride;
  const Q8KRecord* operator[](int t) const { return first + static_cast<size_t>(t) * stride; }
};

// The tiles' token step for unsigned levels: 16 columns of both 8-row halves of a panel
// (w[h][v]: 4 columns of 8 rows; a broadcast of 4 activation bytes meets both halves), their
// pairs summed as int16 over the 4 registers (the callers' levels keep that within int16), then
// scaled by the sub-block's (scale, scale) pairs into each token's int32 sums.
template <int T>
inline __attribute__((always_inline)) void sixteen_columns(const __m256i (&w)[2][4], const __m256i (&scale)[2],
                                                           TokenRecords xb, int column, __m256i (&isum)[2][T]) {
#pragma GCC unroll 1
  for (int t = 0; t < T; ++t) {
    const int8_t* x = xb[t]->q + column;
    const __m256i x0 = broadcast_4_bytes(x);
    __m256i p0 = _mm256_maddubs_epi16(w[0][0], x0), p1 = _mm256_maddubs_epi16(w[1][0], x0);
#pragma GCC unroll 3
    for (int v = 1; v < 4; ++v) {
      const __m256i xv = broadcast_4_bytes(x + 4 * v);
      p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(w[0][v], xv));
      p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(w[1][v], xv));
    }
    isum[0][t] = _mm256_add_epi32(isum[0][t], _mm256_madd_epi16(p0, scale[0]));
    isum[1][t] = _mm256_add_epi32(isum[1][t], _mm256_madd_epi16(p1, scale[1]));
  }
}

// ---- Q4_K / Q5_K ----------------------------------------------------------------------------------

// The 6-bit scales and mins of 8 rows (one byte per sub-block, 4 per lane): sub-blocks 0-3 / 4-7.
struct PackedScales {
  __m256i scales_lo, scales_hi, mins_lo, mins_hi;
};

// From the 12 packed bytes of each row (3 registers: bytes 0-3, 4-7, 8-11), as q4_k_scale_min:
// sub-blocks 0-3 keep the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 take
// the nibbles of bytes 8-11 as their low 4 bits and the top 2 bits of bytes 0-3 / 4-7 as their high 2.
PackedScales decode_scales(const std::byte* at, int h) {
  const __m256i w0 = load_half(at, h), w1 = load_half(at + 64, h), w2 = load_half(at + 128, h);
  const __m256i low6 = bytes(0x3F), low4 = bytes(0x0F), bits45 = bytes(0x30);
  return {_mm256_and_si256(w0, low6),
          _mm256_or_si256(_mm256_and_si256(w2, low4), _mm256_and_si256(_mm256_srli_epi32(w0, 2), bits45)),
          _mm256_and_si256(w1, low6),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w2, 4), low4),
                          _mm256_and_si256(_mm256_srli_epi32(w1, 2), bits45))};
}

template <TensorType kType, int T>
void sums_q4_k(const std::byte* chunk, TokenRecords xb, const SpreadPrefetch& prefetch, __m256i (&isum)[2][T],
               __m256i (&imins)[2][T]) {
  constexpr bool kFive = kType == TensorType::kQ5_K;
  const std::byte* packed_scales = chunk + (kFive ? 40 : 32) * 64;
  // Both halves of the panel in one token step, so that a broadcast of 4 activation bytes meets
  // 16 rows (two registers of levels): the broadcasts take the same pipes as the adds. A step
  // covers 16 of a sub-block's 32 columns (2 x 4 registers of levels): 32 would leave too few of
  // the 16 ymm registers for the broadcasts and products, and the compiler would reload levels
  // from the stack in every step.
  // (scale, scale) as an int16 pair in every lane for sub-block s and half h: byte s % 4 of the
  // lane's 4 scales. The mins of sub-blocks 2c and 2c + 1, as an int16 pair per row, meet the
  // token's sums here too.
  __m256i scale[8][2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const PackedScales ps = decode_scales(packed_scales, h);
#pragma GCC unroll 8
    for (int s = 0; s < 8; ++s)
      scale[s][h] = _mm256_shuffle_epi8(s < 4 ? ps.scales_lo : ps.scales_hi, int16_pair_pattern<false>(s % 4, s % 4));
    __m256i min_pairs[4];
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) {
      min_pairs[c] =
          _mm256_shuffle_epi8(c < 2 ? ps.mins_lo : ps.mins_hi, int16_pair_pattern<false>(2 * (c % 2), 2 * (c % 2) + 1));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) imins[h][t] = pair_products(min_pairs, xb[t]->sum32_pairs);
  }
#pragma GCC unroll 1
  for (int c = 0; c < 4; ++c) {
#pragma GCC unroll 1
    for (int nib = 0; nib < 2; ++nib) {
      const int s = 2 * c + nib;
      prefetch.share(s, 8);
#pragma GCC unroll 1
      for (int k = 0; k < 2; ++k) {  // columns 32s + 16k..
        __m256i w[2][4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v) {
            const __m256i q = load_half(chunk + (8 * c + 4 * k + v) * 64, h);
            w[h][v] = _mm256_and_si256(nib == 0 ? q : _mm256_srli_epi16(q, 4), bytes(0x0F));
            if constexpr (kFive)  // the fifth bit: bit s of the qh byte, moved to bit 4
              w[h][v] = _mm256_or_si256(
                  w[h][v],
                  _mm256_and_si256(shift_bits(load_half(chunk + (32 + 4 * k + v) * 64, h), 4 - s), bytes(0x10)));
          }
        }
        sixteen_columns(w, scale[s], xb, 32 * s + 16 * k, isum);
      }
    }
  }
}

// ---- Q6_K ----------------------------------------------------------------------------------------

// The int8 scales of sub-block sb for 8 rows, each as a (scale, scale) int16 pair.
__m256i q6_scale(const std::byte* scales, int sb, int h) {
  const __m128i s = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + sb * 16 + 8 * h));
  return _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(s, s));
}

template <int T>
void sums_q6_k(const std::byte* chunk, TokenRecords xb, const SpreadPrefetch& prefetch, __m256i (&isum)[2][T]) {
  const std::byte* scales = chunk + 48 * 64;
  // Both halves in one token step, 16 columns (one sub-block) a step, as in sums_q4_k.
#pragma GCC unroll 1
  for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 1
    for (int s = 0; s < 4; ++s) {  // columns 128n + 32s..
      prefetch.share(4 * n + s, 8);
#pragma GCC unroll 1
      for (int j = 0; j < 2; ++j) {  // columns 128n + 32s + 16j.., sub-block 8n + 2s + j
        __m256i w[2][4], scale[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v) {
            const std::byte* triple = chunk + 3 * (8 * n + 4 * j + v) * 64;
            if (s < 3) {
              w[h][v] = _mm256_and_si256(load_half(triple + s * 64, h), bytes(0x3F));
            } else {  // bits 6-7 of the three bytes, as bits 0-1, 2-3, 4-5
              const __m256i b0 = _mm256_and_si256(_mm256_srli_epi16(load_half(triple, h), 6), bytes(0x03));
              const __m256i b1 = _mm256_and_si256(_mm256_srli_epi16(load_half(triple + 64, h), 4), bytes(0x0C));
              const __m256i b2 = _mm256_and_si256(_mm256_srli_epi16(load_half(triple + 128, h), 2), bytes(0x30));
              w[h][v] = _mm256_or_si256(_mm256_or_si256(b0, b1), b2);
            }
          }
          scale[h] = q6_scale(scales, 8 * n + 2 * s + j, h);
        }
#pragma GCC unroll 1
        for (int t = 0; t < T; ++t) {
          const int8_t* x = xb[t]->q + 128 * n + 32 * s + 16 * j;
#pragma GCC unroll 2
          for (int k = 0; k < 2; ++k) {  // 8 columns: two registers' pairs per int16 sum
            const __m256i x0 = broadcast_4_bytes(x + 8 * k), x1 = broadcast_4_bytes(x + 8 * k + 4);
#pragma GCC unroll 2
            for (int h = 0; h < 2; ++h) {
              const __m256i p =
                  _mm256_add_epi16(_mm256_maddubs_epi16(w[h][2 * k], x0), _mm256_maddubs_epi16(w[h][2 * k + 1], x1));
              isum[h][t] = _mm256_add_epi32(isum[h][t], _mm256_madd_epi16(p, scale[h]));
            }
          }
        }
      }
    }
  }
  // The levels' offset: 32 times the scales against the 16-value sums, as (scale 2k, scale 2k + 1)
  // int16 pairs against the token's (sum 2k, sum 2k + 1).
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m256i scale_pairs[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      const __m128i a = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 2 * k * 16 + 8 * h));
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + (2 * k + 1) * 16 + 8 * h));
      scale_pairs[k] = _mm256_cvtepi8_epi16(_mm_unpacklo_epi8(a, b));
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t)
      isum[h][t] = _mm256_sub_epi32(isum[h][t], _mm256_slli_epi32(pair_products(scale_pairs, xb[t]->sum16_pairs), 5));
  }
}

template <int T>
void sums_iq4_xs(const std::byte* chunk, const std::byte* high, int h, TokenRecords xb, const SpreadPrefetch& prefetch,
                 __m256i (&isum)[T]) {
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4NlValues)));
  const __m256i low = load_half(chunk + 32 * 64, h);
  const __m256i top = _mm256_cvtepu16_epi32(_mm_load_si128(reinterpret_cast<const __m128i*>(high + 16 * h)));
#pragma GCC unroll 1
  for (int s = 0; s < 8; ++s) {
    prefetch.share(8 * h + s, 16);  // the super-block's steps: 8 a half
    const __m256i ls = _mm256_or_si256(
        _mm256_and_si256(_mm256_srl_epi32(low, _mm_cvtsi32_si128(4 * s)), _mm256_set1_epi32(0x0F)),
        _mm256_slli_epi32(_mm256_and_si256(_mm256_srl_epi32(top, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi32(3)), 4));
    const __m256i scale32 = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
    // (scale, scale) as an int16 pair in every lane
    const __m256i scale =
        _mm256_or_si256(_mm256_and_si256(scale32, _mm256_set1_epi32(0xFFFF)), _mm256_slli_epi32(scale32, 16));
#pragma GCC unroll 1
    for (int part = 0; part < 2; ++part) {  // the low nibbles (columns 32s..), then the high (32s + 16..)
      __m256i w[4], magnitude[4];
#pragma GCC unroll 4
      for (int v = 0; v < 4; ++v) {
        const __m256i q = load_half(chunk + (4 * s + v) * 64, h);
        w[v] = _mm256_shuffle_epi8(table, _mm256_and_si256(part == 0 ? q : _mm256_srli_epi16(q, 4), bytes(0x0F)));
        magnitude[v] = _mm256_abs_epi8(w[v]);
      }
#pragma GCC unroll 1
      for (int t = 0; t < T; ++t) {
        const int8_t* x = xb[t]->q + 32 * s + 16 * part;
        __m256i sum = isum[t];
#pragma GCC unroll 4
        for (int v = 0; v < 4; ++v)
          sum = _mm256_add_epi32(
              sum,
              _mm256_madd_epi16(
                  _mm256_maddubs_epi16(magnitude[v], _mm256_sign_epi8(broadcast_4_bytes(x + 4 * v), w[v])), scale));
        isum[t] = sum;
      }
    }
  }
}

// ---- Q3_K / Q2_K ----------------------------------------------------------------------------------

// Their chunks (quantized_panels.h): registers 8n + v the 2-bit levels (bits 2j, 2j + 1 of a byte
// those of column 128n + 32j + 4v..); Q3_K: registers 16 + v the hmask bits (bit 4n + j of a byte
// that of the same column), 24-26 the 12 packed scale bytes; Q2_K: 16-19 the 16 scale bytes
// (scale in the low nibble, min in the high one).
constexpr int kHmaskAt = 16, kQ3ScalesAt = 24, kQ2ScalesAt = 16;

// Q3_K's 6-bit scales - 32 of 8 rows as signed bytes, sub-blocks 4g..4g+3 in register g: the low 4
// bits from the low (g = 0, 1) or high (g = 2, 3) nibbles of bytes 0-3 (g even) or 4-7 (g odd),
// the high 2 bits from bits 2g, 2g + 1 of bytes 8-11.
void q3_k_scales(const std::byte* chunk, int h, __m256i (&g)[4]) {
  const __m256i w0 = load_half(chunk + kQ3ScalesAt * 64, h), w1 = load_half(chunk + (kQ3ScalesAt + 1) * 64, h),
                w2 = load_half(chunk + (kQ3ScalesAt + 2) * 64, h);
  const __m256i low4 = bytes(0x0F), bits45 = bytes(0x30);
  g[0] = or_masked(_mm256_and_si256(w0, low4), _mm256_slli_epi16(w2, 4), bits45);
  g[1] = or_masked(_mm256_and_si256(w1, low4), _mm256_slli_epi16(w2, 2), bits45);
  g[2] = or_masked(_mm256_and_si256(_mm256_srli_epi16(w0, 4), low4), w2, bits45);
  g[3] = or_masked(_mm256_and_si256(_mm256_srli_epi16(w1, 4), low4), _mm256_srli_epi16(w2, 2), bits45);
  for (__m256i& v : g) v = _mm256_sub_epi8(v, bytes(32));
}

// The scale bytes of 8 rows, sub-blocks 4r..4r+3 in register r: Q3_K's 6-bit scales - 32 as
// signed bytes; Q2_K's packed bytes (scale in the low nibble, min in the high one).
template <TensorType kType>
void low_bit_scale_bytes(const std::byte* chunk, int h, __m256i (&r)[4]) {
  if constexpr (kType == TensorType::kQ3_K) q3_k_scales(chunk, h, r);
  else
    for (int i = 0; i < 4; ++i) r[i] = load_half(chunk + (kQ2ScalesAt + i) * 64, h);
}

// Q3_K (levels q + 4, 0..7) / Q2_K (levels 0..3): per 16-value sub-block 4 registers' pairs in one
// int16 sum (at most 4 * 2 * 7 * 128), times the sub-block's scale; Q3_K's offset of 4 against the
// 16-value sums, Q2_K's mins into imins. Both halves in one token step, one sub-block a step, as
// in sums_q4_k.
template <TensorType kType, int T>
void sums_low_bit(const std::byte* chunk, TokenRecords xb, const SpreadPrefetch& prefetch, __m256i (&isum)[2][T],
                  __m256i (&imins)[2][T]) {
  constexpr bool kThree = kType == TensorType::kQ3_K;
  // (scale, scale) of sub-block sb and half h as an int16 pair per row. Q3_K: the scales of
  // sub-blocks 2k, 2k + 1 as int16 pairs, 4 times against the 16-value sums, taken off here;
  // Q2_K: the mins likewise, into imins.
  __m256i scale[16][2];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m256i bytes_of[4];
    low_bit_scale_bytes<kType>(chunk, h, bytes_of);
#pragma GCC unroll 16
    for (int sb = 0; sb < 16; ++sb)
      scale[sb][h] =
          kThree ? _mm256_srai_epi16(_mm256_shuffle_epi8(bytes_of[sb / 4], int16_pair_pattern<true>(sb % 4, sb % 4)), 8)
                 : _mm256_shuffle_epi8(_mm256_and_si256(bytes_of[sb / 4], bytes(0x0F)),
                                       int16_pair_pattern<false>(sb % 4, sb % 4));
    __m256i pairs[8];
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k)
      pairs[k] =
          kThree ? _mm256_srai_epi16(
                       _mm256_shuffle_epi8(bytes_of[k / 2], int16_pair_pattern<true>(2 * (k % 2), 2 * (k % 2) + 1)), 8)
                 : _mm256_shuffle_epi8(_mm256_and_si256(_mm256_srli_epi16(bytes_of[k / 2], 4), bytes(0x0F)),
                                       int16_pair_pattern<false>(2 * (k % 2), 2 * (k % 2) + 1));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const __m256i products = pair_products(pairs, xb[t]->sum16_pairs);
      if constexpr (kThree) isum[h][t] = _mm256_sub_epi32(isum[h][t], _mm256_slli_epi32(products, 2));
      else imins[h][t] = products;
    }
  }
#pragma GCC unroll 1
  for (int n = 0; n < 2; ++n) {
#pragma GCC unroll 1
    for (int j = 0; j < 4; ++j) {  // columns 128n + 32j..
      prefetch.share(4 * n + j, 8);
#pragma GCC unroll 1
      for (int k = 0; k < 2; ++k) {  // columns 128n + 32j + 16k.., sub-block 8n + 2j + k
        const int sb = 8 * n + 2 * j + k;
        __m256i w[2][4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 4
          for (int v = 0; v < 4; ++v) {
            const int r = 4 * k + v;
            w[h][v] = _mm256_and_si256(shift_bits(load_half(chunk + (8 * n + r) * 64, h), -2 * j), bytes(0x03));
            if constexpr (kThree)  // the hmask bit 4n + j of the value, to bit 2
              w[h][v] =
                  or_masked(w[h][v], shift_bits(load_half(chunk + (kHmaskAt + r) * 64, h), 2 - 4 * n - j), bytes(0x04));
          }
        }
        sixteen_columns(w, scale[sb], xb, 128 * n + 32 * j + 16 * k, isum);
      }
    }
  }
}

// ---- the tiles ---------------------------------------------------------------------------------------

// One panel (16 rows, as two halves of 8) x T tokens, super-block by super-block; per half the
// format's integer sums, then the twin's float step acc += (d * d_x) * sum - (dmin * d_x) * mins
// (Q6_K: dmin and mins zero, as in the twin).
template <TensorType kType, int T>
void tile(const std::byte* panel, const Q8KRecord* x, int blocks, float* y, size_t y_stride, int rows_out) {
  constexpr size_t kChunk = PanelLayout::quant_block_bytes(kType);
  constexpr bool kMins = kType == TensorType::kQ4_K || kType == TensorType::kQ5_K || kType == TensorType::kQ2_K;
  __m256 acc[2][T];
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) acc[h][t] = _mm256_setzero_ps();
  for (int b = 0; b < blocks; ++b) {
    const std::byte* chunk = panel + PanelLayout::chunk_at(kType, b);
    const std::byte* ds = panel + PanelLayout::k_scales_at(kType, b, blocks);
    const SpreadPrefetch prefetch = super_block_prefetch<T, kChunk>(chunk);
    const TokenRecords xb{x + b, static_cast<size_t>(blocks)};
    __m256i isum[2][T], imins[2][T];
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) isum[h][t] = imins[h][t] = _mm256_setzero_si256();
    if constexpr (kType == TensorType::kQ4_K || kType == TensorType::kQ5_K) {
      sums_q4_k<kType, T>(chunk, xb, prefetch, isum, imins);
    } else if constexpr (kType == TensorType::kQ6_K) {
      sums_q6_k<T>(chunk, xb, prefetch, isum);
    } else if constexpr (kType == TensorType::kQ3_K || kType == TensorType::kQ2_K) {
      sums_low_bit<kType, T>(chunk, xb, prefetch, isum, imins);
    } else {
#pragma GCC unroll 1
      for (int h = 0; h < 2; ++h) sums_iq4_xs<T>(chunk, ds + 32, h, xb, prefetch, isum[h]);
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
      const __m256 d = _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(ds + 16 * h)));
      const __m256 dmin = kMins ? _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(ds + 32 + 16 * h)))
                                : _mm256_setzero_ps();
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        const __m256 dx = _mm256_set1_ps(xb[t]->d);
        const __m256 with_sum = _mm256_mul_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[h][t]));
        const __m256 with_mins = _mm256_mul_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(imins[h][t]));
        acc[h][t] = _mm256_add_ps(acc[h][t], _mm256_sub_ps(with_sum, with_mins));
      }
    }
  }
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h)
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) store_rows(y + static_cast<size_t>(t) * y_stride + 8 * h, rows_out - 8 * h, acc[h][t]);
}

// ---- the driver ----------------------------------------------------------------------------------

// Tokens per tile: the weights are unpacked once per super-block for this many.
constexpr int kTileTokens = 8;

template <TensorType kType, int T>
void tile_for(int tokens, const std::byte* panel, const Q8KRecord* x, int blocks, float* y, size_t y_stride,
              int rows_out) {
  if constexpr (T > 1) {
    if (tokens < T) return tile_for<kType, T - 1>(tokens, panel, x, blocks, y, y_stride, rows_out);
  }
  tile<kType, T>(panel, x, blocks, y, y_stride, rows_out);
}

// Panel by panel, every group of tokens over a panel right after the first brought it in.
template <TensorType kType>
void multiply_with(const WeightPanels& w, int p0, int p1, const Activations& acts, float* y, size_t y_stride) {
  const PanelLayout& l = w.layout;
  const int blocks = l.cols / kSuperBlock;
  const auto* x = reinterpret_cast<const Q8KRecord*>(acts.data);
  for (int p = p0; p < p1; ++p) {
    const std::byte* panel = w.base + static_cast<size_t>(p) * l.panel_bytes;
    const int rows_out = std::min(kPanelRows, l.rows - p * kPanelRows);
    for (int t0 = 0; t0 < acts.num_tokens; t0 += kTileTokens) {
      const int tokens = std::min(kTileTokens, acts.num_tokens - t0);
      tile_for<kType, kTileTokens>(tokens, panel, x + static_cast<size_t>(t0) * static_cast<size_t>(blocks), blocks,
                                   y + static_cast<size_t>(t0) * y_stride + static_cast<size_t>(p) * kPanelRows,
                                   y_stride, rows_out);
    }
  }
}

void multiply_panels(const WeightPanels& w, int p0, int p1, const Activations& x, float* y, size_t y_stride) {
  switch (w.layout.type) {
    case TensorType::kQ4_K:
      return multiply_with<TensorType::kQ4_K>(w, p0, p1, x, y, y_stride);
    case TensorType::kQ5_K:
      return multiply_with<TensorType::kQ5_K>(w, p0, p1, x, y, y_stride);
    case TensorType::kIQ4_XS:
      return multiply_with<TensorType::kIQ4_XS>(w, p0, p1, x, y, y_stride);
    case TensorType::kQ3_K:
      return multiply_with<TensorType::kQ3_K>(w, p0, p1, x, y, y_stride);
    case TensorType::kQ2_K:
      return multiply_with<TensorType::kQ2_K>(w, p0, p1, x, y, y_stride);
    default:
      return multiply_with<TensorType::kQ6_K>(w, p0, p1, x, y, y_stride);
  }
}

}  // namespace

const PanelsKernel& avx2_k_quant_panels_kernel() {
  static const PanelsKernel k{prepared_bytes, prepare, multiply_panels};
  return k;
}

}  // namespace pagedkv::quant_detail
