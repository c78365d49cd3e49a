#include "pagedkv/storage/thread_scratch.h"

#include <algorithm>
#include <array>
#include <cstdlib>
#include <memory>
#include <new>

namespace pagedkv {
namespace {

struct FreeAligned {
  void operator()(void* p) const { std::free(p); }
};

struct Buffer {
  std::unique_ptr<void, FreeAligned> data;
  size_t bytes = 0;
};

constexpr size_t kAlignment = 64;  // a cache line, and an AVX-512 register

}  // namespace

void* thread_scratch(ScratchBuffer buffer, size_t bytes) {
  thread_local std::array<Buffer, static_cast<size_t>(ScratchBuffer::kCount)> buffers;
  Buffer& b = buffers.at(static_cast<size_t>(buffer));
  if (!b.data || b.bytes < bytes) {
    // aligned_alloc wants a multiple of the alignment, and at least one byte.
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlignment - 1) / kAlignment * kAlignment;
    b.data.reset();  // the old contents are not kept: free first, so peak memory stays one buffer
    b.bytes = 0;
    void* p = std::aligned_alloc(kAlignment, rounded);
    if (!p) throw std::bad_alloc();
    b.data.reset(p);
    b.bytes = rounded;
  }
  return b.data.get();
}

float* thread_scratch_floats(ScratchBuffer buffer, size_t count) {
  return static_cast<float*>(thread_scratch(buffer, count * sizeof(float)));
}

}  // namespace pagedkv
