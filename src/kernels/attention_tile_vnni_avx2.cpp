// The AVX2 attention kernel's int8 path with AVX-VNNI (vpdpwssd and vpdpbusd, VEX-encoded): built with
// -mavxvnni, entered only when has_avx_vnni().
#include "attention_isa_avx2.h"
#include "attention_tile_simd.h"

#ifndef __AVXVNNI__
#error "attention_tile_vnni_avx2.cpp must be built with -mavxvnni"
#endif

namespace pagedkv::attention_detail {

void attend_rows_avx2_vnni(const RowGroupTask& task) { attend_rows_int8<Avx2Isa<true>>(task); }

}  // namespace pagedkv::attention_detail
