#include "pagedkv/model/format/llama2c_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include <fmt/format.h>

#include "../model_internal.h"
#include "pagedkv/core/error.h"

namespace pagedkv {

namespace {

constexpr std::array<const char*, 7> kHeaderFieldNames = {"dim",        "hidden_dim", "n_layers", "n_heads",
                                                          "n_kv_heads", "vocab_size", "seq_len"};

// Turns the seven raw header ints into a config, or throws FormatError naming the bad field.
ModelConfig parse_header(const std::array<int32_t, 7>& raw, const std::string& path) {
  for (size_t i = 0; i < raw.size(); ++i) {
    // vocab_size may be negative (separate classifier), never zero.
    const bool ok = (i == 5) ? raw[i] != 0 && raw[i] != INT32_MIN : raw[i] > 0;
    if (!ok)
      throw FormatError(fmt::format("checkpoint '{}': header field {} must be {}, got {}", path, kHeaderFieldNames[i],
                                    i == 5 ? "non-zero" : "positive", raw[i]));
  }
  ModelConfig c;
  c.dim = raw[0];
  c.hidden_dim = raw[1];
  c.n_layers = raw[2];
  c.n_heads = raw[3];
  c.n_kv_heads = raw[4];
  c.vocab_size = raw[5] > 0 ? raw[5] : -raw[5];
  c.shared_classifier = raw[5] > 0;
  c.seq_len = raw[6];
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw FormatError(fmt::format("checkpoint '{}': inconsistent header: {}", path, e.what()));
  }
  return c;
}

}  // namespace

size_t Llama2cCheckpoint::expected_file_bytes(const ModelConfig& config) {
  try {
    config.validate();
  } catch (const ConfigError& e) {
    throw FormatError(e.what());
  }
  auto floats = detail::checked_llama2c_body_floats(config);
  uint64_t bytes = 0;
  if (!floats || __builtin_mul_overflow(*floats, uint64_t{sizeof(float)}, &bytes) ||
      __builtin_add_overflow(bytes, uint64_t{kHeaderBytes}, &bytes) || bytes > SIZE_MAX)
    throw FormatError(fmt::format("checkpoint header {} implies more than 2^64 bytes", config.describe()));
  return static_cast<size_t>(bytes);
}

Llama2cCheckpoint::Llama2cCheckpoint(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("cannot open checkpoint '{}': {}", path, std::strerror(errno)));
  // The descriptor is only needed until the mapping exists.
  struct CloseFd {
    int fd;
    ~CloseFd() { ::close(fd); }
  } closer{fd};

  struct stat st {};
  if (::fstat(fd, &st) != 0) throw Error(fmt::format("cannot stat checkpoint '{}': {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(fmt::format("checkpoint '{}' is not a regular file", path));
  const size_t actual = static_cast<size_t>(st.st_size);

  if (actual < kHeaderBytes)
    throw FormatError(fmt::format("checkpoint '{}' is truncated: the header needs {} bytes, the file has {}", path,
                                  kHeaderBytes, actual));
  std::array<int32_t, 7> raw{};
  if (::pread(fd, raw.data(), kHeaderBytes, 0) != static_cast<ssize_t>(kHeaderBytes))
    throw Error(fmt::format("cannot read the header of checkpoint '{}': {}", path, std::strerror(errno)));
  ModelConfig config = parse_header(raw, path);

  const size_t expected = expected_file_bytes(config);
  if (actual != expected) {
    const char* what = actual < expected ? "truncated" : "oversized";
    throw FormatError(fmt::format(
        "checkpoint '{}' is {}: its header ({}) implies {} bytes{}, the file has {} ({} {} bytes)", path, what,
        config.describe(), expected, config.shared_classifier ? "" : " including the separate classifier", actual,
        actual < expected ? expected - actual : actual - expected, actual < expected ? "missing" : "extra"));
  }

  void* map = ::mmap(nullptr, actual, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) throw Error(fmt::format("cannot mmap checkpoint '{}': {}", path, std::strerror(errno)));
  mapping_ = map;
  file_bytes_ = actual;

  config_ = config;
  const auto* body = reinterpret_cast<const float*>(static_cast<const std::byte*>(map) + kHeaderBytes);
  weights_ = llama2c_weight_views(config_, body);
  source_ = path;
}

Llama2cCheckpoint::~Llama2cCheckpoint() {
  if (mapping_ != nullptr) ::munmap(mapping_, file_bytes_);
}

void write_llama2c_checkpoint(const std::string& path, const ModelConfig& config, const ModelWeights& w) {
  config.validate();
  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) throw Error(fmt::format("cannot create checkpoint '{}': {}", path, std::strerror(errno)));
  auto write = [&](const void* data, size_t bytes) {
    if (bytes != 0 && std::fwrite(data, 1, bytes, file.get()) != bytes)
      throw Error(fmt::format("cannot write checkpoint '{}': {}", path, std::strerror(errno)));
  };
  auto write_floats = [&](const float* data, size_t n) { write(data, n * sizeof(float)); };

  const std::array<int32_t, 7> header = {
      config.dim,     config.hidden_dim, config.n_layers,
      config.n_heads, config.n_kv_heads, config.shared_classifier ? config.vocab_size : -config.vocab_size,
      config.seq_len};
  write(header.data(), sizeof(header));
  for_each_llama2c_tensor(config, [&](WeightField field, std::initializer_list<uint64_t> factors) {
    const size_t n = tensor_floats(factors);
    if (field != nullptr) {
      write_floats(w.*field, n);
    } else {
      const std::vector<float> legacy_rope(n, 0.0f);
      write_floats(legacy_rope.data(), n);
    }
  });
  if (std::fflush(file.get()) != 0)
    throw Error(fmt::format("cannot write checkpoint '{}': {}", path, std::strerror(errno)));
}

}  // namespace pagedkv
