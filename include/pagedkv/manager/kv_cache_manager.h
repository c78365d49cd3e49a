// KVCacheManager: the scheduler's whole view of KV memory (vLLM v1's KVCacheManager, plus the
// v0 BlockSpaceManager features users still need: can_allocate with a watermark, fork and
// copy-on-write). It owns the BlockPool, one block table per request per KV-cache group, the
// block hasher and the prefix-cache statistics. It never touches KV bytes: copy-on-write
// produces (src, dst) pairs that whoever owns the bytes drains with take_pending_copies().
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/core/kv_cache_spec.h"
#include "pagedkv/manager/request.h"
#include "pagedkv/prefix/block_hasher.h"

namespace pagedkv {

struct KVCacheManagerConfig {
  KVCacheConfig cache;  // pool size and KV-cache groups
  int max_model_len = 0;  // longest sequence; 0 = what the pool can hold
  bool enable_caching = true;  // prefix caching
  HashAlgorithm hash_algorithm = HashAlgorithm::kXxh3_128;
  uint64_t hash_seed = 0;  // part of the configuration: same seed, same hashes
  double watermark = 0.01;  // can_allocate keeps this fraction of blocks free
  bool enable_events = false;
  std::unique_ptr<EvictionPolicy> eviction_policy;  // null: LRU (vLLM's free queue)
  HashFunction hash_function = nullptr;  // tests: override the hash (collisions)
  // allocate_slots answers a call that adds no block and caches none (most decode steps) without
  // the general path. Off only in tests that compare the two paths.
  bool enable_steady_state_fast_path = true;
  // Sliding-window groups (hybrid models). With retention on, a sliding block is cached only
  // where a lookup can reach it: in the window before the aligned end of the request's prompt
  // and before the start of its last block (a repeat or an edit of that block hits there),
  // before the point where its prompt leaves a prefix the full-attention groups had cached (a
  // shared system prompt: the next request sharing it hits there),
  // before every multiple of `sliding_window_checkpoint_interval` tokens (0: none), and before
  // the aligned end of the sequence when it is freed; those are retention checkpoints. Any other
  // block that leaves the window is dropped to the front of the free queue (evicted first)
  // instead of pushing cached full-attention blocks out. Off: every full block is cached and
  // freed to the back (the behaviour vLLM users saw collapse, vllm#48435).
  bool sliding_window_retention = true;
  int sliding_window_checkpoint_interval = 0;  // tokens, a multiple of every group's block size
  // The largest prefill chunk the scheduler hands allocate_slots (vLLM's max_num_batched_tokens);
  // can_allocate sizes a request by its first chunk and a sliding group by its real footprint,
  // ceil(min(window - 1 + chunk, tokens) / block_size) + 1 blocks (core/block_footprint.h).
  // 0: the whole prompt at once.
  int max_num_batched_tokens = 0;
};

// vLLM v0's AllocStatus: OK now, LATER once others finish, NEVER (larger than the cache).
enum class AllocStatus { kOk, kLater, kNever };
std::string_view alloc_status_name(AllocStatus s);

// Cached prefix blocks found for a request, per group (vLLM's KVCacheBlocks). Each group's
// blocks are of its own block size; num_computed_tokens is a multiple of every group's.
struct ComputedBlocks {
  int num_groups = 0;
  std::array<std::vector<BlockId>, kMaxKVCacheGroups> blocks;
  int num_computed_tokens = 0;
  // Hybrid models: the prefix each group confirmed on its own (capped at num_tokens - 1), and
  // the group whose answer set num_computed_tokens (-1: no group cut the hit short).
  std::array<int, kMaxKVCacheGroups> group_hit_tokens{};
  int limiting_group = -1;
  void clear() {
    for (auto& b : blocks) b.clear();
    num_computed_tokens = 0;
    group_hit_tokens = {};
    limiting_group = -1;
  }
};

// The blocks an allocate_slots call added, per group: views into the request's block tables,
// valid until the next call that changes that request. The list of views (kMaxKVCacheGroups of
// them, empty past num_groups) is the manager's, valid until its next allocate_slots call: the
// answer stays a few bytes however many groups there may be (a decode step copies it).
struct NewBlocks {
  int num_groups = 0;
  std::span<const std::span<const BlockId>> blocks;
  // Entries before the new blocks changed (copy-on-write, sliding-window release): a worker-side
  // table must re-read the whole row, not just append.
  bool table_rewritten = false;
};

// Lookups by requests never preempted, and (apart, as vLLM counts them) lookups by requests
// re-admitted after a preemption, whose own earlier blocks inflate the hit rate.
struct PrefixCacheStats {
  uint64_t requests = 0;  // lookups
  uint64_t queries = 0;  // tokens looked up
  uint64_t hits = 0;  // tokens found
  uint64_t hit_requests = 0;  // lookups that found at least one block (request-level hits)
  uint64_t preempted_requests = 0;
  uint64_t preempted_queries = 0;
  uint64_t preempted_hits = 0;
  int num_groups = 0;  // entries of the per-group arrays below in use
  // Per KV-cache group (lookups by requests never preempted): the tokens each group confirmed
  // on its own, and the lookups whose hit that group cut short (hybrid models: which group
  // limits the prefix cache).
  std::array<uint64_t, kMaxKVCacheGroups> group_hit_tokens{};
  std::array<uint64_t, kMaxKVCacheGroups> limited_by_group{};
  // Sliding-window lookups: cache probes the right-to-left window search made (a miss skips a
  // whole window, so a lookup costs O(blocks / window + window) probes, not O(blocks)).
  uint64_t window_search_probes = 0;
  double hit_rate() const { return queries ? static_cast<double>(hits) / static_cast<double>(queries) : 0.0; }
};

class KVCacheCoordinator;  // the groups' policies and the common prefix hit (src/manager/)

class KVCacheManager {
 public:
  explicit KVCacheManager(KVCacheManagerConfig config);
  ~KVCacheManager();

