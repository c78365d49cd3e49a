#include "pagedkv/manager/kv_cache_manager.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "kv_cache_coordinator.h"
#include "pagedkv/core/block_footprint.h"
#include "pagedkv/core/ceil_div.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
namespace {

// Index nodes of released requests kept for reuse (entries themselves are always kept, with
// their tables' capacity: live plus released never exceed the peak number of live requests).
constexpr size_t kMaxSpareRequests = 1024;

BlockPoolOptions pool_options(KVCacheManagerConfig& c) {
  c.cache.validate();
  if (static_cast<int>(c.cache.groups.size()) > kMaxKVCacheGroups)
    throw ConfigError(
        fmt::format("at most {} KV cache groups are supported, got {}", kMaxKVCacheGroups, c.cache.groups.size()));
  if (c.watermark < 0.0 || c.watermark >= 1.0)
    throw ConfigError(fmt::format("watermark must be in [0, 1), got {}", c.watermark));
  if (c.sliding_window_checkpoint_interval < 0 ||
      c.sliding_window_checkpoint_interval % KVCacheCoordinator::hit_alignment(c.cache) != 0)
    throw ConfigError(
        fmt::format("sliding_window_checkpoint_interval must be a non-negative multiple of the block size {}, got {}",
                    KVCacheCoordinator::hit_alignment(c.cache), c.sliding_window_checkpoint_interval));
  if (c.max_num_batched_tokens < 0)
    throw ConfigError(fmt::format("max_num_batched_tokens must not be negative, got {}", c.max_num_batched_tokens));
  BlockPoolOptions o;
  o.num_blocks = c.cache.num_blocks;
  for (const auto& g : c.cache.groups) o.group_specs.push_back(g.spec);
  o.block_size = c.cache.max_block_size();
  o.enable_caching = c.enable_caching;
  o.enable_events = c.enable_events;
  o.policy = std::move(c.eviction_policy);
  return o;
}

// Room for a hash per block of every token the request has room for: a caller that reserved
// its tokens for prompt plus outputs then decodes without the hash arrays reallocating.
void reserve_hashes(Request& r, int block_size) {
  const size_t blocks = r.tokens.capacity() / static_cast<size_t>(block_size);
  if (r.block_hashes.capacity() < blocks) r.block_hashes.reserve(blocks);
  if (!r.prefix_keys().empty() && r.block_extra_digests.capacity() < blocks) r.block_extra_digests.reserve(blocks);
}

BlockHasher make_hasher(const KVCacheManagerConfig& c) {
  return c.hash_function ? BlockHasher(c.cache.block_size(), c.hash_function, c.hash_seed)
                         : BlockHasher(c.cache.block_size(), c.hash_algorithm, c.hash_seed);
}

}  // namespace

std::string_view alloc_status_name(AllocStatus s) {
  switch (s) {
    case AllocStatus::kOk:
      return "OK";
    case AllocStatus::kLater:
      return "LATER";
    case AllocStatus::kNever:
      return "NEVER";
  }
  return "?";
}

KVCacheManager::KVCacheManager(KVCacheManagerConfig config)
    : config_(std::move(config)),
      block_size_(0),
      max_model_len_(0),
      watermark_blocks_(0),
      num_groups_(0),
      pool_(pool_options(config_)),
      hasher_(make_hasher(config_)) {
  block_size_ = config_.cache.block_size();
  hit_alignment_ = KVCacheCoordinator::hit_alignment(config_.cache);
  num_groups_ = static_cast<int>(config_.cache.groups.size());
  coordinator_ = std::make_unique<KVCacheCoordinator>(
      config_.cache, KVCacheGroupPlace{.pool = &pool_, .hash_block_size = block_size_, .root = hasher_.root()},
      SlidingWindowRetention{.enabled = config_.sliding_window_retention,
                             .checkpoint_interval = config_.sliding_window_checkpoint_interval,
                             .hit_alignment = hit_alignment_});
  stats_.num_groups = num_groups_;
  no_new_blocks_.emplace().num_groups = num_groups_;
  no_new_blocks_->blocks = no_block_views_;
  all_full_attention_ = true;
  for (int g = 0; g < num_groups_; ++g)
    all_full_attention_ = all_full_attention_ && coordinator_->group(g).is_full_attention();
  hash_per_block_ = std::all_of(config_.cache.groups.begin(), config_.cache.groups.end(),
                                [this](const KVCacheGroupSpec& g) { return g.spec.block_size == block_size_; });
  const int usable_tokens = (config_.cache.num_blocks - 1) * block_size_;
  max_model_len_ = config_.max_model_len > 0 ? config_.max_model_len : usable_tokens;
  if (config_.max_model_len < 0)
    throw ConfigError(fmt::format("max_model_len must not be negative, got {}", config_.max_model_len));
  watermark_blocks_ = static_cast<int>(config_.watermark * config_.cache.num_blocks);
  index_.reserve(1024);
  entries_.reserve(1024);
  released_entries_.reserve(1024);
  spare_index_nodes_.reserve(kMaxSpareRequests);
  scratch_blocks_.reserve(256);
}

