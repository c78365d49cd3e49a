// Accelerator presets: how much device memory a KV-cache budget starts from.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace pagedkv {

struct GpuSpec {
  std::string name;  // "h100-80gb"
  std::string description;  // "NVIDIA H100 SXM 80GB"
  uint64_t memory_bytes = 0;  // total memory as nvidia-smi reports it (memory.total, MiB x 2^20)
};

std::span<const GpuSpec> gpu_presets();
// The preset of that name (case-insensitive); ConfigError listing every preset otherwise.
const GpuSpec& gpu_preset(std::string_view name);

}  // namespace pagedkv
