#include "pagedkv/model/format/gguf_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv {

namespace {

constexpr uint32_t kMaxDims = 4;  // ggml's GGML_MAX_DIMS
constexpr uint64_t kMaxStringBytes = 1u << 30;

bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kU16:
    case GgufType::kI16:
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kU64:
    case GgufType::kI64:
      return true;
    default:
      return false;
  }
}

// Bytes of one scalar of type t; 0 for strings and arrays.
size_t scalar_bytes(GgufType t) {
  switch (t) {
    case GgufType::kU8:
    case GgufType::kI8:
    case GgufType::kBool:
      return 1;
    case GgufType::kU16:
    case GgufType::kI16:
      return 2;
    case GgufType::kU32:
    case GgufType::kI32:
    case GgufType::kF32:
      return 4;
    case GgufType::kU64:
    case GgufType::kI64:
    case GgufType::kF64:
      return 8;
    default:
      return 0;
  }
}

bool known_type(uint32_t raw) { return raw <= static_cast<uint32_t>(GgufType::kF64); }

template <typename T>
T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Reads scalar of type t at p as (signed, unsigned, float) views.
struct Number {
  int64_t i = 0;
  uint64_t u = 0;
  double f = 0;
  bool negative = false;
};
Number read_number(GgufType t, const std::byte* p) {
  Number n;
  auto set_signed = [&](int64_t v) {
    n.i = v;
    n.u = static_cast<uint64_t>(v);
    n.f = static_cast<double>(v);
    n.negative = v < 0;
  };
  auto set_unsigned = [&](uint64_t v) {
    n.u = v;
    n.i = static_cast<int64_t>(v);
    n.f = static_cast<double>(v);
  };
  switch (t) {
    case GgufType::kU8:
      set_unsigned(load<uint8_t>(p));
      break;
    case GgufType::kI8:
      set_signed(load<int8_t>(p));
      break;
    case GgufType::kU16:
      set_unsigned(load<uint16_t>(p));
      break;
    case GgufType::kI16:
      set_signed(load<int16_t>(p));
      break;
    case GgufType::kU32:
      set_unsigned(load<uint32_t>(p));
      break;
    case GgufType::kI32:
      set_signed(load<int32_t>(p));
      break;
    case GgufType::kU64:
      set_unsigned(load<uint64_t>(p));
      break;
    case GgufType::kI64:
      set_signed(load<int64_t>(p));
      break;
    case GgufType::kBool:
      set_unsigned(load<uint8_t>(p));
      break;
    case GgufType::kF32:
      n.f = static_cast<double>(load<float>(p));
      break;
    case GgufType::kF64:
      n.f = load<double>(p);
      break;
    default:
      break;
  }
  return n;
}

// A bounds-checked cursor over the file; every failure names the section being read.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  size_t pos() const { return pos_; }
  size_t remaining() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError(fmt::format("GGUF file '{}': {} (at byte {})", name_, what, pos_));
  }
  const std::byte* take(uint64_t n, std::string_view what) {
    if (n > remaining())
      fail(fmt::format("truncated: {} needs {} bytes, {} remain of {}", what, n, remaining(), bytes_.size()));
    const std::byte* p = bytes_.data() + pos_;
    pos_ += static_cast<size_t>(n);
    return p;
  }
  template <typename T>
  T read(std::string_view what) {
    return load<T>(take(sizeof(T), what));
  }
  std::string_view read_string(std::string_view what) {
    const auto len = read<uint64_t>(what);
    if (len > kMaxStringBytes) fail(fmt::format("{} claims a string of {} bytes", what, len));
    const std::byte* p = take(len, what);
    return {reinterpret_cast<const char*>(p), static_cast<size_t>(len)};
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& name_;
  size_t pos_ = 0;
};

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kU8:
      return "uint8";
    case GgufType::kI8:
      return "int8";
    case GgufType::kU16:
      return "uint16";
    case GgufType::kI16:
      return "int16";
    case GgufType::kU32:
      return "uint32";
    case GgufType::kI32:
      return "int32";
    case GgufType::kF32:
      return "float32";
    case GgufType::kBool:
      return "bool";
    case GgufType::kString:
      return "string";
    case GgufType::kArray:
      return "array";
    case GgufType::kU64:
      return "uint64";
    case GgufType::kI64:
      return "int64";
    case GgufType::kF64:
      return "float64";
  }
  return "unknown";
}