KVCacheManager::~KVCacheManager() = default;

KVCacheManager::RequestBlocks& KVCacheManager::add_entry(RequestId id) {
  uint32_t slot;
  if (released_entries_.empty()) {
    slot = static_cast<uint32_t>(entries_.size());
    RequestBlocks& fresh = entries_.emplace_back();
    for (int g = 0; g < num_groups(); ++g)
      fresh.blocks[static_cast<size_t>(g)].reserve(static_cast<size_t>(ceil_div(max_model_len_, spec(g).block_size)));
  } else {
    slot = released_entries_.back();
    released_entries_.pop_back();
  }
  if (spare_index_nodes_.empty()) {
    index_.emplace(id, slot);
  } else {
    RequestIndex::node_type node = std::move(spare_index_nodes_.back());
    spare_index_nodes_.pop_back();
    node.key() = id;
    node.mapped() = slot;
    index_.insert(std::move(node));
  }
  RequestBlocks& entry = entries_[slot];
  entry.id = id;
  entry.live = true;
  return entry;
}

void KVCacheManager::release_entry(RequestBlocks& entry) {
  RequestIndex::node_type node = index_.extract(entry.id);
  if (spare_index_nodes_.size() < kMaxSpareRequests) spare_index_nodes_.push_back(std::move(node));
  for (auto& b : entry.blocks) b.clear();
  entry.num_cached = {};
  entry.divergence_tokens = 0;
  entry.may_share_writable = false;
  entry.steady_slot_limit = entry.steady_cache_limit = 0;
  entry.live = false;
  released_entries_.push_back(slot_of(entry));
}

BlockContentKey KVCacheManager::content_key(const Request& request, int i, int32_t parent_block, int group) const {
  return coordinator_->group(group).content_key(request, i, parent_block);
}

void KVCacheManager::hash_request(Request& request) const {
  if (!pool_.caching_enabled()) return;
  if (request.block_hashes.size() >= static_cast<size_t>(request.num_tokens() / block_size_)) return;
  reserve_hashes(request, block_size_);
  hasher_.extend(request.tokens, request.prefix_keys(), request.block_hashes, request.block_extra_digests);
}

void KVCacheManager::hash_requests(std::span<Request* const> requests) {
  if (!pool_.caching_enabled()) return;
  scratch_hash_jobs_.clear();
  for (Request* r : requests)
    if (r->block_hashes.size() < static_cast<size_t>(r->num_tokens() / block_size_)) {
      reserve_hashes(*r, block_size_);
      scratch_hash_jobs_.push_back(
          BlockHashJob{r->tokens, r->prefix_keys(), &r->block_hashes, &r->block_extra_digests});
    }
  hasher_.extend_many(scratch_hash_jobs_);
}

void KVCacheManager::get_computed_blocks(Request& request, ComputedBlocks& out) {
  out.clear();
  out.num_groups = num_groups();
  if (!pool_.caching_enabled() || request.skip_prefix_cache || request.num_tokens() == 0) return;
  hash_request(request);
  HitSearchStats search;
  const int hit = coordinator_->find_common_hit(request, request.num_tokens() - 1, out, search);
  out.num_computed_tokens = hit;
  stats_.window_search_probes += search.window_probes;
  if (request.num_preemptions > 0) {
    ++stats_.preempted_requests;
    stats_.preempted_queries += static_cast<uint64_t>(request.num_tokens());
    stats_.preempted_hits += static_cast<uint64_t>(hit);
  } else {
    ++stats_.requests;
    stats_.queries += static_cast<uint64_t>(request.num_tokens());
    stats_.hits += static_cast<uint64_t>(hit);
    if (hit > 0) ++stats_.hit_requests;
    for (int g = 0; g < num_groups(); ++g) {
      stats_.group_hit_tokens[static_cast<size_t>(g)] +=
          static_cast<uint64_t>(out.group_hit_tokens[static_cast<size_t>(g)]);
    }
    if (out.limiting_group >= 0) ++stats_.limited_by_group[static_cast<size_t>(out.limiting_group)];
  }
}

