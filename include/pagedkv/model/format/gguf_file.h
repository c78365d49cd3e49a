// A GGUF file (llama.cpp's model format, versions 2 and 3), memory-mapped and validated.
//
// Layout (little-endian):
//   "GGUF" magic, uint32 version, uint64 tensor_count, uint64 metadata_kv_count;
//   metadata_kv_count key/values: string key, uint32 value type, value;
//   tensor_count tensor infos: string name, uint32 n_dims (1..4), uint64 ne[n_dims] (ne[0] is the
//     innermost, contiguous axis), uint32 ggml type, uint64 offset into the data section;
//   padding to `general.alignment` (default 32); the data section.
// A string is uint64 length + bytes; an array is uint32 element type + uint64 count + elements.
//
// Opening checks everything before anything is used: every read against the bytes that remain,
// counts against what the remaining bytes could hold (no allocation is sized by an unchecked
// count), value and tensor types, duplicate keys and names, dims and their products, row sizes
// against block sizes, offsets (aligned, inside the data section, not overlapping). A malformed or
// truncated file throws FormatError naming the file, the section and the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/model/format/tensor_type.h"

namespace pagedkv {

enum class GgufType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
const char* gguf_type_name(GgufType t);

// One metadata value. Scalars are held converted (integers as int64/uint64, floats as double);
// arrays keep a view of their elements in the file: numbers are read on access, strings are views.
class GgufValue {
 public:
  GgufType type() const { return type_; }
  GgufType element_type() const { return element_type_; }  // arrays only

  bool is_integer() const;  // any of the eight integer types
  bool is_float() const { return type_ == GgufType::kF32 || type_ == GgufType::kF64; }
  // Each throws FormatError naming `key` if the value is not of a fitting type or out of range.
  int64_t as_int(std::string_view key) const;
  double as_float(std::string_view key) const;  // float or integer
  bool as_bool(std::string_view key) const;
  std::string_view as_string(std::string_view key) const;

  // Arrays.
  uint64_t size() const { return count_; }
  std::span<const std::string_view> strings(std::string_view key) const;  // a string array
  // Element i of a numeric array, converted; throws FormatError for a non-numeric array.
  double number_at(uint64_t i) const;
  int64_t int_at(uint64_t i) const;

 private:
  friend class GgufFile;
  GgufType type_ = GgufType::kU8;
  GgufType element_type_ = GgufType::kU8;
  int64_t i_ = 0;
  uint64_t u_ = 0;
  double f_ = 0;
  std::string_view s_;
  uint64_t count_ = 0;
  const std::byte* elements_ = nullptr;  // numeric array elements, unaligned
  std::vector<std::string_view> strings_;
};

struct GgufTensor {
  std::string name;
  TensorType type = TensorType::kF32;
  std::vector<int64_t> ne;  // ne[0] innermost (a weight matrix is ne = {in, out})
  uint64_t offset = 0;  // in the data section
  size_t bytes = 0;
  const std::byte* data = nullptr;

  int64_t elements() const;
  int64_t rows() const { return elements() / ne[0]; }  // all axes but the first
};

class GgufFile {
 public:
  static constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
  static constexpr uint32_t kDefaultAlignment = 32;

  // Maps `path` read-only and parses it. Throws Error if it cannot be opened, FormatError if it is
  // not a valid GGUF file.
  explicit GgufFile(const std::string& path);
  // Parses bytes already in memory (which must outlive this object); `name` is used in messages.
  GgufFile(std::span<const std::byte> bytes, std::string name);
  ~GgufFile();
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;

  // True if `path` starts with the GGUF magic (false if unreadable or shorter).
  static bool has_gguf_magic(const std::string& path);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint32_t alignment() const { return alignment_; }
  std::span<const std::byte> bytes() const { return bytes_; }

  const std::map<std::string, GgufValue, std::less<>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;  // nullptr if absent
  // Typed access; `fallback` versions return it when the key is absent. Wrong types throw FormatError.
  const GgufValue& at(std::string_view key) const;  // throws FormatError if absent
  int64_t get_int(std::string_view key) const { return at(key).as_int(key); }
  int64_t get_int(std::string_view key, int64_t fallback) const;
  double get_float(std::string_view key, double fallback) const;
  bool get_bool(std::string_view key, bool fallback) const;
  std::string get_string(std::string_view key) const { return std::string(at(key).as_string(key)); }

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;  // nullptr if absent

 private:
  void parse();

  std::string name_;
  std::span<const std::byte> bytes_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  uint32_t version_ = 0;
  uint32_t alignment_ = kDefaultAlignment;
  std::map<std::string, GgufValue, std::less<>> metadata_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace pagedkv