// ---- GgufValue ----------------------------------------------------------------------------------

bool GgufValue::is_integer() const { return is_integer_type(type_); }

int64_t GgufValue::as_int(std::string_view key) const {
  if (!is_integer())
    throw FormatError(fmt::format("GGUF key '{}' is a {}, expected an integer", key, gguf_type_name(type_)));
  if (type_ == GgufType::kU64 && u_ > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    throw FormatError(fmt::format("GGUF key '{}' = {} is out of range", key, u_));
  return i_;
}

double GgufValue::as_float(std::string_view key) const {
  if (!is_float() && !is_integer())
    throw FormatError(fmt::format("GGUF key '{}' is a {}, expected a number", key, gguf_type_name(type_)));
  return f_;
}

bool GgufValue::as_bool(std::string_view key) const {
  if (type_ != GgufType::kBool)
    throw FormatError(fmt::format("GGUF key '{}' is a {}, expected a bool", key, gguf_type_name(type_)));
  return u_ != 0;
}

std::string_view GgufValue::as_string(std::string_view key) const {
  if (type_ != GgufType::kString)
    throw FormatError(fmt::format("GGUF key '{}' is a {}, expected a string", key, gguf_type_name(type_)));
  return s_;
}

std::span<const std::string_view> GgufValue::strings(std::string_view key) const {
  if (type_ != GgufType::kArray || element_type_ != GgufType::kString)
    throw FormatError(fmt::format("GGUF key '{}' is not an array of strings", key));
  return strings_;
}

double GgufValue::number_at(uint64_t i) const {
  if (type_ != GgufType::kArray || scalar_bytes(element_type_) == 0)
    throw FormatError("GGUF value is not a numeric array");
  if (i >= count_) throw UsageError(fmt::format("GGUF array index {} out of range ({} elements)", i, count_));
  return read_number(element_type_, elements_ + i * scalar_bytes(element_type_)).f;
}

int64_t GgufValue::int_at(uint64_t i) const {
  if (type_ != GgufType::kArray || !is_integer_type(element_type_))
    throw FormatError("GGUF value is not an integer array");
  if (i >= count_) throw UsageError(fmt::format("GGUF array index {} out of range ({} elements)", i, count_));
  return read_number(element_type_, elements_ + i * scalar_bytes(element_type_)).i;
}

// ---- GgufTensor ---------------------------------------------------------------------------------

int64_t GgufTensor::elements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // checked against overflow when the file was opened
  return n;
}

// ---- GgufFile -----------------------------------------------------------------------------------

GgufFile::GgufFile(const std::string& path) : name_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot open GGUF file '{}': {}", path, std::strerror(errno)));
  struct CloseFd {
    int fd;
    ~CloseFd() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(fmt::format("cannot stat GGUF file '{}': {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(fmt::format("GGUF file '{}' is not a regular file", path));
  const auto size = static_cast<size_t>(st.st_size);
  if (size == 0) throw FormatError(fmt::format("GGUF file '{}' is empty", path));
  void* m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) throw Error(fmt::format("cannot map GGUF file '{}': {}", path, std::strerror(errno)));
  mapping_ = m;
  mapping_bytes_ = size;
  bytes_ = {static_cast<const std::byte*>(m), size};
  try {
    parse();
  } catch (...) {
    ::munmap(mapping_, mapping_bytes_);
    throw;
  }
}

GgufFile::GgufFile(std::span<const std::byte> bytes, std::string name) : name_(std::move(name)), bytes_(bytes) {
  parse();
}

GgufFile::~GgufFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
}

bool GgufFile::has_gguf_magic(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  uint32_t magic = 0;
  const ssize_t n = ::read(fd, &magic, sizeof magic);
  ::close(fd);
  return n == sizeof magic && magic == kMagic;
}

