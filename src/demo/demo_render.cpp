#include "pagedkv/demo/demo_render.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <set>

#include "pagedkv/engine/llm_engine.h"

namespace pagedkv::demo {
namespace {

constexpr std::string_view kOwnerGlyphs = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
// Terminal background colours for owners: mid-brightness entries of the 256-colour cube that
// stay readable with black text.
constexpr std::array<int, 18> kOwnerColours = {110, 114, 150, 180, 174, 139, 109, 143, 179,
                                               117, 151, 186, 216, 182, 147, 115, 185, 210};
// Parallel samples get ids from 2^62 up (scheduler.h); fold them so neighbours differ.
uint64_t owner_key(uint64_t owner) { return owner >= (1ull << 62) ? (owner - (1ull << 62)) * 7 + 3 : owner; }

constexpr std::array<std::string_view, 9> kEighths = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};

// Column i of `width` covers values [i*n/width, (i+1)*n/width); its maximum, or the single value
// under it when there are fewer values than columns.
std::vector<int> resample_max(std::span<const int> values, int width) {
  std::vector<int> out;
  if (values.empty() || width <= 0) return out;
  const size_t n = values.size();
  const size_t w = std::min(n, static_cast<size_t>(width));
  for (size_t i = 0; i < w; ++i) {
    const size_t begin = i * n / w, end = std::max(begin + 1, (i + 1) * n / w);
    out.push_back(*std::max_element(values.begin() + static_cast<ptrdiff_t>(begin),
                                    values.begin() + static_cast<ptrdiff_t>(end)));
  }
  return out;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// SVG fill of an owner: hues spread by the golden angle so consecutive requests contrast.
std::string owner_fill(uint64_t owner) {
  const double hue = std::fmod(static_cast<double>(owner_key(owner) % 3600) * 137.508, 360.0);
  return fmt::format("hsl({:.0f},60%,62%)", hue);
}

constexpr const char* kSharedFill = "#5b2a86";
constexpr const char* kCachedFill = "#c9d3e0";
constexpr const char* kFreeFill = "#ffffff";
constexpr const char* kNullFill = "#222222";

}  // namespace

int PoolSnapshot::count(BlockState s) const {
  return static_cast<int>(std::count_if(cells.begin(), cells.end(), [s](const BlockCell& c) { return c.state == s; }));
}

int PoolSnapshot::num_owners() const {
  std::set<uint64_t> owners;
  for (const BlockCell& c : cells)
    if (c.state == BlockState::kOwned) owners.insert(c.owner);
  return static_cast<int>(owners.size());
}

PoolSnapshot snapshot_pool(const LLMEngine& engine, int step) {
  PoolSnapshot s;
  s.step = step;
  s.block_size = engine.config().block_size;
  const KVCacheManager& manager = engine.manager();
  const auto blocks = manager.pool().blocks();
  s.cells.resize(blocks.size());
  for (const KVCacheBlock& b : blocks) {
    BlockCell& c = s.cells[static_cast<size_t>(b.id.value)];
    c.ref_count = b.ref_cnt;
    if (b.is_null) c.state = BlockState::kNull;
    else if (b.ref_cnt > 1) c.state = BlockState::kShared;
    else if (b.ref_cnt == 1) c.state = BlockState::kOwned;
    else c.state = b.has_hash ? BlockState::kCachedFree : BlockState::kFree;
  }
  // Only running requests hold device blocks (swapped ones hold host copies). The first holder
  // found names a shared block.
  std::vector<bool> named(s.cells.size(), false);
  for (const SchedulerRequest* r : engine.scheduler().running())
    for (BlockId id : manager.get_block_ids(r->kv)) {
      const auto i = static_cast<size_t>(id.value);
      if (i >= s.cells.size() || named[i] || s.cells[i].state == BlockState::kNull) continue;
      s.cells[i].owner = r->kv.id.value;
      named[i] = true;
    }
  return s;
}

char owner_glyph(uint64_t owner) { return kOwnerGlyphs[owner_key(owner) % kOwnerGlyphs.size()]; }

std::string render_block_grid(const PoolSnapshot& pool, int columns, bool ansi) {
  columns = std::max(1, columns);
  std::string out;
  for (size_t i = 0; i < pool.cells.size(); ++i) {
    const BlockCell& c = pool.cells[i];
    switch (c.state) {
      case BlockState::kNull:
        out += ansi ? "\x1b[2m#\x1b[0m" : "#";
        break;
      case BlockState::kFree:
        out += ansi ? "\x1b[2m.\x1b[0m" : ".";
        break;
      case BlockState::kCachedFree:
        out += ansi ? "\x1b[36m:\x1b[0m" : ":";
        break;
      case BlockState::kOwned:
        if (ansi)
          out += fmt::format("\x1b[30;48;5;{}m{}\x1b[0m", kOwnerColours[owner_key(c.owner) % kOwnerColours.size()],
                             owner_glyph(c.owner));
        else out += owner_glyph(c.owner);
        break;
      case BlockState::kShared: {
        const char glyph = c.ref_count > 9 ? '+' : static_cast<char>('0' + c.ref_count);
        out += ansi ? fmt::format("\x1b[1;97;45m{}\x1b[0m", glyph) : std::string(1, glyph);
        break;
      }
    }
    if ((i + 1) % static_cast<size_t>(columns) == 0 || i + 1 == pool.cells.size()) out += '\n';
  }
  return out;
}

std::string block_grid_legend(bool ansi) {
  if (!ansi) return "A-Z a-z: owned by one request   2-9,+: shared (ref count)   : cached-free   . free   # null";
  return "\x1b[30;48;5;110mA\x1b[0m\x1b[30;48;5;174mb\x1b[0m owned by one request   "
         "\x1b[1;97;45m2\x1b[0m shared (ref count)   \x1b[36m:\x1b[0m cached-free   \x1b[2m.\x1b[0m free   "
         "\x1b[2m#\x1b[0m null";
}

std::string render_block_svg(const PoolSnapshot& pool, int columns, const std::string& title) {
  columns = std::max(1, columns);
  constexpr int kCell = 14, kGap = 2, kPad = 10, kTitle = 26, kLegendRow = 20;
  constexpr double kTitleCharWidth = 7.8, kLegendCharWidth = 6.2;  // sans-serif at 14 px and 11 px
  const int n = static_cast<int>(pool.cells.size());
  const int rows = (n + columns - 1) / columns;
  const int width = std::max(2 * kPad + columns * (kCell + kGap) - kGap,
                             2 * kPad + static_cast<int>(kTitleCharWidth * static_cast<double>(title.size())));
  // The legend wraps to the width of the grid (or title).
  struct Item {
    const char* fill;
    const char* text;
  };
  const std::array<Item, 5> legend = {Item{"hsl(200,60%,62%)", "owned (colour = request)"},
                                      Item{kSharedFill, "shared (ref > 1)"}, Item{kCachedFill, "cached-free"},
                                      Item{kFreeFill, "free"}, Item{kNullFill, "null"}};
  struct Placed {
    int x, row;
  };
  std::vector<Placed> placed;
  int lx = kPad, lrow = 0;
  for (const Item& it : legend) {
    const int w = 16 + static_cast<int>(kLegendCharWidth * static_cast<double>(std::string_view(it.text).size())) + 14;
    if (lx > kPad && lx + w > width - kPad) {
      lx = kPad;
      ++lrow;
    }
    placed.push_back({lx, lrow});
    lx += w;
  }
  const int grid_bottom = kTitle + kPad + rows * (kCell + kGap) - kGap;
  const int height = grid_bottom + 8 + (lrow + 1) * kLegendRow + kPad;
  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\" "
      "font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"#f7f7f7\"/>\n"
      "<text x=\"{}\" y=\"18\" font-size=\"14\">{}</text>\n",
      width, height, width, height, kPad, xml_escape(title));
  for (int i = 0; i < n; ++i) {
    const BlockCell& c = pool.cells[static_cast<size_t>(i)];
    const int x = kPad + (i % columns) * (kCell + kGap), y = kTitle + kPad + (i / columns) * (kCell + kGap);
    std::string fill, tip, label;
    switch (c.state) {
      case BlockState::kNull:
        fill = kNullFill;
        tip = "null block";
        break;
      case BlockState::kFree:
        fill = kFreeFill;
        tip = "free";
        break;
      case BlockState::kCachedFree:
        fill = kCachedFill;
        tip = "cached-free (reusable prefix)";
        break;
      case BlockState::kOwned:
        fill = owner_fill(c.owner);
        tip = fmt::format("request {}", c.owner);
        label = std::string(1, owner_glyph(c.owner));
        break;
      case BlockState::kShared:
        fill = kSharedFill;
        tip = fmt::format("shared by {} (first: request {})", c.ref_count, c.owner);
        label = c.ref_count > 9 ? "+" : std::to_string(c.ref_count);
        break;
    }
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"#999\" "
        "stroke-width=\"0.5\"><title>block {}: {}</title></rect>",
        x, y, kCell, kCell, fill, i, tip);
    if (!label.empty())
      svg += fmt::format("<text x=\"{}\" y=\"{}\" font-size=\"9\" text-anchor=\"middle\" fill=\"{}\">{}</text>",
                         x + kCell / 2, y + kCell - 4, c.state == BlockState::kShared ? "#fff" : "#000", label);
    svg += '\n';
  }
  for (size_t k = 0; k < legend.size(); ++k) {
    const int x = placed[k].x, y = grid_bottom + 8 + placed[k].row * kLegendRow;
    svg += fmt::format(
        "<rect x=\"{}\" y=\"{}\" width=\"12\" height=\"12\" fill=\"{}\" stroke=\"#999\" "
        "stroke-width=\"0.5\"/><text x=\"{}\" y=\"{}\" font-size=\"11\">{}</text>\n",
        x, y, legend[k].fill, x + 16, y + 10, legend[k].text);
  }
  svg += "</svg>\n";
  return svg;
}

