// Private to query_codes*.cpp: the AVX2 version's entry (query_codes_avx2.cpp), called by
// make_query_row_codes (query_codes.cpp) when the CPU has AVX2 and dim % 8 == 0.
#pragma once

#include "pagedkv/kernels/query_codes.h"

namespace pagedkv::detail {

QueryRowCodes make_query_row_codes_avx2(const float* query, size_t dim, float softmax_scale, bool rotate,
                                        int16_t* codes);

}  // namespace pagedkv::detail
