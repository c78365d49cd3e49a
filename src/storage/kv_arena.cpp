#include "pagedkv/storage/kv_arena.h"

#include <fmt/format.h>
#include <sys/mman.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

constexpr size_t kPlaneAlignment = 64;  // a cache line: every K/V plane starts on one
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kHugePageThreshold = size_t{8} << 20;  // big arenas: align to and ask for 2 MiB pages

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

template <typename Bits>
void fill_pattern(void* p, size_t bytes, Bits pattern) {
  auto* out = static_cast<Bits*>(p);
  const size_t n = bytes / sizeof(Bits);
  for (size_t i = 0; i < n; ++i) out[i] = pattern;
}

}  // namespace

bool is_storage_dtype(DType t) {
  return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16 || t == DType::kInt8 || t == DType::kFP8;
}

void KVArena::FreeAligned::operator()(std::byte* p) const { std::free(p); }

KVArena::KVArena(const KVCacheSpec& spec, int num_layers, int num_blocks)
    : spec_(spec), num_layers_(num_layers), num_blocks_(num_blocks) {
  spec.validate();
  if (!is_storage_dtype(spec.dtype))
    throw ConfigError(
        fmt::format("KV arena dtype must be fp32, fp16, bf16, int8 or fp8, got {}", dtype_name(spec.dtype)));
  if (num_layers <= 0) throw ConfigError(fmt::format("KV arena num_layers must be positive, got {}", num_layers));
  if (num_blocks <= 0) throw ConfigError(fmt::format("KV arena num_blocks must be positive, got {}", num_blocks));

  plane_bytes_ = static_cast<size_t>(num_blocks) * spec.bytes_per_block_per_layer() / 2;
  plane_stride_bytes_ = round_up(plane_bytes_, kPlaneAlignment);
  const size_t payload = plane_stride_bytes_ * 2 * static_cast<size_t>(num_layers);
  const size_t alignment = payload >= kHugePageThreshold ? kHugePage : kPlaneAlignment;
  bytes_ = round_up(payload, alignment);  // aligned_alloc wants a multiple of the alignment
  void* p = std::aligned_alloc(alignment, bytes_);
  if (p == nullptr)
    throw ConfigError(fmt::format("cannot allocate a {:.1f} MiB KV arena ({} layers x {} blocks)",
                                  static_cast<double>(bytes_) / (1 << 20), num_layers, num_blocks));
  data_.reset(static_cast<std::byte*>(p));
  // Paged attention reads pages scattered over the whole arena: huge pages save TLB misses.
  // Advisory only; the kernel may decline.
  if (alignment == kHugePage) (void)madvise(p, bytes_, MADV_HUGEPAGE);
  std::memset(p, 0, bytes_);  // touch every page now rather than during the first step
}

KVLayerView KVArena::layer(int l) const {
  if (l < 0 || l >= num_layers_)
    throw UsageError(fmt::format("layer {} out of range: the KV arena has {} layers", l, num_layers_));
  std::byte* base = data_.get() + static_cast<size_t>(l) * 2 * plane_stride_bytes_;
  KVLayerView view;
  view.key = base;
  view.value = base + plane_stride_bytes_;
  view.dtype = spec_.dtype;
  view.num_blocks = num_blocks_;
  view.block_size = spec_.block_size;
  view.num_kv_heads = spec_.num_kv_heads;
  view.head_dim = spec_.head_dim;
  return view;
}

size_t KVArena::bytes_per_block() const { return spec_.bytes_per_block_per_layer() * static_cast<size_t>(num_layers_); }

void KVArena::fill_nan() {
  switch (spec_.dtype) {
    case DType::kF32:
      fill_pattern<uint32_t>(data_.get(), bytes_, 0x7FC00000u);
      break;
    case DType::kF16:
      fill_pattern<uint16_t>(data_.get(), bytes_, uint16_t{0x7E00});
      break;
    case DType::kBF16:
      fill_pattern<uint16_t>(data_.get(), bytes_, uint16_t{0x7FC0});
      break;
    case DType::kInt8:
    case DType::kFP8:
      std::memset(data_.get(), 0xFF, bytes_);
      break;  // every scale a NaN
    default:
      break;  // unreachable: the constructor accepts only storage types
  }
}

}  // namespace pagedkv
