// Paged attention on the CPU: queries of a flattened batch attend to keys and values that live
// in the KV arena's pages, found through each request's block table.
//
// One entry point serves every step (vLLM v1 style, no prefill/decode split). Inside, work is
// split over (request, KV head, query tile, context partition) and run on a fixed thread pool:
//  - a query row group is the G = num_q_heads / num_kv_heads query heads that share a KV head,
//    times up to a tile of query tokens, so each KV page is read once for all of them;
//  - decode rows (q_len = 1) of a long context are split into partitions handled by different
//    threads (flash-decoding) and merged by a final log-sum-exp reduction;
//  - softmax is computed online (running max and sum), one tile of tokens at a time;
//  - cascade attention: decode requests whose block tables start with the same physical blocks
//    (a prefix-cached system prompt) are grouped; the shared blocks are read once per call for
//    the whole group (its queries form one matrix against each tile of the shared prefix), each
//    request's own suffix is read as before, and the two partial results are merged by the same
//    log-sum-exp reduction.
#pragma once

#include <cstdint>

#include "pagedkv/storage/cpu_isa.h"
#include "pagedkv/storage/kv_arena.h"

namespace pagedkv {

struct AttentionShape {
  int num_q_heads = 0, num_kv_heads = 0, head_dim = 0;
  float scale = 0;  // softmax scale, usually 1/sqrt(head_dim)
  int sliding_window = 0;  // 0 = none; else attend to the last `sliding_window` tokens only
  float logit_softcap = 0;  // 0 = none; else scores = softcap * tanh(scores / softcap)
};

// A flattened batch (vLLM v1 style): request i owns query rows [query_start[i], query_start[i+1])
// at positions [context_lens[i] - q_len_i, context_lens[i]) and attends causally to its first
// context_lens[i] tokens, read through block_tables[i * block_table_stride + ...].
struct PagedAttentionBatch {
  int num_requests = 0;
  const int32_t* query_start = nullptr;  // [num_requests + 1]
  const int32_t* context_lens = nullptr;  // [num_requests]
  const int32_t* block_tables = nullptr;  // [num_requests][block_table_stride]
  int block_table_stride = 0;
  // Cascade attention (see above): on, the call looks for decode requests (q_len = 1, no sliding
  // window) whose block tables share a leading run of whole blocks, at least two blocks and
  // cascade_min_tokens tokens, and reads those blocks once per group. The results match cascade
  // off up to the order of f32 sums (and, for int8 K/V, the rounding of each tile's weights), so
  // a grouped request's output depends on its batch within that rounding; below the minimum a
  // request keeps the single pass it has alone: the shared reads saved there are small next to
  // the extra partial state and merge, and short shared prompts stay batch-invariant.
  bool cascade = true;
  int cascade_min_tokens = 256;
};

// KernelIsa and best_available_isa() (run-time CPU check, AVX2+FMA+F16C) come from
// storage/cpu_isa.h.

// query: [num_query_tokens][num_q_heads][head_dim] f32; out: same shape, f32.
// Sliding window W: the query at position p attends to positions [p - W + 1, p].
// Throws UsageError naming the bad value for inconsistent shapes or batch metadata.
void paged_attention(const AttentionShape& shape, const PagedAttentionBatch& batch, const KVLayerView& kv,
                     const float* query, float* out, KernelIsa isa = KernelIsa::kAuto);

}  // namespace pagedkv