  // Prefix lookup: the longest run of cached full blocks from the start of the request
  // (at most num_tokens - 1 tokens, so at least one token is computed), and the number of
  // tokens they cover. With groups of different block sizes the hit is a multiple of their
  // least common multiple (every group's table must end on a block boundary there). Touches nothing; counts the lookup
  // in the prefix-cache stats.
  void get_computed_blocks(Request& request, ComputedBlocks& out);
  ComputedBlocks get_computed_blocks(Request& request);

  // Reserves slots for `num_new_tokens` more tokens (plus `num_lookahead_tokens`), taking
  // `new_computed_blocks` (from get_computed_blocks, covering `num_new_computed_tokens`) as the
  // request's prefix. Returns the new blocks, or nullopt with nothing changed when the pool
  // cannot supply them. Cached free blocks the request is about to reuse count as unavailable,
  // so admission never over-commits. Full blocks up to the scheduled tokens are cached.
  std::optional<NewBlocks> allocate_slots(Request& request, int num_new_tokens, int num_new_computed_tokens = 0,
                                          const ComputedBlocks* new_computed_blocks = nullptr,
                                          int num_lookahead_tokens = 0, bool delay_cache_blocks = false);

  // Blocks allocate_slots would take from the free set for a request that will hold `num_tokens`
  // slots after taking `new_computed_blocks` (copy-on-write copies included).
  int get_num_blocks_to_allocate(const Request& request, int num_tokens,
                                 const ComputedBlocks* new_computed_blocks = nullptr) const;

  // Releases every block of the request (tail first, so its private tail is evicted before its
  // shared head). Returns false if the manager holds nothing for it.
  bool free(const Request& request);

  // Before freeing a request whose scheduled step will not run (preempted after allocate_slots
  // in the same step): full blocks beyond its computed tokens were registered in the cache by
  // allocate_slots but their KV was never written; drop those entries so no one hits them.
  void uncache_uncomputed_blocks(const Request& request);

  // v0 admission check with the watermark.
  AllocStatus can_allocate(Request& request);

