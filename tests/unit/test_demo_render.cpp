// The demo's renderers (block grid as text, SVG and HTML; charts) and its workload generator.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include "pagedkv/demo/demo_render.h"
#include "pagedkv/demo/demo_workload.h"
#include "pagedkv/model/tokenizer/tokenizer.h"

namespace pagedkv::demo {
namespace {

PoolSnapshot sample_pool() {
  PoolSnapshot p;
  p.block_size = 16;
  p.cells = {BlockCell{BlockState::kNull, 0, 0},       BlockCell{BlockState::kOwned, 1, 1},
             BlockCell{BlockState::kOwned, 1, 2},      BlockCell{BlockState::kShared, 3, 1},
             BlockCell{BlockState::kCachedFree, 0, 0}, BlockCell{BlockState::kFree, 0, 0},
             BlockCell{BlockState::kShared, 12, 2},    BlockCell{BlockState::kOwned, 1, 1}};
  return p;
}

std::string strip_ansi(const std::string& s) {
  return std::regex_replace(s, std::regex("\x1b\\[[0-9;?]*[A-Za-z]"), "");
}

TEST(DemoRender, GridMarksOwnersSharedCachedFreeAndNull) {
  const PoolSnapshot p = sample_pool();
  EXPECT_EQ(render_block_grid(p, 4, false), "#BC3\n:.+B\n");
  EXPECT_EQ(render_block_grid(p, 3, false), "#BC\n3:.\n+B\n");
  EXPECT_EQ(p.count(BlockState::kOwned), 3);
  EXPECT_EQ(p.count(BlockState::kShared), 2);
  EXPECT_EQ(p.num_owners(), 2);
}

TEST(DemoRender, AnsiGridShowsTheSameGlyphs) {
  const PoolSnapshot p = sample_pool();
  const std::string ansi = render_block_grid(p, 4, true);
  EXPECT_NE(ansi.find("\x1b["), std::string::npos);
  EXPECT_EQ(strip_ansi(ansi), render_block_grid(p, 4, false));
  EXPECT_NE(strip_ansi(block_grid_legend(true)).find("owned by one request"), std::string::npos);
  EXPECT_EQ(block_grid_legend(false).find("\x1b["), std::string::npos);
}

TEST(DemoRender, OwnerGlyphsCycleAndSamplesDifferFromNeighbours) {
  EXPECT_EQ(owner_glyph(0), 'A');
  EXPECT_EQ(owner_glyph(25), 'Z');
  EXPECT_EQ(owner_glyph(26), 'a');
  EXPECT_EQ(owner_glyph(52), 'A');
  std::set<char> samples;
  for (uint64_t k = 0; k < 4; ++k) samples.insert(owner_glyph((1ull << 62) + k));
  EXPECT_EQ(samples.size(), 4u);
}

TEST(DemoRender, SvgHasOneCellPerBlockTooltipsAndEscapedTitle) {
  const PoolSnapshot p = sample_pool();
  const std::string svg = render_block_svg(p, 4, "pool <peak> & more");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  EXPECT_TRUE(svg.ends_with("</svg>\n"));
  EXPECT_NE(svg.find("pool &lt;peak&gt; &amp; more"), std::string::npos);
  EXPECT_EQ(svg.find("<peak>"), std::string::npos);
  size_t tooltips = 0;
  for (size_t at = svg.find("<title>block "); at != std::string::npos; at = svg.find("<title>block ", at + 1))
    ++tooltips;
  EXPECT_EQ(tooltips, p.cells.size());
  EXPECT_NE(svg.find("<title>block 1: request 1</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>block 3: shared by 3 (first: request 1)</title>"), std::string::npos);
  EXPECT_NE(svg.find("<title>block 4: cached-free"), std::string::npos);
  // Every opened element is closed or self-closed.
  size_t opened_rects = 0, closed_rects = 0;
  for (size_t at = svg.find("<rect"); at != std::string::npos; at = svg.find("<rect", at + 1)) ++opened_rects;
  for (size_t at = svg.find("</rect>"); at != std::string::npos; at = svg.find("</rect>", at + 1)) ++closed_rects;
  for (size_t at = svg.find("/>"); at != std::string::npos; at = svg.find("/>", at + 1)) ++closed_rects;
  EXPECT_EQ(opened_rects, closed_rects);
}

TEST(DemoRender, HtmlEmbedsTheSvgAndEscapesTheReport) {
  const std::string html = render_block_html(sample_pool(), 4, "t", "a < b && c\n");
  EXPECT_EQ(html.rfind("<!doctype html>", 0), 0u);
  EXPECT_NE(html.find("<svg"), std::string::npos);
  EXPECT_NE(html.find("<pre>a &lt; b &amp;&amp; c\n</pre>"), std::string::npos);
}

TEST(DemoRender, SparklineScalesResamplesAndShowsSmallValues) {
  EXPECT_EQ(sparkline(std::vector<int>{}, 8, 10), "");
  EXPECT_EQ(sparkline(std::vector<int>{0, 4, 8}, 8, 10), " ▄█");
  EXPECT_EQ(sparkline(std::vector<int>{0, 1, 100}, 100, 3), " ▁█");  // 1 of 100 is still visible
  // Four values into two columns: each column is the maximum of its two.
  EXPECT_EQ(sparkline(std::vector<int>{8, 0, 0, 4}, 8, 2), "█▄");
  EXPECT_EQ(sparkline(std::vector<int>{20}, 8, 1), "█");  // clamped
}

TEST(DemoRender, BlockChartStacksEighths) {
  const auto rows = block_chart(std::vector<int>{16, 4, 0, 12}, 16, 4, 2);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0], "█  ▄");  // top row
  EXPECT_EQ(rows[1], "█▄ █");  // bottom row
}

