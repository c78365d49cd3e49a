// A cross-attention group's policy (vLLM's CrossAttentionManager): the decoder attends to a
// fixed encoder output, so the group holds the encoder's blocks, allocated once at admission,
// and never caches them (their content is not a token prefix).
#pragma once

#include <span>
#include <vector>

#include "kv_cache_group_base.h"

namespace pagedkv {

class CrossAttentionGroup : public KVCacheGroupBase {
 public:
  using KVCacheGroupBase::KVCacheGroupBase;

  static constexpr bool kCacheable = false;

  // Never cached: no hit (the coordinator does not ask).
  int find_longest_cache_hit(const Request&, int, std::vector<BlockId>& out, HitSearchStats&) const {
    out.clear();
    return 0;
  }
  int confirm_hit(const Request&, int, std::vector<BlockId>& out, HitSearchStats&) const {
    out.clear();
    return 0;
  }
  // The encoder's blocks, until the table holds them.
  int blocks_needed(const Request& request, std::span<const BlockId> held, bool, int, std::span<const BlockId>,
                    int) const {
    return held.empty() ? encoder_blocks(request) : 0;
  }
  int blocks_to_add(const Request& request, int held, int) const { return held == 0 ? encoder_blocks(request) : 0; }
  bool remove_skipped_blocks(std::vector<BlockId>&, int, std::vector<BlockId>&) { return false; }
  void cache_full_blocks(const Request&, std::span<const BlockId>, int&, int, int) {}
  void free(std::vector<BlockId>& blocks, int) { pool_->free_blocks_tail_first(blocks); }
  int footprint_blocks(const Request& request, int) const { return encoder_blocks(request); }
  bool caches_every_full_block() const { return false; }

 private:
  int encoder_blocks(const Request& request) const;
};

}  // namespace pagedkv
