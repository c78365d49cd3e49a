// A zero-filled heap buffer aligned for O_DIRECT I/O (4096 bytes by default).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <memory>
#include <new>

namespace pagedkv {

class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // Zero-filled unless `zero` is false (staging that is about to be overwritten).
  explicit AlignedBuffer(size_t bytes, size_t alignment = 4096, bool zero = true);
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

}  // namespace pagedkv
