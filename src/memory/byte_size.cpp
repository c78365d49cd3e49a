#include "pagedkv/memory/byte_size.h"

#include <fmt/format.h>

#include <array>
#include <cctype>
#include <limits>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

__extension__ typedef unsigned __int128 uint128;  // exact "1.5GiB" without floating point

struct Unit {
  std::string_view name;  // lower case
  uint64_t bytes;
};

constexpr std::array<Unit, 10> kUnits{{
    {"b", 1},
    {"kb", 1'000},
    {"mb", 1'000'000},
    {"gb", 1'000'000'000},
    {"tb", 1'000'000'000'000},
    {"kib", uint64_t{1} << 10},
    {"mib", uint64_t{1} << 20},
    {"gib", uint64_t{1} << 30},
    {"tib", uint64_t{1} << 40},
    {"", 1},
}};

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad_size(std::string_view text, std::string_view why) {
  throw ConfigError(fmt::format(
      "invalid size '{}': {} (write e.g. 43GB = 43e9 bytes, 40GiB = 40 x 2^30 bytes, or plain bytes)", text, why));
}

}  // namespace

uint64_t parse_byte_size(std::string_view text) {
  std::string_view s = trim(text);
  // The number: digits with at most one decimal point, read exactly as mantissa / 10^scale.
  uint128 mantissa = 0;
  int scale = 0;
  bool seen_digit = false;
  bool seen_point = false;
  size_t i = 0;
  for (; i < s.size(); ++i) {
    char c = s[i];
    if (c >= '0' && c <= '9') {
      seen_digit = true;
      if (mantissa > uint128{std::numeric_limits<uint64_t>::max()} * 10) bad_size(text, "too large");
      mantissa = mantissa * 10 + static_cast<unsigned>(c - '0');
      if (seen_point) ++scale;
    } else if (c == '.' && !seen_point) {
      seen_point = true;
    } else {
      break;
    }
  }
  if (!seen_digit) bad_size(text, s.empty() ? "empty" : "no number");
  if (scale > 18) bad_size(text, "too many decimal places");

  std::string unit_text{trim(s.substr(i))};
  for (char& c : unit_text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (unit_text == "k" || unit_text == "m" || unit_text == "g" || unit_text == "t")
    bad_size(text, fmt::format("unit '{}' is ambiguous, write {}B (powers of 1000) or {}iB (powers of 1024)",
                               s.substr(i), s.substr(i), s.substr(i)));
  for (const Unit& unit : kUnits) {
    if (unit.name != unit_text) continue;
    uint128 power_of_ten = 1;
    for (int k = 0; k < scale; ++k) power_of_ten *= 10;
    uint128 bytes = mantissa * unit.bytes / power_of_ten;
    if (bytes > uint128{std::numeric_limits<uint64_t>::max()}) bad_size(text, "too large");
    return static_cast<uint64_t>(bytes);
  }
  bad_size(text, fmt::format("unknown unit '{}' (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", trim(s.substr(i))));
}

namespace {

template <size_t N>
std::string format_scaled(uint64_t bytes, double step, const std::array<std::string_view, N>& names) {
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= step && unit + 1 < names.size()) {
    value /= step;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.2f} {}", value, names[unit]);
}

}  // namespace

std::string format_byte_size(uint64_t bytes) {
  static constexpr std::array<std::string_view, 5> kNames{"B", "KB", "MB", "GB", "TB"};
  return format_scaled(bytes, 1000.0, kNames);
}

std::string format_byte_size_iec(uint64_t bytes) {
  static constexpr std::array<std::string_view, 5> kNames{"B", "KiB", "MiB", "GiB", "TiB"};
  return format_scaled(bytes, 1024.0, kNames);
}

std::string format_grouped(uint64_t value) {
  std::string digits = std::to_string(value);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace pagedkv
