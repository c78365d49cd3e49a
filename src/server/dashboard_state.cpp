#include "pagedkv/server/dashboard_state.h"

#include "pagedkv/server/engine_service.h"
#include "pagedkv/server/response_builder.h"

namespace pagedkv::server {
namespace {

using nlohmann::json;

json tier_json(const KVTier& tier) {
  const TierStats& s = tier.stats();
  return {{"capacity_blocks", tier.capacity_blocks()},
          {"cached_blocks", tier.num_cached_blocks()},
          {"stored_blocks", s.stored_blocks},
          {"loaded_blocks", s.loaded_blocks},
          {"hits", s.hits},
          {"evictions", s.evictions},
          {"degraded", s.degraded}};
}

json request_json(const SchedulerRequest& r, const char* status, const KVCacheManager& manager) {
  json j{{"id", r.kv.id.value},
         {"status", status},
         {"prompt_tokens", r.kv.num_prompt_tokens},
         {"tokens", r.kv.tokens.size()},
         {"hit_tokens", std::max(0, r.prefix_hit_tokens)},
         {"sample_index", r.sample_index},
         {"preemptions", r.num_preemptions}};
  // Device blocks: a running request's, and a swapped one's while its KV loads back into them.
  json blocks = json::array();
  if (r.status == RequestStatus::kRunning || r.swap_in_pending)
    for (BlockId b : manager.get_block_ids(r.kv)) blocks.push_back(b.value);
  j["blocks"] = std::move(blocks);
  // A swapped request's KV waits in host memory or a lower tier: how many blocks of it.
  const int bs = manager.block_size();
  j["swapped_blocks"] = r.status == RequestStatus::kSwapped ? (r.swapped_tokens + bs - 1) / bs : 0;
  return j;
}

}  // namespace

json dashboard_state(const LLMEngine& engine) {
  const KVCacheManager& manager = engine.manager();
  const BlockPool& pool = manager.pool();
  const auto blocks = pool.blocks();
  std::string states(blocks.size(), 'f');
  json refs = json::array();
  int32_t lru_head = kNoLink;
  for (const KVCacheBlock& b : blocks) {
    char& c = states[static_cast<size_t>(b.id.value)];
    if (b.is_null) c = 'n';
    else if (b.ref_cnt > 1) c = 's';
    else if (b.ref_cnt == 1) c = 'u';
    else if (b.has_hash) c = 'c';
    refs.push_back(b.ref_cnt);
    if (b.in_free_queue && b.prev_free == kNoLink) lru_head = b.id.value;
  }
  // Cached free blocks in eviction order: the free queue from its front (evicted first).
  json lru = json::array();
  for (int32_t i = lru_head; i != kNoLink; i = blocks[static_cast<size_t>(i)].next_free)
    if (blocks[static_cast<size_t>(i)].has_hash) lru.push_back(i);

  const Scheduler& scheduler = engine.scheduler();
  // Blocks of swapped requests whose KV is loading back from a tier: their copy is pending.
  for (const SchedulerRequest* r : scheduler.swapped())
    if (r->swap_in_pending)
      for (BlockId b : manager.get_block_ids(r->kv)) states[static_cast<size_t>(b.value)] = 'p';
  json requests = json::array();
  for (const SchedulerRequest* r : scheduler.running()) requests.push_back(request_json(*r, "running", manager));
  for (const SchedulerRequest* r : scheduler.waiting()) requests.push_back(request_json(*r, "waiting", manager));
  for (const SchedulerRequest* r : scheduler.swapped()) requests.push_back(request_json(*r, "swapped", manager));

  const PrefixCacheStats& p = manager.prefix_cache_stats();
  const SchedulerStats& s = scheduler.stats();
  json tiers = json::object();
  if (const TieredKVCache* t = engine.tiers()) {
    if (t->has_host()) tiers["host"] = tier_json(*t->host());
    if (t->has_disk()) tiers["disk"] = tier_json(*t->disk());
    if (t->has_remote()) {
      const RemoteTierStats r = t->remote()->stats();
      tiers["remote"] = {{"capacity_blocks", nullptr},
                         {"cached_blocks", nullptr},
                         {"stored_blocks", r.stored_blocks},
                         {"loaded_blocks", r.loaded_blocks},
                         {"hits", r.hits},
                         {"evictions", r.evictions},
                         {"degraded", r.degraded}};
    }
  }
  return {{"time_ms",
           std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count()},
          {"block_size", manager.block_size()},
          {"num_blocks", blocks.size()},
          {"blocks", states},
          {"refs", refs},
          {"lru", lru},
          {"requests", requests},
          {"counters",
           {{"steps", engine.stats().steps},
            {"prefix_queries", p.queries},
            {"prefix_hits", p.hits},
            {"preemptions", s.preemptions_recompute + s.preemptions_swap},
            {"evictions", pool.stats().evictions},
            {"swapped_out_blocks", s.blocks_swapped_out},
            {"swapped_in_blocks", s.blocks_swapped_in},
            {"cow_copies", engine.stats().cow_copies},
            {"output_tokens", engine.stats().output_tokens}}},
          {"kv_usage", manager.usage()},
          {"running", scheduler.num_running()},
          {"waiting", scheduler.num_waiting()},
          {"swapped", scheduler.num_swapped()},
          {"tiers", tiers}};
}

std::string DashboardSnapshots::get() {
  std::lock_guard lock(mutex_);  // viewers arriving together wait for one snapshot
  const auto now = std::chrono::steady_clock::now();
  if (!json_.empty() && now - taken_ < period_) return json_;
  double cost_ms = 0;
  json state = service_.call([&cost_ms](LLMEngine& engine) {
    const auto t0 = std::chrono::steady_clock::now();
    json j = dashboard_state(engine);
    cost_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return j;
  });
  state["snapshot_cost_ms"] = cost_ms;
  json_ = json_text(state);
  taken_ = std::chrono::steady_clock::now();
  cost_ms_ = cost_ms;
  return json_;
}

double DashboardSnapshots::last_cost_ms() const {
  std::lock_guard lock(mutex_);
  return cost_ms_;
}

}  // namespace pagedkv::server
