#include "pagedkv/core/progress_bar.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace pagedkv {

std::string progress_bar(double fraction, int width) {
  width = std::max(1, width);
  if (!(fraction >= 0)) fraction = 0;
  fraction = std::min(1.0, fraction);
  const int eighths = static_cast<int>(fraction * 8 * width);
  std::string out = "[";
  for (int i = 0; i < width; ++i) {
    const int level = std::clamp(eighths - 8 * i, 0, 8);
    // Partial cells use the left-aligned eighth blocks ▏▎▍▌▋▊▉.
    static constexpr std::array<std::string_view, 9> kLeft = {" ", "▏", "▎", "▍", "▌", "▋", "▊", "▉", "█"};
    out += kLeft[static_cast<size_t>(level)];
  }
  return out + "]";
}

}  // namespace pagedkv
