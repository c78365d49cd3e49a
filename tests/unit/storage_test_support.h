// Helpers shared by the storage tests.
#pragma once

#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv::testing {

inline KVCacheSpec kv_spec(DType dtype, int block_size, int kv_heads, int head_dim) {
  KVCacheSpec spec;
  spec.dtype = dtype;
  spec.block_size = block_size;
  spec.num_kv_heads = kv_heads;
  spec.head_dim = head_dim;
  return spec;
}

}  // namespace pagedkv::testing
