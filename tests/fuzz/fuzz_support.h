// What the fuzz targets share: a property check that crashes (so libFuzzer keeps the input), and
// a reader that turns the fuzzer's bytes into values front to back.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace pagedkv::fuzz {

// A violated property is a crash like any other: libFuzzer saves the input that caused it.
inline void check(bool ok) {
  if (!ok) std::abort();
}

// The fuzzer's bytes read front to back; zeros once they run out.
struct ByteReader {
  const uint8_t* data;
  size_t size;
  size_t at = 0;

  bool empty() const { return at >= size; }
  uint8_t next() { return at < size ? data[at++] : 0; }
  template <typename T>
  T take() {
    T v{};
    const size_t n = std::min(sizeof(T), size - std::min(at, size));
    if (n) std::memcpy(&v, data + at, n);
    at += sizeof(T);
    return v;
  }
};

}  // namespace pagedkv::fuzz
