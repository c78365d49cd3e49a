#include "pagedkv/workload/hybrid_sessions.h"

#include <fmt/format.h>

#include <algorithm>
#include <deque>
#include <memory>

#include "pagedkv/core/ceil_div.h"
#include "pagedkv/core/error.h"
#include "pagedkv/workload/kvcache_peer.h"

namespace pagedkv {
namespace {

constexpr int kVocab = 32000;

void append_random(std::vector<TokenId>& out, int n, SplitMix64& rng) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<TokenId>(rng.uniform_int(0, kVocab - 1)));
}

struct Running {
  std::unique_ptr<Request> request;
  int session = 0;
  int outputs_left = 0;
};

}  // namespace

void HybridSessionsConfig::validate() const {
  auto positive = [](const char* name, int v) {
    if (v <= 0) throw ConfigError(fmt::format("hybrid sessions: {} must be positive, got {}", name, v));
  };
  positive("sessions", sessions);
  positive("turns", turns);
  positive("user_tokens", user_tokens);
  positive("output_tokens", output_tokens);
  positive("concurrency", concurrency);
  positive("num_blocks", num_blocks);
  if (system_prompt_tokens < 0) throw ConfigError("hybrid sessions: system_prompt_tokens must not be negative");
  if (max_num_batched_tokens < 0) throw ConfigError("hybrid sessions: max_num_batched_tokens must not be negative");
}

std::vector<KVCacheGroupSpec> full_attention_twin(std::vector<KVCacheGroupSpec> groups) {
  for (auto& g : groups) {
    g.spec.kind = AttentionKind::kFull;
    g.spec.sliding_window = 0;
  }
  return groups;
}

HybridSessionsResult run_hybrid_sessions(const HybridSessionsConfig& c, const std::vector<KVCacheGroupSpec>& groups) {
  c.validate();
  KVCacheManagerConfig mc;
  mc.cache.num_blocks = c.num_blocks;
  mc.cache.groups = groups;
  mc.watermark = 0.0;
  mc.sliding_window_retention = c.retention;
  mc.sliding_window_checkpoint_interval = c.checkpoint_interval;
  mc.max_num_batched_tokens = c.max_num_batched_tokens;
  const int longest = c.system_prompt_tokens + c.turns * (c.user_tokens + c.output_tokens);
  mc.max_model_len = longest + 1;
  KVCacheManager m(std::move(mc));

  SplitMix64 rng(c.seed);
  std::vector<TokenId> system;
  append_random(system, c.system_prompt_tokens, rng);
  std::vector<std::vector<TokenId>> conversation(static_cast<size_t>(c.sessions), system);
  std::deque<int> waiting;  // sessions in round-robin order, one entry per turn
  for (int t = 0; t < c.turns; ++t)
    for (int s = 0; s < c.sessions; ++s) waiting.push_back(s);

  HybridSessionsResult out;
  std::vector<Running> running;
  uint64_t next_id = 1;
  auto chunk_of = [&](int remaining) {
    return c.max_num_batched_tokens > 0 ? std::min(remaining, c.max_num_batched_tokens) : remaining;
  };
  while (!waiting.empty() || !running.empty()) {
    // Admission, in order; a request that does not fit waits for running ones to finish.
    while (!waiting.empty() && static_cast<int>(running.size()) < c.concurrency) {
      const int s = waiting.front();
      std::vector<TokenId> prompt = conversation[static_cast<size_t>(s)];
      append_random(prompt, c.user_tokens, rng);
      auto r = std::make_unique<Request>(RequestId{next_id}, std::move(prompt));
      r->tokens.reserve(r->tokens.size() + static_cast<size_t>(c.output_tokens) + 1);
      if (m.can_allocate(*r) == AllocStatus::kNever)
        throw ConfigError(fmt::format("hybrid sessions: a {}-token request can never fit in {} blocks", r->num_tokens(),
                                      c.num_blocks));
      ComputedBlocks hits = m.get_computed_blocks(*r);
      const int chunk = chunk_of(r->num_tokens() - hits.num_computed_tokens);
      if (!m.allocate_slots(*r, chunk, hits.num_computed_tokens, &hits)) {
        if (running.empty())
          throw ConfigError(fmt::format("hybrid sessions: {} blocks cannot hold one {}-token request", c.num_blocks,
                                        r->num_tokens()));
        break;  // retried (and looked up again) once a running request finishes
      }
      ++next_id;
      waiting.pop_front();
      r->num_computed_tokens = hits.num_computed_tokens + chunk;
      ++out.requests;
      out.prompt_tokens += static_cast<uint64_t>(r->num_tokens());
      out.hit_tokens += static_cast<uint64_t>(hits.num_computed_tokens);
      running.push_back(Running{std::move(r), s, c.output_tokens});
    }
    out.peak_blocks_in_use = std::max(out.peak_blocks_in_use, m.pool().num_usable_blocks() - m.num_free_blocks());
    if (c.check_invariants) m.check_invariants();
    // One step: the next prefill chunk, or one decoded token, for every running request.
    for (Running& run : running) {
      Request& r = *run.request;
      if (r.num_computed_tokens < r.num_prompt_tokens) {
        const int chunk = chunk_of(r.num_prompt_tokens - r.num_computed_tokens);
        if (!m.allocate_slots(r, chunk))
          throw ConfigError(
              fmt::format("hybrid sessions: {} blocks cannot run {} requests at once", c.num_blocks, c.concurrency));
        r.num_computed_tokens += chunk;
        continue;
      }
      r.append_token(static_cast<TokenId>(rng.uniform_int(0, kVocab - 1)));
      if (!m.allocate_slots(r, 1))
        throw ConfigError(
            fmt::format("hybrid sessions: {} blocks cannot run {} requests at once", c.num_blocks, c.concurrency));
      r.num_computed_tokens += 1;
      --run.outputs_left;
    }
    out.peak_blocks_in_use = std::max(out.peak_blocks_in_use, m.pool().num_usable_blocks() - m.num_free_blocks());
    std::erase_if(running, [&](Running& run) {
      if (run.outputs_left > 0) return false;
      conversation[static_cast<size_t>(run.session)] = run.request->tokens;
      m.free(*run.request);
      return true;
    });
    if (c.check_invariants) m.check_invariants();
  }
  // Distinct blocks, per group at its block size: the shared system prompt's full blocks once,
  // each conversation's others.
  for (int g = 0; g < m.num_groups(); ++g) {
    const int64_t bs = m.group_block_size(g);
    const int64_t shared = c.system_prompt_tokens / bs;
    int64_t blocks = shared;
    for (const auto& conv : conversation) blocks += ceil_div(static_cast<int64_t>(conv.size()), bs) - shared;
    out.full_working_set_blocks += blocks;
  }
  out.stats = m.prefix_cache_stats();
  out.pool = m.pool().stats();
  return out;
}

}  // namespace pagedkv