std::string render_block_html(const PoolSnapshot& pool, int columns, const std::string& title,
                              const std::string& report_text) {
  return fmt::format(
      "<!doctype html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{0}</title>\n"
      "<style>body{{font-family:sans-serif;margin:2em;background:#fff}} pre{{font-size:12px;line-height:1.25}}"
      "</style>\n</head>\n<body>\n<h1>{0}</h1>\n{1}<pre>{2}</pre>\n</body>\n</html>\n",
      xml_escape(title), render_block_svg(pool, columns, title), xml_escape(report_text));
}

std::string sparkline(std::span<const int> values, int max_value, int width) {
  std::string out;
  for (int v : resample_max(values, width)) {
    const double f = max_value > 0 ? std::clamp(static_cast<double>(v) / max_value, 0.0, 1.0) : 0.0;
    // Non-zero values show at least the lowest block, so activity is never invisible.
    int level = static_cast<int>(std::lround(f * 8));
    if (v > 0 && level == 0) level = 1;
    out += kEighths[static_cast<size_t>(level)];
  }
  return out;
}

std::vector<std::string> block_chart(std::span<const int> values, int max_value, int width, int height) {
  const std::vector<int> cols = resample_max(values, width);
  height = std::max(1, height);
  std::vector<std::string> rows(static_cast<size_t>(height));
  for (int v : cols) {
    const double f = max_value > 0 ? std::clamp(static_cast<double>(v) / max_value, 0.0, 1.0) : 0.0;
    int eighths = static_cast<int>(std::lround(f * 8 * height));
    if (v > 0 && eighths == 0) eighths = 1;
    for (int r = 0; r < height; ++r) {  // r = 0 is the bottom row
      const int level = std::clamp(eighths - 8 * r, 0, 8);
      rows[static_cast<size_t>(height - 1 - r)] += kEighths[static_cast<size_t>(level)];
    }
  }
  return rows;
}

}  // namespace pagedkv::demo
