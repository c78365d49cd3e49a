#include "cross_attention_group.h"

#include "pagedkv/core/block_footprint.h"

namespace pagedkv {

int CrossAttentionGroup::encoder_blocks(const Request& request) const {
  return static_cast<int>(block_footprint(spec_, request.num_encoder_tokens, request.num_encoder_tokens));
}

}  // namespace pagedkv