ComputedBlocks KVCacheManager::get_computed_blocks(Request& request) {
  ComputedBlocks out;
  get_computed_blocks(request, out);
  return out;
}

int KVCacheManager::get_num_blocks_to_allocate(const Request& request, int num_tokens,
                                               const ComputedBlocks* new_computed_blocks) const {
  return blocks_to_allocate(request, find_entry(request), num_tokens, new_computed_blocks);
}

int KVCacheManager::blocks_to_allocate(const Request& request, const RequestBlocks* state, int num_tokens,
                                       const ComputedBlocks* new_computed_blocks) const {
  const int num_computed =
      request.num_computed_tokens + (new_computed_blocks ? new_computed_blocks->num_computed_tokens : 0);
  int total = 0;
  for (int g = 0; g < num_groups(); ++g) {
    std::span<const BlockId> held, nc;
    if (state) held = state->blocks[static_cast<size_t>(g)];
    if (new_computed_blocks) nc = new_computed_blocks->blocks[static_cast<size_t>(g)];
    total += coordinator_->group(g).blocks_needed(request, held, state && state->may_share_writable, num_tokens, nc,
                                                  num_computed);
  }
  return total;
}

void KVCacheManager::copy_on_write(int g, RequestBlocks& state, int num_computed_tokens) {
  auto& blocks = state.blocks[static_cast<size_t>(g)];
  const int bs = spec(g).block_size;
  for (int i = num_computed_tokens / bs; i < static_cast<int>(blocks.size()); ++i) {
    BlockId& b = blocks[static_cast<size_t>(i)];
    const KVCacheBlock& blk = pool_.block(b);
    if (blk.is_null || blk.ref_cnt <= 1) continue;
    scratch_blocks_.clear();
    pool_.allocate(1, scratch_blocks_);  // counted by blocks_needed: cannot fail
    const BlockId fresh = scratch_blocks_.front();
    // Only a block that already holds computed tokens has bytes worth copying.
    if (i * bs < num_computed_tokens) pending_copies_.emplace_back(b, fresh);
    const BlockId old = b;
    b = fresh;
    pool_.free_blocks(std::span<const BlockId>(&old, 1));  // others still hold it
    table_rewritten_ = true;
  }
}

std::pair<int, int> KVCacheManager::steady_limits(const RequestBlocks& entry) const {
  int slots = std::numeric_limits<int>::max(), cache = std::numeric_limits<int>::max();
  for (int g = 0; g < num_groups(); ++g) {
    const auto gi = static_cast<size_t>(g);
    const int bs = spec(g).block_size;
    // ceil_div(n, bs) > blocks  <=>  n > blocks * bs;  cached < n / bs  <=>  n >= (cached + 1) * bs.
    slots = std::min(slots, static_cast<int>(entry.blocks[gi].size()) * bs);
    cache = std::min(cache, (entry.num_cached[gi] + 1) * bs);
  }
  return {slots, cache};
}

void KVCacheManager::refresh_steady_limits(RequestBlocks& entry) const {
  std::tie(entry.steady_slot_limit, entry.steady_cache_limit) = steady_limits(entry);
}

// allocate_slots' refusals (its fast path is inline in the header).
void KVCacheManager::refuse_allocate_slots(const Request& request, int num_new_tokens, int num_new_computed_tokens,
                                           int num_lookahead_tokens, int max_model_len, bool holds_blocks) {
  if (num_new_tokens <= 0)
    throw UsageError(fmt::format("allocate_slots: num_new_tokens must be positive, got {}", num_new_tokens));
  if (num_new_computed_tokens < 0 || num_lookahead_tokens < 0)
    throw UsageError("allocate_slots: token counts must not be negative");
  if (holds_blocks)
    throw UsageError(fmt::format("allocate_slots: request {} already holds blocks; prefix hits apply only at admission",
                                 request.id.value));
  throw UsageError(
      fmt::format("allocate_slots: request {} would hold {} tokens, more than max_model_len {}", request.id.value,
                  int64_t{request.num_computed_tokens} + num_new_computed_tokens + num_new_tokens, max_model_len));
}

