// A request as the scheduler tracks it: the manager-facing Request plus its place in the
// queues, its stop conditions and its preemption history.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "pagedkv/manager/request.h"
#include "pagedkv/tiers/tier_types.h"

namespace pagedkv {

enum class RequestStatus { kWaiting, kRunning, kSwapped, kFinished };

enum class FinishReason { kNone, kStop, kLength, kAborted, kRejected };
std::string_view finish_reason_name(FinishReason r);

struct StopConditions {
  int max_tokens = 16;  // output tokens
  std::vector<TokenId> stop_token_ids;  // finishing tokens, not part of the output
  TokenId eos_token_id = -1;  // -1: none
  bool ignore_eos = false;
  // The first min_tokens output tokens cannot be a stop token or EOS (vLLM's min_tokens): the
  // engine masks them out of the logits until then.
  int min_tokens = 0;
  // Benchmarks replaying a dataset's output lengths: the request ends after this many output
  // tokens (finish reason stop, the last token kept), as if it had sampled EOS there; the oracle
  // and pow2 KV reservations read it as the output length known in advance. -1: unknown.
  int known_output_tokens = -1;
};

struct SchedulerRequest {
  Request kv;  // tokens, computed count, block hashes, cache keys
  int priority = 0;  // lower runs first
  uint64_t arrival_seq = 0;  // FCFS order within a priority
  uint64_t admit_seq = 0;  // most recently admitted is preempted first
  RequestStatus status = RequestStatus::kWaiting;
  FinishReason finish_reason = FinishReason::kNone;
  StopConditions stop;
  int n = 1;  // parallel samples; children fork from this request after its prefill
  bool forked = false;  // children created
  RequestId parent{~0ull};  // for children: the request they forked from
  int sample_index = 0;  // 0 for the parent, 1..n-1 for its children
  // Swap state: host copies of the first ceil(swapped_tokens / block_size) blocks.
  std::vector<BlockId> host_blocks;
  // SchedulerConfig::lazy_swap_copies: per host block, the device block whose copy into it is
  // still deferred (-1: copied, or never deferred).
  std::vector<int32_t> deferred_swap_sources;
  int swapped_tokens = 0;
  bool swap_in_pending = false;  // KV tiers: its swapped blocks are loading into its device blocks
  // KV reservation policies other than paged: the contiguous range of blocks held from admission
  // to finish (empty otherwise).
  std::vector<BlockId> reserved_blocks;
  // Accounting.
  int num_preemptions = 0;
  int prefix_hit_tokens = -1;  // at first admission; -1 until admitted
  TierHitTokens hit_tokens_by_tier;  // the same tokens by the tier they came from
  bool stopped_on_stop_token = false;

  int num_output_tokens() const { return kv.num_tokens() - kv.num_prompt_tokens; }
  bool finished() const { return status == RequestStatus::kFinished; }
};

}  // namespace pagedkv
