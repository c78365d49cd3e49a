// The AVX-512 instantiation of the SIMD attention kernel (attention_tile_simd.h with
// attention_isa_avx512.h); int8 dot products with vpmaddwd + vpaddd.
// GCC 12 flags the deliberately undefined pass-through operand inside _mm512_cvtph_ps and
// _mm512_extractf64x4_pd as uninitialized (GCC bug 105593, fixed in 13): silence only that.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "attention_isa_avx512.h"
#include "attention_tile_simd.h"

namespace pagedkv::attention_detail {

void attend_rows_avx512(const RowGroupTask& task) { attend_rows<Avx512Isa<false>>(task); }

}  // namespace pagedkv::attention_detail
