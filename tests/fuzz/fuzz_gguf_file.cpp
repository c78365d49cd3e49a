// libFuzzer target: the GGUF reader (header, metadata of every type, tensor infos, alignment,
// tensor data bounds). Any input must end in a parsed file whose tensors lie inside its bytes,
// or a FormatError; anything else — another exception, a crash, a sanitizer report (an
// out-of-bounds read of the mapped bytes included) — is a bug. Seeds: a small v3 file of every
// value type in tests/fuzz/corpus/gguf_file, plus the heads of ../shared's GGUF models (fuzz.sh).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/model/format/gguf_file.h"

namespace {

using pagedkv::fuzz::check;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A copy of exactly `size` bytes: ASan flags any read past the end.
  const std::vector<std::byte> bytes(reinterpret_cast<const std::byte*>(data),
                                     reinterpret_cast<const std::byte*>(data) + size);
  try {
    const pagedkv::GgufFile file(std::span<const std::byte>(bytes), "fuzz");
    check(file.version() == 2 || file.version() == 3);
    check(file.alignment() > 0);
    const std::byte* begin = bytes.data();
    const std::byte* end = begin + bytes.size();
    for (const pagedkv::GgufTensor& t : file.tensors()) {
      check(!t.ne.empty());
      check(t.data >= begin && t.data <= end && t.bytes <= static_cast<size_t>(end - t.data));
      check(file.find_tensor(t.name) == &t);
    }
    for (const auto& [key, value] : file.metadata()) check(file.find(key) == &value);
  } catch (const pagedkv::FormatError&) {
  }
  return 0;
}
