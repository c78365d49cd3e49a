// Shared helpers of the core tests (block, prefix and manager tests): small configurations, token sequences,
// and a manager wrapper that runs the invariant checker after every operation, so that no test
// can forget it.
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <vector>

#include "pagedkv/block/block_pool.h"
#include "pagedkv/manager/kv_cache_manager.h"

namespace pagedkv::testing {

// A full-attention manager configuration: `num_blocks` physical blocks (block 0 is the null
// block) of `block_size` tokens, one group, caching on, no watermark unless asked.
inline KVCacheManagerConfig full_attention_config(int num_blocks, int block_size, double watermark = 0.0) {
  KVCacheManagerConfig c;
  c.cache.num_blocks = num_blocks;
  KVCacheGroupSpec g;
  g.spec.kind = AttentionKind::kFull;
  g.spec.block_size = block_size;
  c.cache.groups.push_back(g);
  c.watermark = watermark;
  return c;
}

inline BlockPoolOptions pool_options(int num_blocks, int block_size, bool events = false) {
  BlockPoolOptions o;
  o.num_blocks = num_blocks;
  o.block_size = block_size;
  o.enable_caching = true;
  o.enable_events = events;
  return o;
}

// `n` consecutive token ids starting at `first` (distinct content for distinct `first`).
inline std::vector<TokenId> iota_tokens(int n, TokenId first) {
  std::vector<TokenId> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

inline std::vector<TokenId> concat(std::vector<TokenId> a, const std::vector<TokenId>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline std::vector<int32_t> ids_of(std::span<const BlockId> blocks) {
  std::vector<int32_t> out;
  for (BlockId b : blocks) out.push_back(b.value);
  return out;
}

// Front-to-back ids of the pool's free queue (its eviction order).
inline std::vector<int32_t> free_order(const BlockPool& pool) {
  std::vector<int32_t> out;
  for (const KVCacheBlock& b : pool.blocks())
    if (b.in_free_queue) out.push_back(b.id.value);  // membership only; order below
  std::vector<int32_t> ordered;
  int32_t head = kNoLink;
  for (int32_t id : out)
    if (pool.block(BlockId{id}).prev_free == kNoLink) head = id;
  for (int32_t i = head; i != kNoLink; i = pool.block(BlockId{i}).next_free) ordered.push_back(i);
  EXPECT_EQ(ordered.size(), out.size()) << "free queue links do not cover its members";
  return ordered;
}

// The manager with the checker after every call. Tests use it exactly like KVCacheManager;
// a broken invariant fails the test at the operation that broke it.
class CheckedManager {
 public:
  explicit CheckedManager(KVCacheManagerConfig config) : m_(std::move(config)) { check(); }

  ComputedBlocks get_computed_blocks(Request& r) {
    ComputedBlocks out = m_.get_computed_blocks(r);
    check();
    return out;
  }
  std::optional<NewBlocks> allocate_slots(Request& r, int num_new_tokens, int num_new_computed_tokens = 0,
                                          const ComputedBlocks* hits = nullptr, int num_lookahead_tokens = 0,
                                          bool delay_cache_blocks = false) {
    auto out =
        m_.allocate_slots(r, num_new_tokens, num_new_computed_tokens, hits, num_lookahead_tokens, delay_cache_blocks);
    check();
    return out;
  }
  // Admission as vLLM's scheduler does it: lookup, then allocate the rest of the prompt.
  // Returns the prefix-hit token count, or nullopt when the pool cannot take the request.
  std::optional<int> admit(Request& r) {
    ComputedBlocks hits = get_computed_blocks(r);
    auto got = allocate_slots(r, r.num_tokens() - hits.num_computed_tokens, hits.num_computed_tokens, &hits);
    if (!got) return std::nullopt;
    r.num_computed_tokens = r.num_tokens();  // the forward pass computed the whole prompt
    return hits.num_computed_tokens;
  }
  // One decode step: schedule the last sampled token, then sample `next`.
  std::optional<NewBlocks> decode(Request& r, TokenId next) {
    r.append_token(next);
    auto got = allocate_slots(r, 1);
    if (got) r.num_computed_tokens += 1;
    else r.tokens.pop_back();
    return got;
  }
  bool free(const Request& r) {
    bool out = m_.free(r);
    check();
    return out;
  }
  AllocStatus can_allocate(Request& r) {
    AllocStatus s = m_.can_allocate(r);
    check();
    return s;
  }
  void fork(const Request& parent, const Request& child) {
    m_.fork(parent, child);
    check();
  }
  ResetResult reset_prefix_cache() {
    ResetResult out = m_.reset_prefix_cache();
    check();
    return out;
  }
  std::vector<int32_t> table(const Request& r, int group = 0) const { return ids_of(m_.get_block_ids(r, group)); }

  KVCacheManager* operator->() { return &m_; }
  const KVCacheManager* operator->() const { return &m_; }
  KVCacheManager& raw() { return m_; }
  void check() const { ASSERT_NO_THROW(m_.check_invariants()); }

 private:
  KVCacheManager m_;
};

// The pool with the checker after every call.
class CheckedPool {
 public:
  explicit CheckedPool(BlockPoolOptions options) : p_(std::move(options)) { check(); }

  std::vector<BlockId> allocate(int n) {
    std::vector<BlockId> out;
    EXPECT_TRUE(p_.allocate(n, out)) << "allocate(" << n << ") with " << p_.num_free_blocks() << " free";
    check();
    return out;
  }
  bool try_allocate(int n, std::vector<BlockId>& out) {
    bool ok = p_.allocate(n, out);
    check();
    return ok;
  }
  void touch(std::vector<BlockId> ids) {
    p_.touch(ids);
    check();
  }
  void free_blocks(std::vector<BlockId> ids) {
    p_.free_blocks(ids);
    check();
  }
  void cache_block(BlockId id, const BlockContentKey& key) {
    p_.cache_block(id, key);
    check();
  }
  ResetResult reset_prefix_cache() {
    ResetResult r = p_.reset_prefix_cache();
    check();
    return r;
  }
  BlockPool* operator->() { return &p_; }
  const BlockPool* operator->() const { return &p_; }
  BlockPool& raw() { return p_; }
  void check() const { ASSERT_NO_THROW(p_.check_invariants()); }

 private:
  BlockPool p_;
};

}  // namespace pagedkv::testing