// Out of line, so that a steady-state call does not pay for its stack frame.
[[gnu::noinline]] std::optional<NewBlocks> KVCacheManager::allocate_slots_general(
    Request& request, RequestBlocks* state, int num_computed, int num_tokens_need_slot, int num_tokens_to_cache,
    const ComputedBlocks* new_computed_blocks, bool delay_cache_blocks) {
  if (state)
    for (int g = 0; g < num_groups(); ++g)
      if (coordinator_->group(g).remove_skipped_blocks(state->blocks[static_cast<size_t>(g)],
                                                       request.num_computed_tokens, scratch_blocks_))
        table_rewritten_ = true;

  const int needed = blocks_to_allocate(request, state, num_tokens_need_slot, new_computed_blocks);
  if (needed > pool_.num_free_blocks()) {
    if (state) refresh_steady_limits(*state);  // sliding groups may have released blocks
    return std::nullopt;
  }

  if (!state) {
    state = &add_entry(request.id);
    request.manager_slot = slot_of(*state);
  }
  if (new_computed_blocks) {
    // A full-attention group confirmed more than the hit: the prompt shares a cached prefix up
    // to there, and the window before it is worth a checkpoint.
    int full_hit = 0;
    for (int g = 0; g < num_groups(); ++g)
      if (coordinator_->group(g).is_full_attention())
        full_hit = std::max(full_hit, new_computed_blocks->group_hit_tokens[static_cast<size_t>(g)]);
    if (full_hit > new_computed_blocks->num_computed_tokens) state->divergence_tokens = full_hit;
  }
  NewBlocks result;
  result.num_groups = num_groups();
  std::array<size_t, kMaxKVCacheGroups> first_new{};
  // Every group's hits leave the free set before any group allocates: else one group's new
  // blocks could evict a free cached block that another group's hit is about to take.
  for (int g = 0; g < num_groups(); ++g) {
    const auto gi = static_cast<size_t>(g);
    auto& blocks = state->blocks[gi];
    if (new_computed_blocks && !new_computed_blocks->blocks[gi].empty()) {
      const auto& hits = new_computed_blocks->blocks[gi];
      pool_.touch(hits);
      for (BlockId b : hits)
        if (b != pool_.null_block()) pool_.record_hit(b);
      blocks.insert(blocks.end(), hits.begin(), hits.end());
      state->num_cached[gi] = static_cast<int>(hits.size());
    }
  }
  for (int g = 0; g < num_groups(); ++g) {
    const auto gi = static_cast<size_t>(g);
    auto& blocks = state->blocks[gi];
    KVCacheGroup& group = coordinator_->group(g);
    if (state->may_share_writable && group.cacheable()) copy_on_write(g, *state, num_computed);
    first_new[gi] = blocks.size();
    const int want = group.blocks_to_add(request, static_cast<int>(blocks.size()), num_tokens_need_slot);
    if (want > 0 && !pool_.allocate(want, blocks))
      throw InvariantError("allocate_slots: the pool refused blocks it reported free");
  }
  if (pool_.caching_enabled() && !delay_cache_blocks) {
    if (num_tokens_to_cache / block_size_ > static_cast<int>(request.block_hashes.size())) hash_request(request);
    if (!request.skip_prefix_cache)
      for (int g = 0; g < num_groups(); ++g) {
        const auto gi = static_cast<size_t>(g);
        coordinator_->group(g).cache_full_blocks(request, state->blocks[gi], state->num_cached[gi], num_tokens_to_cache,
                                                 state->divergence_tokens);
      }
  }
  for (int g = 0; g < num_groups(); ++g) {
    const auto gi = static_cast<size_t>(g);
    new_block_views_[gi] = std::span<const BlockId>(state->blocks[gi]).subspan(first_new[gi]);
  }
  refresh_steady_limits(*state);
  result.blocks = new_block_views_;
  result.table_rewritten = table_rewritten_;
  return result;
}

