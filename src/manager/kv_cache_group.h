// One KV-cache group's policy, chosen by its attention kind once, when the manager is built.
// Every call dispatches with one switch over the kinds (visit): no virtual call, and each
// policy's code can inline into the manager's loops over groups, which the admission and
// caching paths run for every request.
#pragma once

#include <span>
#include <variant>
#include <vector>

#include "cross_attention_group.h"
#include "full_attention_group.h"
#include "sliding_window_group.h"

namespace pagedkv {

class KVCacheGroup {
  using Policy = std::variant<FullAttentionGroup, SlidingWindowGroup, CrossAttentionGroup>;

  // The one dispatch: a switch over the policy's kind.
  template <typename F>
  decltype(auto) visit(F&& f) {
    switch (policy_.index()) {
      case 0:
        return f(*std::get_if<0>(&policy_));
      case 1:
        return f(*std::get_if<1>(&policy_));
      default:
        return f(*std::get_if<2>(&policy_));
    }
  }
  template <typename F>
  decltype(auto) visit(F&& f) const {
    switch (policy_.index()) {
      case 0:
        return f(*std::get_if<0>(&policy_));
      case 1:
        return f(*std::get_if<1>(&policy_));
      default:
        return f(*std::get_if<2>(&policy_));
    }
  }

 public:
  KVCacheGroup(int index, const KVCacheSpec& spec, const KVCacheGroupPlace& place,
               const SlidingWindowRetention& retention)
      : policy_(make_policy(index, spec, place, retention)) {}

  // Whether groups of this kind hold prefix-cacheable blocks.
  static bool cacheable(AttentionKind kind) {
    switch (kind) {
      case AttentionKind::kSlidingWindow:
        return SlidingWindowGroup::kCacheable;
      case AttentionKind::kCrossAttention:
        return CrossAttentionGroup::kCacheable;
      case AttentionKind::kFull:
        break;
    }
    return FullAttentionGroup::kCacheable;
  }
  bool cacheable() const {
    return visit([](const auto& p) { return p.kCacheable; });
  }
  bool is_full_attention() const { return std::holds_alternative<FullAttentionGroup>(policy_); }
  int block_size() const {
    return visit([](const auto& p) { return p.block_size(); });
  }
  BlockContentKey content_key(const Request& request, int i, int32_t parent_block) const {
    return visit([&](const auto& p) { return p.content_key(request, i, parent_block); });
  }

  // The operations every policy provides (see full_attention_group.h for their contracts).
  int find_longest_cache_hit(const Request& request, int max_tokens, std::vector<BlockId>& out,
                             HitSearchStats& stats) const {
    return visit([&](const auto& p) { return p.find_longest_cache_hit(request, max_tokens, out, stats); });
  }
  int confirm_hit(const Request& request, int hit_tokens, std::vector<BlockId>& out, HitSearchStats& stats) const {
    return visit([&](const auto& p) { return p.confirm_hit(request, hit_tokens, out, stats); });
  }
  int blocks_needed(const Request& request, std::span<const BlockId> held, bool may_share_writable, int num_tokens,
                    std::span<const BlockId> new_computed, int num_computed_tokens) const {
    return visit([&](const auto& p) {
      return p.blocks_needed(request, held, may_share_writable, num_tokens, new_computed, num_computed_tokens);
    });
  }
  int blocks_to_add(const Request& request, int held, int num_tokens) const {
    return visit([&](const auto& p) { return p.blocks_to_add(request, held, num_tokens); });
  }
  bool remove_skipped_blocks(std::vector<BlockId>& blocks, int num_computed_tokens, std::vector<BlockId>& scratch) {
    return visit([&](auto& p) { return p.remove_skipped_blocks(blocks, num_computed_tokens, scratch); });
  }
  void cache_full_blocks(const Request& request, std::span<const BlockId> blocks, int& num_cached, int num_tokens,
                         int divergence_tokens) {
    visit([&](auto& p) { p.cache_full_blocks(request, blocks, num_cached, num_tokens, divergence_tokens); });
  }
  void free(std::vector<BlockId>& blocks, int num_cached) {
    visit([&](auto& p) { p.free(blocks, num_cached); });
  }
  int footprint_blocks(const Request& request, int chunk_tokens) const {
    return visit([&](const auto& p) { return p.footprint_blocks(request, chunk_tokens); });
  }
  bool caches_every_full_block() const {
    return visit([](const auto& p) { return p.caches_every_full_block(); });
  }

 private:
  // The one place the attention kind picks a policy.
  static Policy make_policy(int index, const KVCacheSpec& spec, const KVCacheGroupPlace& place,
                            const SlidingWindowRetention& retention) {
    switch (spec.kind) {
      case AttentionKind::kSlidingWindow:
        return SlidingWindowGroup(index, spec, place, retention);
      case AttentionKind::kCrossAttention:
        return CrossAttentionGroup(index, spec, place);
      case AttentionKind::kFull:
        break;
    }
    return FullAttentionGroup(index, spec, place);
  }

  Policy policy_;
};

}  // namespace pagedkv