  // Parallel sampling / beam search: `child` shares all of `parent`'s blocks. The first write
  // into a shared, partially filled block copies it (copy-on-write).
  void fork(const Request& parent, const Request& child);
  // Copy-on-write pairs (src, dst) queued since the last call, for the owner of the KV bytes.
  std::vector<std::pair<BlockId, BlockId>> take_pending_copies();
  bool has_pending_copies() const { return !pending_copies_.empty(); }

  // The request's block table for a group (empty span if unknown).
  std::span<const BlockId> get_block_ids(const Request& request, int group = 0) const;
  std::span<const BlockId> get_block_ids(RequestId id, int group = 0) const;
  bool has_request(RequestId id) const { return index_.contains(id); }
  int num_requests() const { return static_cast<int>(index_.size()); }

  // Rewrites one entry of a request's table (swap-in to a new block, tier promotion).
  // The manager takes over the reference the caller holds on `block`; the old one is released.
  void replace_block(RequestId id, int group, int index, BlockId block);

  ResetResult reset_prefix_cache() { return pool_.reset_prefix_cache(); }
  double usage() const { return pool_.usage(); }
  int num_free_blocks() const { return pool_.num_free_blocks(); }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  // allocate_slots calls answered by the steady-state fast path (see the config).
  uint64_t steady_state_calls() const { return steady_state_calls_; }
  std::vector<KVEvent> take_events() { return pool_.take_events(); }

  // Computes any missing full-block hashes of the request (also done lazily by lookups).
  void hash_request(Request& request) const;
  // What block i (of group `group`) of the hashed request holds, as that group's lookups and
  // caching name it: for a caller that looks blocks up or caches them itself (a lower tier's
  // promotion). parent_block: see BlockContentKey.
  BlockContentKey content_key(const Request& request, int i, int32_t parent_block, int group = 0) const;
  // hash_request for a batch (requests arriving together): the same hashes, with the chains of
  // different requests interleaved where the hash allows it (BlockHasher::extend_many).
  void hash_requests(std::span<Request* const> requests);

  const BlockPool& pool() const { return pool_; }
  BlockPool& pool() { return pool_; }
  const BlockHasher& hasher() const { return hasher_; }
  const KVCacheConfig& cache_config() const { return config_.cache; }
  // The smallest group's block size: the granularity of the request's prefix hashes (with one
  // block size, the block size).
  int block_size() const { return block_size_; }
  int group_block_size(int group) const { return spec(group).block_size; }
  // Prefix hits are multiples of this many tokens: the least common multiple of the cacheable
  // groups' block sizes.
  int hit_alignment() const { return hit_alignment_; }
  int max_model_len() const { return max_model_len_; }
  int num_groups() const { return num_groups_; }
  int watermark_blocks() const { return watermark_blocks_; }

  // Validates the pool and that every block's ref count equals the number of table entries
  // pointing at it. Throws InvariantError.
  void check_invariants() const;

 private:
  // Aligned, with what a decode step reads first, so that a step touches one line of it.
  struct alignas(64) RequestBlocks {
    RequestId id;
    bool live = false;  // false: a released entry kept (with its tables' capacity) for reuse
    // Set by fork (on parent and child): only then can a block this request writes be shared,
    // so only then is copy-on-write checked.
    bool may_share_writable = false;
    // allocate_slots' steady-state bounds, kept by refresh_steady_limits whenever the tables or
    // num_cached change: a call needs no new block while its slots stay within
    // `steady_slot_limit` tokens (every group's blocks times its block size, the least), and
    // caches none while its tokens to cache stay below `steady_cache_limit` (the least, over the
    // groups, of the end of the first block not yet cached). 0 for a released entry.
    int steady_slot_limit = 0;
    int steady_cache_limit = 0;
    // Where the request's prompt left a cached full-attention prefix (in tokens) beyond its hit,
    // because a sliding group kept no window there: a shared prefix (a system prompt) that a
    // sliding group must keep a checkpoint at. 0: none.
    int divergence_tokens = 0;
    std::array<int, kMaxKVCacheGroups> num_cached{};  // leading blocks registered in the cache
    std::array<std::vector<BlockId>, kMaxKVCacheGroups> blocks;
  };

