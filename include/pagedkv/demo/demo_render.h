// What `pagedkv demo` draws: the KV block pool as a grid (the picture of the PagedAttention
// papers — blocks marked by the request that owns them, shared, cached-free or free), as terminal
// text or an SVG/HTML snapshot, plus the small text charts of its report.
// Everything here is pure formatting of plain data, so it is unit-tested without an engine.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pagedkv {
class LLMEngine;
}

namespace pagedkv::demo {

enum class BlockState : uint8_t {
  kNull,  // block 0, reserved by the pool
  kFree,  // free, holds nothing reusable
  kCachedFree,  // free but still holds a cached prefix (reused on a hit, evicted last-used first)
  kOwned,  // held by exactly one request
  kShared,  // held by several requests (a shared prefix or parallel samples): ref count > 1
};

struct BlockCell {
  BlockState state = BlockState::kFree;
  int ref_count = 0;
  uint64_t owner = 0;  // kOwned: the request; kShared: the first holder found
};

struct PoolSnapshot {
  int step = 0;
  int block_size = 0;
  std::vector<BlockCell> cells;  // indexed by block id
  int count(BlockState s) const;
  int num_owners() const;  // distinct requests holding blocks
};

// The pool as the engine holds it now: owners come from the running requests' block tables.
PoolSnapshot snapshot_pool(const LLMEngine& engine, int step);

// One glyph per block, `columns` per line: a letter per owning request (A-Z, a-z, cycling), the
// ref count for a shared block (2-9, + above 9), ':' cached-free, '.' free, '#' the null block.
// With `ansi`, owners are also coloured (terminal background colours) and the rest dimmed.
std::string render_block_grid(const PoolSnapshot& pool, int columns, bool ansi);
std::string block_grid_legend(bool ansi);
char owner_glyph(uint64_t owner);

// A standalone SVG of the grid (cells with tooltips, legend, title) and an HTML page holding it
// and `report_text` (preformatted).
std::string render_block_svg(const PoolSnapshot& pool, int columns, const std::string& title);
std::string render_block_html(const PoolSnapshot& pool, int columns, const std::string& title,
                              const std::string& report_text);

// One-line chart of `values` resampled to `width` columns (each the maximum of its span), with
// the eight block heights ▁..█ scaled to `max_value`. Empty input gives an empty string.
std::string sparkline(std::span<const int> values, int max_value, int width);
// The same as a `height`-row chart (top row first) drawn with full and partial blocks.
std::vector<std::string> block_chart(std::span<const int> values, int max_value, int width, int height);

}  // namespace pagedkv::demo
