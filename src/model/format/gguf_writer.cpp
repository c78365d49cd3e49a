#include "pagedkv/model/format/gguf_writer.h"

#include <cstring>
#include <fstream>

#include <fmt/format.h>

#include "pagedkv/core/error.h"
#include "pagedkv/model/format/weight_quantizers.h"
#include "pagedkv/storage/float_convert.h"

namespace pagedkv {

namespace {

template <typename T>
void put(std::vector<std::byte>& out, T v) {
  const size_t at = out.size();
  out.resize(at + sizeof v);
  std::memcpy(out.data() + at, &v, sizeof v);
}

void put_string(std::vector<std::byte>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  out.insert(out.end(), p, p + s.size());
}

size_t align_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

}  // namespace

void GgufWriter::key(std::string_view k, GgufType t) {
  put_string(metadata_, k);
  put<uint32_t>(metadata_, static_cast<uint32_t>(t));
  ++num_kv_;
}

void GgufWriter::add_u32(std::string_view k, uint32_t v) {
  key(k, GgufType::kU32);
  put(metadata_, v);
}
void GgufWriter::add_i32(std::string_view k, int32_t v) {
  key(k, GgufType::kI32);
  put(metadata_, v);
}
void GgufWriter::add_u64(std::string_view k, uint64_t v) {
  key(k, GgufType::kU64);
  put(metadata_, v);
}
void GgufWriter::add_f32(std::string_view k, float v) {
  key(k, GgufType::kF32);
  put(metadata_, v);
}
void GgufWriter::add_bool(std::string_view k, bool v) {
  key(k, GgufType::kBool);
  put<uint8_t>(metadata_, v ? 1 : 0);
}
void GgufWriter::add_string(std::string_view k, std::string_view v) {
  key(k, GgufType::kString);
  put_string(metadata_, v);
}

void GgufWriter::add_string_array(std::string_view k, const std::vector<std::string>& v) {
  key(k, GgufType::kArray);
  put<uint32_t>(metadata_, static_cast<uint32_t>(GgufType::kString));
  put<uint64_t>(metadata_, v.size());
  for (const std::string& s : v) put_string(metadata_, s);
}

void GgufWriter::add_f32_array(std::string_view k, std::span<const float> v) {
  key(k, GgufType::kArray);
  put<uint32_t>(metadata_, static_cast<uint32_t>(GgufType::kF32));
  put<uint64_t>(metadata_, v.size());
  for (float f : v) put(metadata_, f);
}

void GgufWriter::add_i32_array(std::string_view k, std::span<const int32_t> v) {
  key(k, GgufType::kArray);
  put<uint32_t>(metadata_, static_cast<uint32_t>(GgufType::kI32));
  put<uint64_t>(metadata_, v.size());
  for (int32_t i : v) put(metadata_, i);
}

void GgufWriter::add_tensor(std::string_view name, TensorType type, std::vector<int64_t> ne,
                            std::span<const std::byte> data) {
  tensors_.push_back(Tensor{std::string(name), type, std::move(ne), {data.begin(), data.end()}});
}

void GgufWriter::add_tensor_f32(std::string_view name, TensorType type, std::vector<int64_t> ne,
                                std::span<const float> values) {
  if (ne.empty() || ne[0] <= 0) throw UsageError("add_tensor_f32: bad dimensions");
  const size_t cols = static_cast<size_t>(ne[0]);
  if (values.size() % cols != 0) throw UsageError("add_tensor_f32: values are not whole rows");
  const size_t rows = values.size() / cols;
  const size_t row_bytes = tensor_row_bytes(type, ne[0]);
  std::vector<std::byte> data(rows * row_bytes);
  for (size_t r = 0; r < rows; ++r) {
    const std::span<const float> x = values.subspan(r * cols, cols);
    std::byte* dst = data.data() + r * row_bytes;
    switch (type) {
      case TensorType::kF32:
        std::memcpy(dst, x.data(), row_bytes);
        break;
      case TensorType::kF16:
        for (size_t j = 0; j < cols; ++j) {
          const uint16_t h = f32_to_f16(x[j]);
          std::memcpy(dst + 2 * j, &h, 2);
        }
        break;
      case TensorType::kBF16:
        for (size_t j = 0; j < cols; ++j) {
          const uint16_t h = f32_to_bf16(x[j]);
          std::memcpy(dst + 2 * j, &h, 2);
        }
        break;
      case TensorType::kQ8_0:
        quantize_row_q8_0(x, reinterpret_cast<BlockQ8_0*>(dst));
        break;
      case TensorType::kQ4_0:
        quantize_row_q4_0(x, reinterpret_cast<BlockQ4_0*>(dst));
        break;
      default:
        if (!can_quantize_weights(type))
          throw UsageError(fmt::format("add_tensor_f32: cannot write {}", tensor_type_name(type)));
        quantize_weight_row(type, x, dst);
    }
  }
  add_tensor(name, type, std::move(ne), data);
}

GgufWriter::Layout GgufWriter::layout() const {
  Layout l;
  l.header_end = 4 + 4 + 8 + 8;
  l.metadata_end = l.header_end + metadata_.size();
  size_t n = l.metadata_end;
  for (const Tensor& t : tensors_) n += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
  l.tensor_infos_end = n;
  l.data_start = align_up(n, GgufFile::kDefaultAlignment);
  return l;
}

std::vector<std::byte> GgufWriter::header_bytes() const {
  std::vector<std::byte> out;
  put<uint32_t>(out, GgufFile::kMagic);
  put<uint32_t>(out, version_);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, num_kv_);
  out.insert(out.end(), metadata_.begin(), metadata_.end());
  size_t offset = 0;
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(out, static_cast<uint64_t>(d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset = align_up(offset + t.data.size(), GgufFile::kDefaultAlignment);
  }
  if (!tensors_.empty()) out.resize(align_up(out.size(), GgufFile::kDefaultAlignment));
  return out;
}

std::vector<std::byte> GgufWriter::bytes() const {
  std::vector<std::byte> out = header_bytes();
  for (const Tensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    out.resize(align_up(out.size(), GgufFile::kDefaultAlignment));
  }
  return out;
}

// Streams the tensors instead of building bytes(): a model of a few GB is not held twice.
void GgufWriter::write(const std::string& path) const {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  auto put_bytes = [&](const std::byte* p, size_t n) {
    f.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
  };
  const std::vector<std::byte> header = header_bytes();
  put_bytes(header.data(), header.size());
  const std::byte zeros[GgufFile::kDefaultAlignment] = {};
  for (const Tensor& t : tensors_) {
    put_bytes(t.data.data(), t.data.size());
    put_bytes(zeros, align_up(t.data.size(), GgufFile::kDefaultAlignment) - t.data.size());
  }
  f.flush();
  if (!f) throw Error(fmt::format("cannot write GGUF file '{}'", path));
}

}  // namespace pagedkv