  // A request's entry: through the slot its Request remembers when that slot holds it (one
  // load; Request::manager_slot), else through the id index. Null when the manager holds none.
  const RequestBlocks* find_entry(const Request& request) const {
    const uint32_t slot = request.manager_slot;
    if (slot < entries_.size() && entries_[slot].live && entries_[slot].id == request.id) return &entries_[slot];
    return find_entry(request.id);
  }
  RequestBlocks* find_entry(const Request& request) {
    return const_cast<RequestBlocks*>(std::as_const(*this).find_entry(request));
  }
  const RequestBlocks* find_entry(RequestId id) const {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : &entries_[it->second];
  }
  RequestBlocks* find_entry(RequestId id) { return const_cast<RequestBlocks*>(std::as_const(*this).find_entry(id)); }
  // A new request's entry, reusing a released one (and its tables' capacity, and an index node)
  // when there is one, so steady-state admission allocates nothing. May move other entries.
  RequestBlocks& add_entry(RequestId id);
  void release_entry(RequestBlocks& entry);
  uint32_t slot_of(const RequestBlocks& entry) const { return static_cast<uint32_t>(&entry - entries_.data()); }

  const KVCacheSpec& spec(int g) const { return config_.cache.groups[static_cast<size_t>(g)].spec; }
  // allocate_slots' fast path: true when the call needs no new block, caches no block, hashes
  // nothing and frees nothing, so the general path would change nothing but return no blocks.
  bool is_steady_state(const Request& request, const RequestBlocks& state, int num_tokens_need_slot,
                       int num_tokens_to_cache, bool delay_cache_blocks) const;
  // allocate_slots' refusals, out of line: their formatting would otherwise cost every decode
  // step a larger stack frame.
  [[noreturn, gnu::cold, gnu::noinline]] static void refuse_allocate_slots(const Request& request, int num_new_tokens,
                                                                           int num_new_computed_tokens,
                                                                           int num_lookahead_tokens, int max_model_len,
                                                                           bool holds_blocks);
  // allocate_slots past its checks and the steady-state answer (num_computed: the request's
  // computed tokens with the new prefix hits).
  std::optional<NewBlocks> allocate_slots_general(Request& request, RequestBlocks* state, int num_computed,
                                                  int num_tokens_need_slot, int num_tokens_to_cache,
                                                  const ComputedBlocks* new_computed_blocks, bool delay_cache_blocks);
  // Recomputes the entry's steady-state bounds from its tables and num_cached.
  void refresh_steady_limits(RequestBlocks& entry) const;
  std::pair<int, int> steady_limits(const RequestBlocks& entry) const;
  int blocks_to_allocate(const Request& request, const RequestBlocks* state, int num_tokens,
                         const ComputedBlocks* new_computed_blocks) const;
  void copy_on_write(int g, RequestBlocks& state, int num_computed_tokens);

