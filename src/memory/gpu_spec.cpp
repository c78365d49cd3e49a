#include "pagedkv/memory/gpu_spec.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cctype>
#include <vector>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

// Total memory as `nvidia-smi --query-gpu=memory.total` prints it (MiB), not the marketing
// "80 GB". The total CUDA reports (cudaMemGetInfo, which vLLM multiplies by
// gpu_memory_utilization) is often somewhat lower because the driver keeps memory back, so plans
// from these presets can be slightly optimistic; docs/plan.md says how to get exact figures.
std::vector<GpuSpec> make_gpu_presets() {
  return {
      {"a100-40gb", "NVIDIA A100 40GB", 40'960 * kMiB}, {"a100-80gb", "NVIDIA A100 80GB", 81'920 * kMiB},
      {"h100-80gb", "NVIDIA H100 80GB", 81'559 * kMiB}, {"h200-141gb", "NVIDIA H200 141GB", 143'771 * kMiB},
      {"l4-24gb", "NVIDIA L4 24GB", 23'034 * kMiB},
  };
}

}  // namespace

std::span<const GpuSpec> gpu_presets() {
  static const std::vector<GpuSpec> presets = make_gpu_presets();
  return presets;
}

const GpuSpec& gpu_preset(std::string_view name) {
  std::vector<std::string_view> names;
  for (const GpuSpec& g : gpu_presets()) {
    bool same = g.name.size() == name.size() &&
                std::equal(g.name.begin(), g.name.end(), name.begin(),
                           [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
    if (same) return g;
    names.push_back(g.name);
  }
  throw ConfigError(fmt::format("unknown GPU '{}'; presets: {}", name, fmt::join(names, ", ")));
}

}  // namespace pagedkv
