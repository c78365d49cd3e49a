// The AVX-512 attention kernel's int8 path with AVX512-VNNI (vpdpwssd, vpdpbusd): built with -mavx512vnni,
// entered only when has_avx512_vnni().
// GCC 12 false positives inside the AVX-512 intrinsics (GCC bug 105593): see attention_tile_avx512.cpp.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "attention_isa_avx512.h"
#include "attention_tile_simd.h"

#ifndef __AVX512VNNI__
#error "attention_tile_vnni_avx512.cpp must be built with -mavx512vnni"
#endif

namespace pagedkv::attention_detail {

void attend_rows_avx512_vnni(const RowGroupTask& task) { attend_rows_int8<Avx512Isa<true>>(task); }

}  // namespace pagedkv::attention_detail
