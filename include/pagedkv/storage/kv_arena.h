// The physical KV cache: one allocation holding the keys and values of every layer, indexed by
// the block ids that the block manager hands out.
//
// Layout. The arena is one 64-byte-aligned allocation, made once, of
//     [num_layers][2 (K, V)][num_blocks][block_size] slots
// (each K or V plane starts on a 64-byte boundary). A slot holds one token's keys (or values)
// for all KV heads: [num_kv_heads][head_dim] elements of the spec's dtype, row-major, so one
// head's row of head_dim elements is contiguous. The quantized formats, int8 and fp8, follow the
// rows with one f32 scale per head ([num_kv_heads] floats, element = scale * code): a block is
// still block_size whole slots, one self-contained run of bytes that copy-on-write, swap and the
// tiers move without knowing the format. nano-vllm's [2, layers, blocks, block_size, heads,
// dim] tensor is the f32/f16/bf16 case with K/V as the outermost axis.
#pragma once

#include <cstddef>
#include <memory>

#include "pagedkv/core/dtype.h"
#include "pagedkv/core/kv_cache_spec.h"

namespace pagedkv {

// Non-owning view of one layer's K and V pages. Layout of each of K and V:
// [num_blocks][block_size] slots of slot_bytes() bytes (see the layout above).
struct KVLayerView {
  void* key = nullptr;
  void* value = nullptr;
  DType dtype = DType::kF32;  // kF32, kF16, kBF16, kInt8 or kFP8
  int num_blocks = 0, block_size = 0, num_kv_heads = 0, head_dim = 0;

  size_t token_stride_elems() const {  // num_kv_heads * head_dim
    return static_cast<size_t>(num_kv_heads) * static_cast<size_t>(head_dim);
  }
  size_t block_stride_elems() const {  // block_size * token_stride
    return static_cast<size_t>(block_size) * token_stride_elems();
  }
  size_t num_slots() const { return static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size); }
  size_t element_bytes() const { return dtype_bytes(dtype, 1); }
  // Bytes of one token's rows (all heads); for int8/fp8 the per-head scales follow them.
  size_t rows_bytes() const { return dtype_bytes(dtype, token_stride_elems()); }
  size_t slot_bytes() const {
    return rows_bytes() + (dtype_has_row_scale(dtype) ? static_cast<size_t>(num_kv_heads) * kKVScaleBytes : 0);
  }
  size_t block_bytes() const { return static_cast<size_t>(block_size) * slot_bytes(); }
};

// True for the element types the arena and kernels store: f32, f16, bf16, int8 and fp8.
bool is_storage_dtype(DType t);

// One allocation (64-byte aligned, allocated once) holding K and V for every layer.
class KVArena {
 public:
  // Allocates and zero-fills (touching every page now, not during the first step).
  // Throws ConfigError for an invalid spec, a dtype that is not a storage dtype (int4), or a
  // non-positive layer or block count.
  KVArena(const KVCacheSpec& spec, int num_layers, int num_blocks);

  KVLayerView layer(int l) const;  // throws UsageError for a layer out of range
  int num_layers() const { return num_layers_; }
  int num_blocks() const { return num_blocks_; }
  const KVCacheSpec& spec() const { return spec_; }

  size_t bytes() const { return bytes_; }
  size_t bytes_per_block() const;  // all layers, K and V
  void* data() { return data_.get(); }
  const void* data() const { return data_.get(); }

  // Tests: poison every slot with NaN, so a kernel that reads an unmapped slot fails loudly
  // (int8/fp8: every byte 0xFF, so each scale is a NaN).
  void fill_nan();

 private:
  struct FreeAligned {
    void operator()(std::byte* p) const;
  };
  KVCacheSpec spec_;
  int num_layers_ = 0;
  int num_blocks_ = 0;
  size_t plane_bytes_ = 0;  // one layer's K (or V): num_blocks pages
  size_t plane_stride_bytes_ = 0;  // plane_bytes_ rounded up to 64
  size_t bytes_ = 0;
  std::unique_ptr<std::byte, FreeAligned> data_;
};

}  // namespace pagedkv