  KVCacheManagerConfig config_;
  int block_size_;
  int hit_alignment_ = 1;
  int max_model_len_;
  int watermark_blocks_;
  int num_groups_;
  BlockPool pool_;
  BlockHasher hasher_;
  using RequestIndex = std::unordered_map<RequestId, uint32_t>;
  std::vector<RequestBlocks> entries_;  // live and released entries; a slot never moves requests
  std::vector<uint32_t> released_entries_;
  RequestIndex index_;  // live request id -> slot
  std::vector<RequestIndex::node_type> spare_index_nodes_;
  std::vector<std::pair<BlockId, BlockId>> pending_copies_;
  PrefixCacheStats stats_;
  std::vector<BlockId> scratch_blocks_;
  std::vector<BlockHashJob> scratch_hash_jobs_;
  bool table_rewritten_ = false;
  uint64_t steady_state_calls_ = 0;
  // One policy per group, by attention kind (hit search, blocks needed, release of blocks that
  // left a window, caching, footprint), and the prefix hit they share.
  std::unique_ptr<KVCacheCoordinator> coordinator_;
  std::optional<NewBlocks> no_new_blocks_;  // the steady-state answer: no group gained a block
  // What NewBlocks::blocks views: the last general call's new blocks, and no blocks at all.
  std::array<std::span<const BlockId>, kMaxKVCacheGroups> new_block_views_{};
  const std::array<std::span<const BlockId>, kMaxKVCacheGroups> no_block_views_{};
  bool all_full_attention_ = false;  // every group is full attention (the fast path's domain)
  bool hash_per_block_ = false;  // every group's block is one hash block (hash_ratio 1)
};

// A decode step's whole test, on the entry's first cache line and the request's.
inline bool KVCacheManager::is_steady_state(const Request& request, const RequestBlocks& state,
                                            int num_tokens_need_slot, int num_tokens_to_cache,
                                            bool delay_cache_blocks) const {
  // Sliding-window and cross-attention groups release or size blocks by other rules; a forked
  // request may need copy-on-write.
  if (!all_full_attention_ || state.may_share_writable) return false;
  if (num_tokens_need_slot > state.steady_slot_limit) return false;  // needs a block
  if (!pool_.caching_enabled() || delay_cache_blocks) return true;
  // Caches no block. With one hash per block it hashes none either: its cached blocks are hashed,
  // so the request's hashes go past the cache limit. (Answered without reading the hashes, which
  // lie beyond the request's first cache line.)
  if (hash_per_block_ && num_tokens_to_cache < state.steady_cache_limit) return true;
  // Would hash: num_tokens_to_cache / block_size_ > hashes, without the division.
  if (num_tokens_to_cache >= (static_cast<int>(request.block_hashes.size()) + 1) * block_size_) return false;
  return request.skip_prefix_cache || num_tokens_to_cache < state.steady_cache_limit;  // else would cache one
}

// Inline, so that a decode step (most calls: no new block, nothing to cache) costs no call; the
// rest is allocate_slots_general.
inline std::optional<NewBlocks> KVCacheManager::allocate_slots(Request& request, int num_new_tokens,
                                                               int num_new_computed_tokens,
                                                               const ComputedBlocks* new_computed_blocks,
                                                               int num_lookahead_tokens, bool delay_cache_blocks) {
  // Slots are capped at max_model_len (lookahead near the end), but every scheduled full block
  // is cached: scheduling past the limit would index past the request's table.
  if (num_new_tokens <= 0 || num_new_computed_tokens < 0 || num_lookahead_tokens < 0 ||
      int64_t{request.num_computed_tokens} + num_new_computed_tokens + num_new_tokens > max_model_len_)
    refuse_allocate_slots(request, num_new_tokens, num_new_computed_tokens, num_lookahead_tokens, max_model_len_,
                          false);
  table_rewritten_ = false;
  RequestBlocks* state;
  if (const uint32_t slot = request.manager_slot;
      slot < entries_.size() && entries_[slot].live && entries_[slot].id == request.id) {
    state = &entries_[slot];
  } else {
    state = find_entry(request.id);
    if (state) request.manager_slot = slot_of(*state);
  }
  if (state && new_computed_blocks && new_computed_blocks->num_computed_tokens > 0)
    refuse_allocate_slots(request, num_new_tokens, num_new_computed_tokens, num_lookahead_tokens, max_model_len_, true);
  const int num_computed = request.num_computed_tokens + num_new_computed_tokens;
  const int num_tokens_need_slot = std::min(num_computed + num_new_tokens + num_lookahead_tokens, max_model_len_);
  const int num_tokens_to_cache = std::min(num_computed + num_new_tokens, request.num_tokens());
  if (state && config_.enable_steady_state_fast_path &&
      is_steady_state(request, *state, num_tokens_need_slot, num_tokens_to_cache, delay_cache_blocks)) {
    ++steady_state_calls_;
    // A copy of a constant answer: building one here (a named optional, or a NewBlocks moved into
    // one) costs a block clear or store-forwarding stalls on every decode step.
    return no_new_blocks_;
  }
  return allocate_slots_general(request, state, num_computed, num_tokens_need_slot, num_tokens_to_cache,
                                new_computed_blocks, delay_cache_blocks);
}

}  // namespace pagedkv
