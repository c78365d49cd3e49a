#include "pagedkv/workload/python_peer_times.h"

#include <fmt/format.h>

#include <array>
#include <charconv>
#include <fstream>
#include <string_view>
#include <vector>

#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// The cells of a Markdown table row "| a | b |", trimmed; empty for a line that is not a row.
std::vector<std::string_view> cells(std::string_view line) {
  std::vector<std::string_view> out;
  line = trim(line);
  if (line.size() < 2 || line.front() != '|' || line.back() != '|') return out;
  line = line.substr(1, line.size() - 2);
  for (size_t start = 0;;) {
    const size_t bar = line.find('|', start);
    out.push_back(trim(line.substr(start, bar == std::string_view::npos ? std::string_view::npos : bar - start)));
    if (bar == std::string_view::npos) break;
    start = bar + 1;
  }
  return out;
}

// The leading number of "87.9 µs" or "2.03 s".
std::optional<double> leading_number(std::string_view cell) {
  cell = trim(cell);
  double v = 0;
  const auto [end, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), v);
  if (ec != std::errc() || end == cell.data()) return std::nullopt;
  return v;
}

}  // namespace

PythonPeerReference read_python_peer_times(const std::string& readme_path, HashAlgorithm hash) {
  std::ifstream in(readme_path);
  if (!in)
    throw FormatError(fmt::format("cannot read vLLM's peer times: {} does not exist or is unreadable", readme_path));
  const std::string_view column = hash == HashAlgorithm::kSha256 ? "vLLM v1 (sha256)" : "vLLM v1 (xxhash)";
  // The first measurement's cell reads "sha256 / xxhash / nano".
  const size_t first_index = hash == HashAlgorithm::kSha256 ? 0 : 1;

  // The table's rows by their first cell, and where each field lands.
  struct Row {
    std::string_view label;
    double PythonPeerTimes::*field;
  };
  constexpr std::array<Row, 5> kRows{{{"admit (lookup + allocate)", &PythonPeerTimes::admit_us},
                                      {"decode-step `allocate_slots`", &PythonPeerTimes::decode_us},
                                      {"free a request", &PythonPeerTimes::free_us},
                                      {"hash a prompt's blocks at creation", &PythonPeerTimes::hash_us},
                                      {"whole replay", &PythonPeerTimes::whole_s}}};

  PythonPeerReference ref;
  PythonPeerTimes first;
  bool first_complete = true;
  std::array<bool, kRows.size()> found{};
  std::optional<size_t> value_col, first_col;
  for (std::string line; std::getline(in, line);) {
    const auto row = cells(line);
    if (row.empty()) continue;
    if (!value_col) {  // the header row names the columns
      for (size_t i = 0; i < row.size(); ++i) {
        if (row[i] == column) value_col = i;
        if (row[i].starts_with("first measurement")) first_col = i;
      }
      continue;
    }
    for (size_t r = 0; r < kRows.size(); ++r) {
      if (row[0] != kRows[r].label || found[r]) continue;
      const auto v = *value_col < row.size() ? leading_number(row[*value_col]) : std::nullopt;
      if (!v)
        throw FormatError(
            fmt::format("{}: row '{}' has no number in column '{}'", readme_path, kRows[r].label, column));
      ref.current.*kRows[r].field = *v;
      found[r] = true;
      std::optional<double> f;
      if (first_col && *first_col < row.size()) {
        std::string_view cell = row[*first_col];
        for (size_t skip = 0; skip < first_index; ++skip) {
          const size_t slash = cell.find('/');
          cell = slash == std::string_view::npos ? std::string_view{} : cell.substr(slash + 1);
        }
        f = leading_number(cell);
      }
      if (f) first.*kRows[r].field = *f;
      else first_complete = false;
    }
  }
  if (!value_col) throw FormatError(fmt::format("{}: no table with a '{}' column", readme_path, column));
  for (size_t r = 0; r < kRows.size(); ++r)
    if (!found[r]) throw FormatError(fmt::format("{}: the table has no row '{}'", readme_path, kRows[r].label));
  if (first_col && first_complete) ref.first = first;
  return ref;
}

}  // namespace pagedkv