bool KVCacheManager::free(const Request& request) {
  RequestBlocks* entry = find_entry(request);
  if (!entry) return false;
  for (int g = 0; g < num_groups(); ++g) {
    const auto gi = static_cast<size_t>(g);
    coordinator_->group(g).free(entry->blocks[gi], entry->num_cached[gi]);
  }
  release_entry(*entry);
  return true;
}

void KVCacheManager::uncache_uncomputed_blocks(const Request& request) {
  RequestBlocks* entry = find_entry(request);
  if (!entry) return;
  for (int g = 0; g < num_groups(); ++g) {
    const auto gi = static_cast<size_t>(g);
    const int first_uncomputed = request.num_computed_tokens / spec(g).block_size;
    auto& blocks = entry->blocks[gi];
    int& num_cached = entry->num_cached[gi];
    for (int i = first_uncomputed; i < num_cached && i < static_cast<int>(blocks.size()); ++i)
      if (blocks[static_cast<size_t>(i)] != pool_.null_block()) pool_.invalidate_cached(blocks[static_cast<size_t>(i)]);
    num_cached = std::min(num_cached, first_uncomputed);
  }
  refresh_steady_limits(*entry);
}

AllocStatus KVCacheManager::can_allocate(Request& request) {
  if (request.num_tokens() > max_model_len_) return AllocStatus::kNever;
  // Each group's real footprint: a request is admitted chunk by chunk (the whole prompt when
  // max_num_batched_tokens is 0), and a sliding group holds only its window plus the chunk.
  // NEVER must count what an empty cache would need, else it could answer LATER forever.
  const int chunk = config_.max_num_batched_tokens > 0 ? std::min(config_.max_num_batched_tokens, request.num_tokens())
                                                       : request.num_tokens();
  int required = 0;
  for (int g = 0; g < num_groups(); ++g) required += coordinator_->group(g).footprint_blocks(request, chunk);
  if (pool_.num_usable_blocks() - required < watermark_blocks_) return AllocStatus::kNever;
  // Cached prefix blocks already in use cost nothing; cached free ones are taken from the free set.
  ComputedBlocks hits;
  hits.num_groups = num_groups();
  if (pool_.caching_enabled() && !request.skip_prefix_cache && request.num_tokens() > 0) {
    hash_request(request);
    HitSearchStats search;  // not counted: an admission check, not a lookup
    hits.num_computed_tokens = coordinator_->find_common_hit(request, request.num_tokens() - 1, hits, search);
  }
  const int first_chunk_end = config_.max_num_batched_tokens > 0
                                  ? std::min(request.num_tokens(), hits.num_computed_tokens + chunk)
                                  : request.num_tokens();
  const int need = get_num_blocks_to_allocate(request, first_chunk_end, &hits);
  return pool_.num_free_blocks() - need >= watermark_blocks_ ? AllocStatus::kOk : AllocStatus::kLater;
}

void KVCacheManager::fork(const Request& parent, const Request& child) {
  const RequestBlocks* found = find_entry(parent);
  if (!found) throw UsageError(fmt::format("fork: parent request {} holds no blocks", parent.id.value));
  if (index_.contains(child.id))
    throw UsageError(fmt::format("fork: child request {} already holds blocks", child.id.value));
  const uint32_t parent_slot = slot_of(*found);
  RequestBlocks& child_entry = add_entry(child.id);  // may move the parent's entry
  RequestBlocks& parent_entry = entries_[parent_slot];
  parent_entry.may_share_writable = true;
  for (int g = 0; g < num_groups(); ++g) {
    const auto gi = static_cast<size_t>(g);
    child_entry.blocks[gi].assign(parent_entry.blocks[gi].begin(), parent_entry.blocks[gi].end());
    pool_.touch(child_entry.blocks[gi]);
  }
  child_entry.num_cached = parent_entry.num_cached;
  child_entry.may_share_writable = true;
  refresh_steady_limits(child_entry);
}

std::vector<std::pair<BlockId, BlockId>> KVCacheManager::take_pending_copies() {
  std::vector<std::pair<BlockId, BlockId>> out;
  out.swap(pending_copies_);
  return out;
}

std::span<const BlockId> KVCacheManager::get_block_ids(RequestId id, int group) const {
  const RequestBlocks* entry = find_entry(id);
  if (!entry || group < 0 || group >= num_groups()) return {};
  return entry->blocks[static_cast<size_t>(group)];
}