TEST(DemoWorkload, DeterministicAndWithinTheModel) {
  DemoWorkloadConfig c;
  c.num_requests = 400;
  c.max_model_len = 512;
  c.vocab_size = 512;
  const auto a = make_demo_workload(c), b = make_demo_workload(c);
  ASSERT_EQ(a.size(), 400u);
  int shared = 0, parallel = 0, cancel = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].request.prompt, b[i].request.prompt);
    EXPECT_EQ(a[i].arrival_step, b[i].arrival_step);
    EXPECT_EQ(a[i].request.sampling.seed, b[i].request.sampling.seed);
    const auto& g = a[i].request;
    EXPECT_GE(g.stop.max_tokens, 1);
    EXPECT_LE(static_cast<int>(g.prompt.size()) + g.stop.max_tokens, c.max_model_len);
    EXPECT_EQ(g.prompt.front(), 1) << "every prompt starts with BOS";
    for (TokenId t : g.prompt) EXPECT_TRUE(t >= 0 && t < c.vocab_size);
    if (i > 0) {
      EXPECT_GE(a[i].arrival_step, a[i - 1].arrival_step);
    }
    if (i < static_cast<size_t>(c.initial_burst)) {
      EXPECT_EQ(a[i].arrival_step, 0);
    }
    shared += a[i].system_prompt >= 0;
    parallel += g.n > 1;
    cancel += a[i].cancel_after_steps >= 0;
    if (g.n > 1) {
      EXPECT_LE(g.n, 4);
    }
  }
  // The mix follows the configured fractions (loosely: 400 draws).
  EXPECT_NEAR(shared / 400.0, c.shared_fraction, 0.08);
  EXPECT_NEAR(parallel / 400.0, c.parallel_fraction, 0.05);
  EXPECT_NEAR(cancel / 400.0, c.cancel_fraction, 0.05);
  EXPECT_GT(a.back().arrival_step, 100);
  c.seed = 2;
  EXPECT_NE(make_demo_workload(c)[0].request.prompt, a[0].request.prompt);
}

TEST(DemoWorkload, RequestsBehindASystemPromptShareItsTokens) {
  DemoWorkloadConfig c;
  c.num_requests = 100;
  c.max_model_len = 2048;
  const auto w = make_demo_workload(c);
  std::map<int, std::vector<TokenId>> prefix;
  for (const DemoRequest& d : w) {
    if (d.system_prompt < 0) continue;
    auto [it, first] = prefix.try_emplace(d.system_prompt, d.request.prompt);
    if (!first) {
      // The longest common prefix of two requests behind one system prompt covers it.
      const auto& p = it->second;
      size_t common = 0;
      while (common < p.size() && common < d.request.prompt.size() && p[common] == d.request.prompt[common]) ++common;
      EXPECT_GE(common, static_cast<size_t>(1024 * 3 / 32));
    }
  }
  EXPECT_GE(prefix.size(), 2u);
}

TEST(DemoWorkload, RejectsBadConfigurations) {
  DemoWorkloadConfig c;
  c.num_requests = 0;
  EXPECT_THROW(make_demo_workload(c), ConfigError);
  c = {};
  c.cancel_fraction = 1.5;
  EXPECT_THROW(make_demo_workload(c), ConfigError);
  c = {};
  c.arrivals_per_step = 0;
  EXPECT_THROW(make_demo_workload(c), ConfigError);
  c = {};
  c.max_model_len = 10;
  EXPECT_THROW(make_demo_workload(c), ConfigError);
}

TEST(DemoWorkload, TextPromptsWithTheStoriesTokenizer) {
  const char* env = std::getenv("PAGEDKV_SHARED_DIR");
  const std::string path = std::string(env ? env : "../shared") + "/models/tok512.bin";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not found (set PAGEDKV_SHARED_DIR)";
  Tokenizer tok(path, 512);
  DemoWorkloadConfig c;
  c.num_requests = 50;
  const auto w = make_demo_workload(c, &tok);
  for (const DemoRequest& d : w) {
    EXPECT_EQ(d.request.prompt.front(), Tokenizer::kBos);
    EXPECT_EQ(d.request.stop.eos_token_id, Tokenizer::kBos) << "stories stop at BOS, as llama2.c's run does";
    const std::string text = tok.render(d.request.prompt);
    if (d.system_prompt == 0) {
      EXPECT_EQ(text.rfind("Once upon a time, there was a little girl named Lily.", 0), 0u) << text;
    }
    if (d.system_prompt < 0) {
      EXPECT_EQ(text.rfind("Once upon a time", 0), 0u) << text;
    }
  }
}

}  // namespace
}  // namespace pagedkv::demo
