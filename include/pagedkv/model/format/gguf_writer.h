// Builds GGUF files (version 3): metadata key/values and tensors, laid out with the default
// 32-byte alignment. Tests use it to make hand-built (and deliberately broken) files; tools use it
// to write random-weight models of a real model's shape.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/model/format/gguf_file.h"

namespace pagedkv {

class GgufWriter {
 public:
  void set_version(uint32_t v) { version_ = v; }

  void add_u32(std::string_view key, uint32_t v);
  void add_i32(std::string_view key, int32_t v);
  void add_u64(std::string_view key, uint64_t v);
  void add_f32(std::string_view key, float v);
  void add_bool(std::string_view key, bool v);
  void add_string(std::string_view key, std::string_view v);
  void add_string_array(std::string_view key, const std::vector<std::string>& v);
  void add_f32_array(std::string_view key, std::span<const float> v);
  void add_i32_array(std::string_view key, std::span<const int32_t> v);

  // `data` holds the tensor's bytes in `type` (tensor_row_bytes(type, ne[0]) per row); ne[0] innermost.
  void add_tensor(std::string_view name, TensorType type, std::vector<int64_t> ne, std::span<const std::byte> data);
  // Converts f32 values to `type` (F32, F16, BF16, Q8_0 or Q4_0) row by row, then adds them.
  void add_tensor_f32(std::string_view name, TensorType type, std::vector<int64_t> ne, std::span<const float> values);

  // The whole file.
  std::vector<std::byte> bytes() const;
  void write(const std::string& path) const;  // throws Error on I/O failure

  // Byte offsets of the sections in bytes(), for tests that corrupt a particular field.
  struct Layout {
    size_t header_end = 0;  // after magic, version and the two counts
    size_t metadata_end = 0;  // after the last key/value
    size_t tensor_infos_end = 0;
    size_t data_start = 0;
  };
  Layout layout() const;

 private:
  void key(std::string_view k, GgufType t);
  std::vector<std::byte> header_bytes() const;  // everything before the tensor data, padded
  struct Tensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> ne;
    std::vector<std::byte> data;
  };
  uint32_t version_ = 3;
  uint64_t num_kv_ = 0;
  std::vector<std::byte> metadata_;
  std::vector<Tensor> tensors_;
};

}  // namespace pagedkv
