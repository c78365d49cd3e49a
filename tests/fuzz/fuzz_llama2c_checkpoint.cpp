// libFuzzer target: the llama2.c checkpoint reader (model/llama2c_checkpoint.h). The fuzzer's bytes
// are the file. Any input must end in a FormatError naming the problem or in a model whose every
// tensor, as the runner will read it (tensors()), lies inside the mapped file; anything else — a
// crash, another exception, a sanitizer report — is a bug. Built and run by scripts/fuzz.sh.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "pagedkv/core/error.h"
#include "pagedkv/model/format/llama2c_checkpoint.h"

namespace {

using namespace pagedkv;

using pagedkv::fuzz::check;

// The file the reader opens: an anonymous memory file, so no run touches the disk.
class MemoryFile {
 public:
  MemoryFile(const uint8_t* data, size_t size) : fd_(::memfd_create("fuzz-checkpoint", MFD_CLOEXEC)) {
    check(fd_ >= 0);
    for (size_t at = 0; at < size;) {
      const ssize_t n = ::write(fd_, data + at, size - at);
      check(n > 0);
      at += static_cast<size_t>(n);
    }
  }
  ~MemoryFile() { ::close(fd_); }
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }

 private:
  int fd_;
};

void check_inside(const WeightTensor& t, const std::byte* begin, const std::byte* end) {
  if (!t.present()) return;
  const auto* first = static_cast<const std::byte*>(t.data);
  check(t.rows >= 1 && t.cols >= 1 && first >= begin && first < end);
  const size_t bytes = static_cast<size_t>(t.rows) * tensor_row_bytes(t.type, t.cols);
  check(bytes <= static_cast<size_t>(end - first));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const MemoryFile file(data, size);
  try {
    const Llama2cCheckpoint model(file.path());
    // Accepted: exactly the size its header implies, a configuration the runner accepts, and
    // every tensor inside the file (the header occupies its first bytes, so no view starts there).
    check(model.file_bytes() == size && Llama2cCheckpoint::expected_file_bytes(model.config()) == size);
    model.config().validate();
    const auto* mapped = static_cast<const std::byte*>(static_cast<const void*>(model.weights().token_embedding)) -
                         Llama2cCheckpoint::kHeaderBytes;
    const TransformerWeights tensors = model.tensors();
    check(static_cast<int>(tensors.layers.size()) == model.config().n_layers);
    tensors.for_each_tensor(
        [&](const WeightTensor& t) { check_inside(t, mapped + Llama2cCheckpoint::kHeaderBytes, mapped + size); });
  } catch (const FormatError&) {
  }
  return 0;
}