std::span<const BlockId> KVCacheManager::get_block_ids(const Request& request, int group) const {
  const RequestBlocks* entry = find_entry(request);
  if (!entry || group < 0 || group >= num_groups()) return {};
  return entry->blocks[static_cast<size_t>(group)];
}

void KVCacheManager::replace_block(RequestId id, int group, int index, BlockId block) {
  RequestBlocks* entry = find_entry(id);
  if (!entry) throw UsageError(fmt::format("replace_block: unknown request {}", id.value));
  auto& blocks = entry->blocks[static_cast<size_t>(group)];
  if (index < 0 || index >= static_cast<int>(blocks.size()))
    throw UsageError(fmt::format("replace_block: index {} out of range [0, {})", index, blocks.size()));
  const BlockId old = blocks[static_cast<size_t>(index)];
  blocks[static_cast<size_t>(index)] = block;
  int& num_cached = entry->num_cached[static_cast<size_t>(group)];
  num_cached = std::min(num_cached, index);
  refresh_steady_limits(*entry);
  if (old != pool_.null_block()) pool_.free_blocks(std::span<const BlockId>(&old, 1));
}

void KVCacheManager::check_invariants() const {
  pool_.check_invariants();
  std::vector<int32_t> refs(static_cast<size_t>(pool_.num_blocks()), 0);
  size_t live = 0;
  for (const RequestBlocks& state : entries_) {
    if (!state.live) {
      for (const auto& b : state.blocks)
        if (!b.empty()) throw InvariantError("a released request entry still holds blocks");
      continue;
    }
    ++live;
    const RequestId id = state.id;
    auto indexed = index_.find(id);
    if (indexed == index_.end() || indexed->second != slot_of(state))
      throw InvariantError(fmt::format("request {} is live but its index entry is missing or wrong", id.value));
    if (const auto [slots, cache] = steady_limits(state);
        slots != state.steady_slot_limit || cache != state.steady_cache_limit)
      throw InvariantError(fmt::format("request {}: steady-state bounds {}/{} but its tables give {}/{}", id.value,
                                       state.steady_slot_limit, state.steady_cache_limit, slots, cache));
    for (int g = 0; g < num_groups(); ++g) {
      const auto gi = static_cast<size_t>(g);
      const auto& blocks = state.blocks[gi];
      if (state.num_cached[gi] > static_cast<int>(blocks.size()))
        throw InvariantError(fmt::format("request {} claims {} cached blocks but holds {}", id.value,
                                         state.num_cached[gi], blocks.size()));
      for (size_t i = 0; i < blocks.size(); ++i) {
        const BlockId b = blocks[i];
        if (b.value < 0 || b.value >= pool_.num_blocks())
          throw InvariantError(fmt::format("request {} holds out-of-range block {}", id.value, b.value));
        if (b == pool_.null_block()) continue;
        ++refs[static_cast<size_t>(b.value)];
        // A cached block in this table holds one of this group's blocks (its block size).
        if (const KVCacheBlock& blk = pool_.block(b);
            blk.has_hash && (blk.group != g || blk.num_tokens != spec(g).block_size))
          throw InvariantError(
              fmt::format("request {} group {} (block size {}) holds block {} cached by group {} with {} tokens",
                          id.value, g, spec(g).block_size, b.value, blk.group, blk.num_tokens));
        // Sliding groups under retention cache only reachable blocks (see cache_full_blocks).
        if (pool_.caching_enabled() && coordinator_->group(g).caches_every_full_block() &&
            static_cast<int>(i) < state.num_cached[gi] && !pool_.block(b).has_hash)
          throw InvariantError(
              fmt::format("request {} block {} (#{}) should be cached but has no hash", id.value, b.value, i));
      }
    }
  }
  if (live != index_.size())
    throw InvariantError(fmt::format("{} live request entries but {} indexed", live, index_.size()));
  for (const KVCacheBlock& b : pool_.blocks()) {
    if (b.is_null) continue;
    if (refs[static_cast<size_t>(b.id.value)] != b.ref_cnt)
      throw InvariantError(fmt::format("block {} has ref_cnt {} but {} table entries point at it", b.id.value,
                                       b.ref_cnt, refs[static_cast<size_t>(b.id.value)]));
  }
}

}  // namespace pagedkv