void GgufFile::parse() {
  Cursor in(bytes_, name_);
  if (in.read<uint32_t>("the magic") != kMagic) in.fail("not a GGUF file (the magic is not \"GGUF\")");
  version_ = in.read<uint32_t>("the version");
  if (version_ == 1) in.fail("GGUF version 1 is not supported (only 2 and 3)");
  if (version_ != 2 && version_ != 3) {
    const bool swapped =
        (version_ & 0xFFFFu) == 0 && (__builtin_bswap32(version_) == 2 || __builtin_bswap32(version_) == 3);
    in.fail(fmt::format("unsupported GGUF version {}{}", version_, swapped ? " (a big-endian file?)" : ""));
  }
  const auto n_tensors = in.read<uint64_t>("the tensor count");
  const auto n_kv = in.read<uint64_t>("the metadata count");
  // A key/value takes at least 8 (key length) + 4 (type) + 1 bytes; a tensor info at least
  // 8 + 4 + 8 + 4 + 8. Counts the rest of the file could not hold are rejected before anything
  // is sized by them.
  if (n_kv > in.remaining() / 13)
    in.fail(fmt::format("metadata count {} cannot fit in the {} remaining bytes", n_kv, in.remaining()));
  if (n_tensors > in.remaining() / 32)
    in.fail(fmt::format("tensor count {} cannot fit in the {} remaining bytes", n_tensors, in.remaining()));

  for (uint64_t k = 0; k < n_kv; ++k) {
    const std::string what = fmt::format("metadata key {}", k);
    const std::string_view key = in.read_string(what);
    if (key.empty()) in.fail(fmt::format("{} has an empty name", what));
    const std::string where = fmt::format("metadata '{}'", key);
    GgufValue v;
    const auto raw = in.read<uint32_t>(where + " type");
    if (!known_type(raw)) in.fail(fmt::format("{} has unknown value type {}", where, raw));
    v.type_ = static_cast<GgufType>(raw);
    if (v.type_ == GgufType::kString) {
      v.s_ = in.read_string(where);
    } else if (v.type_ == GgufType::kArray) {
      const auto raw_elem = in.read<uint32_t>(where + " element type");
      if (!known_type(raw_elem)) in.fail(fmt::format("{} is an array of unknown type {}", where, raw_elem));
      v.element_type_ = static_cast<GgufType>(raw_elem);
      if (v.element_type_ == GgufType::kArray) in.fail(fmt::format("{} is an array of arrays (not supported)", where));
      v.count_ = in.read<uint64_t>(where + " element count");
      if (v.element_type_ == GgufType::kString) {
        if (v.count_ > in.remaining() / 8)
          in.fail(fmt::format("{} claims {} strings, more than the {} remaining bytes can hold", where, v.count_,
                              in.remaining()));
        v.strings_.reserve(static_cast<size_t>(v.count_));
        for (uint64_t i = 0; i < v.count_; ++i) v.strings_.push_back(in.read_string(where));
      } else {
        const size_t eb = scalar_bytes(v.element_type_);
        if (v.count_ > in.remaining() / eb)
          in.fail(fmt::format("{} claims {} elements of {} bytes, only {} bytes remain", where, v.count_, eb,
                              in.remaining()));
        v.elements_ = in.take(v.count_ * eb, where);
      }
    } else {
      const Number n = read_number(v.type_, in.take(scalar_bytes(v.type_), where));
      v.i_ = n.i;
      v.u_ = n.u;
      v.f_ = n.f;
    }
    if (!metadata_.emplace(std::string(key), std::move(v)).second)
      in.fail(fmt::format("metadata key '{}' appears twice", key));
  }

  if (const GgufValue* a = find("general.alignment")) {
    if (a->type() != GgufType::kU32)
      in.fail(fmt::format("general.alignment is a {}, expected uint32", gguf_type_name(a->type())));
    const auto al = static_cast<uint32_t>(a->i_);
    if (al == 0 || (al & (al - 1)) != 0) in.fail(fmt::format("general.alignment {} is not a power of two", al));
    alignment_ = al;
  }

  tensors_.reserve(static_cast<size_t>(n_tensors));
  for (uint64_t t = 0; t < n_tensors; ++t) {
    GgufTensor info;
    info.name = std::string(in.read_string(fmt::format("tensor info {} name", t)));
    const std::string where = fmt::format("tensor '{}'", info.name);
    const auto n_dims = in.read<uint32_t>(where + " dimension count");
    if (n_dims == 0 || n_dims > kMaxDims)
      in.fail(fmt::format("{} has {} dimensions (1..{} allowed)", where, n_dims, kMaxDims));
    int64_t elements = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      const auto ne = in.read<uint64_t>(where + " dimensions");
      if (ne == 0 || ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        in.fail(fmt::format("{} has dimension {} = {}", where, d, ne));
      if (__builtin_mul_overflow(elements, static_cast<int64_t>(ne), &elements))
        in.fail(fmt::format("{} has more than 2^63 elements", where));
      info.ne.push_back(static_cast<int64_t>(ne));
    }
    const auto raw_type = in.read<uint32_t>(where + " type");
    const auto traits = tensor_type_traits(raw_type);
    if (!traits) in.fail(fmt::format("{} has unknown tensor type {}", where, raw_type));
    info.type = static_cast<TensorType>(raw_type);
    if (info.ne[0] % traits->block_elements != 0)
      in.fail(fmt::format("{} ({}) has rows of {} values, not a multiple of its block size {}", where, traits->name,
                          info.ne[0], traits->block_elements));
    const uint64_t blocks = static_cast<uint64_t>(elements) / static_cast<uint64_t>(traits->block_elements);
    uint64_t bytes = 0;
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(traits->block_bytes), &bytes) || bytes > SIZE_MAX)
      in.fail(fmt::format("{} is too large", where));
    info.bytes = static_cast<size_t>(bytes);
    info.offset = in.read<uint64_t>(where + " offset");
    if (info.offset % alignment_ != 0)
      in.fail(fmt::format("{} has offset {}, not a multiple of the alignment {}", where, info.offset, alignment_));
    if (!tensor_index_.emplace(info.name, tensors_.size()).second)
      in.fail(fmt::format("tensor name '{}' appears twice", info.name));
    tensors_.push_back(std::move(info));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t data_start = (static_cast<uint64_t>(in.pos()) + alignment_ - 1) / alignment_ * alignment_;
  if (!tensors_.empty() && data_start > bytes_.size())
    in.fail(fmt::format("truncated: the data section would start at byte {}, past the end of the file ({} bytes)",
                        data_start, bytes_.size()));
  const uint64_t data_bytes = tensors_.empty() ? 0 : bytes_.size() - data_start;
  std::vector<const GgufTensor*> by_offset;
  for (GgufTensor& info : tensors_) {
    if (info.offset > data_bytes || info.bytes > data_bytes - info.offset)
      throw FormatError(fmt::format(
          "GGUF file '{}': tensor '{}' ({} bytes at data offset {}) runs past the end of the data section ({} bytes; "
          "file truncated?)",
          name_, info.name, info.bytes, info.offset, data_bytes));
    info.data = bytes_.data() + data_start + info.offset;
    by_offset.push_back(&info);
  }
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i - 1]->offset + by_offset[i - 1]->bytes > by_offset[i]->offset)
      throw FormatError(fmt::format("GGUF file '{}': tensors '{}' and '{}' overlap", name_, by_offset[i - 1]->name,
                                    by_offset[i]->name));
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? nullptr : &it->second;
}

const GgufValue& GgufFile::at(std::string_view key) const {
  const GgufValue* v = find(key);
  if (v == nullptr) throw FormatError(fmt::format("GGUF file '{}' lacks the metadata key '{}'", name_, key));
  return *v;
}

int64_t GgufFile::get_int(std::string_view key, int64_t fallback) const {
  const GgufValue* v = find(key);
  return v ? v->as_int(key) : fallback;
}

double GgufFile::get_float(std::string_view key, double fallback) const {
  const GgufValue* v = find(key);
  return v ? v->as_float(key) : fallback;
}

bool GgufFile::get_bool(std::string_view key, bool fallback) const {
  const GgufValue* v = find(key);
  return v ? v->as_bool(key) : fallback;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

}  // namespace pagedkv
