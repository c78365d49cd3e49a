// make_query_row_codes: the dispatch and the scalar twin (the AVX2 version: query_codes_avx2.cpp).
#include "pagedkv/kernels/query_codes.h"

#include <algorithm>
#include <vector>

#include "pagedkv/storage/key_rotation.h"
#include "pagedkv/storage/kv_quantize.h"
#include "query_codes_simd.h"

namespace pagedkv {
namespace {

// Every element takes the AVX2 version's operations in its order: the scaled row, the rotation
// (hadamard_rotate's passes), the sum in eight interleaved lanes added as a tree, the amax with
// its non-finite test, codes rounded to nearest even and clamped.
QueryRowCodes make_query_row_codes_scalar(const float* query, size_t dim, float softmax_scale, bool rotate,
                                          int16_t* codes) {
  thread_local std::vector<float> row;
  row.resize(dim);
  float* x = row.data();
  for (size_t d = 0; d < dim; ++d) x[d] = query[d] * softmax_scale;
  if (rotate) hadamard_rotate(x, dim);
  QueryRowCodes result;
  float lanes[8] = {};
  for (size_t d = 0; d < dim; ++d) lanes[d % 8] += x[d];
  result.sum = ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
  std::fill(codes + dim, codes + padded_query_dim(dim), int16_t{0});
  const float amax = row_amax(x, dim);  // NaN if the row holds a NaN or an infinity
  if (!(amax > 0)) {
    std::fill(codes, codes + dim, int16_t{0});
    result.scale = amax;
    return result;
  }
  const auto code_max = static_cast<float>(query_code_max(dim));
  const float inverse = code_max / amax;
  for (size_t d = 0; d < dim; ++d)
    codes[d] = static_cast<int16_t>(std::clamp(round_to_even(x[d] * inverse), -code_max, code_max));
  result.scale = amax / code_max;
  return result;
}

}  // namespace

QueryRowCodes make_query_row_codes(const float* query, size_t dim, float softmax_scale, bool rotate, int16_t* codes,
                                   KernelIsa isa) {
  if (has_avx2(resolve_isa(isa)) && dim % 8 == 0 && dim > 0)
    return detail::make_query_row_codes_avx2(query, dim, softmax_scale, rotate, codes);
  return make_query_row_codes_scalar(query, dim, softmax_scale, rotate, codes);
}

}  // namespace pagedkv
