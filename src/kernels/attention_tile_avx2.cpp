// The AVX2+FMA+F16C instantiation of the SIMD attention kernel (attention_tile_simd.h with
// attention_isa_avx2.h); int8 dot products with vpmaddwd + vpaddd.
#include "attention_isa_avx2.h"
#include "attention_tile_simd.h"

namespace pagedkv::attention_detail {

void attend_rows_avx2(const RowGroupTask& task) { attend_rows<Avx2Isa<false>>(task); }

}  // namespace pagedkv::attention_detail
