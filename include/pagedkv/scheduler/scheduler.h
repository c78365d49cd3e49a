// The continuous-batching scheduler (vLLM v1's Scheduler): one queue of work per step under a
// token budget and a request limit, with no prefill/decode split. Each step:
//   1. running requests, in admission order: a decode token, or the next chunk of a prefill;
//      when the pool is full, the lowest-priority, most recently admitted request is preempted
//      (recompute or swap) until the allocation fits;
//   2. if nothing was preempted: swapped requests come back first, then waiting requests are
//      admitted (prefix-cache hits first, whole prompt must fit, admission hysteresis);
// and after the forward pass, update() appends sampled tokens, forks parallel samples and
// finishes requests. The scheduler moves no bytes: the step's copies are in its output.
#pragma once

#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "pagedkv/block/range_allocator.h"
#include "pagedkv/manager/kv_cache_manager.h"
#include "pagedkv/scheduler/kv_memory_breakdown.h"
#include "pagedkv/scheduler/scheduler_config.h"
#include "pagedkv/scheduler/scheduler_request.h"
#include "pagedkv/scheduler/swap_space.h"
#include "pagedkv/tiers/tiered_kv_cache.h"

namespace pagedkv {

struct ScheduledChunk {
  SchedulerRequest* request = nullptr;
  int num_new_tokens = 0;
  int first_position = 0;  // position of the first new token
  bool samples = false;  // reaches the end of the sequence: the step produces a token
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;
  int num_batched_tokens = 0;
  // Byte movements the engine must perform, in this order, before the forward pass.
  std::vector<std::pair<BlockId, BlockId>> swap_out;  // device -> host
  std::vector<std::pair<BlockId, BlockId>> swap_in;  // host -> device
  std::vector<std::pair<BlockId, BlockId>> cow_copies;  // device -> device
  int num_preempted_recompute = 0;
  int num_preempted_swap = 0;
  // Requests whose block tables changed beyond appends (swap-in, copy-on-write, re-admission).
  std::vector<RequestId> rewritten_tables;
};

// Tokens sampled for one chunk that samples: the request's own, plus one per child to fork
// (parallel sampling: on the parent's first sample, n - 1 more draws from the same logits).
// A negative token appends nothing: the request holds (a beam waiting for its siblings' logits)
// and is not scheduled again until a token is appended (append_token).
struct SampledTokens {
  TokenId token = -1;
  std::vector<TokenId> fork_tokens;
};

struct SchedulerStats {
  uint64_t steps = 0;
  uint64_t preemptions_recompute = 0;
  uint64_t preemptions_swap = 0;
  // Every block swapped out ends in exactly one of: copied back in (a tier block that then fails
  // verification included: the request is recomputed); not needed at resume because the device
  // prefix cache still held its content; dropped because its request was aborted (or finished)
  // while swapped; or still swapped out (swapped_blocks()).
  uint64_t blocks_swapped_out = 0;
  uint64_t blocks_swapped_in = 0;
  uint64_t blocks_swap_resumed_from_cache = 0;
  uint64_t blocks_swap_dropped = 0;
  // Swap-out copies deferred (lazy_swap_copies) and, of those, never made: the block was resumed
  // from the device cache or its request ended while swapped.
  uint64_t blocks_swap_copies_deferred = 0;
  uint64_t blocks_swap_copies_skipped = 0;
  uint64_t cow_copies = 0;
  uint64_t admissions = 0;
  uint64_t admission_pauses = 0;  // times the high watermark stopped admission
  // Beam search: beams holding their scores preempted to make way for a waiting sibling of an
  // older beam search (every running request was held), and waiting beams rejected because their
  // own search's beams could not all be in the pool at once.
  uint64_t held_preemptions = 0;
  uint64_t held_beams_rejected = 0;
};

class Scheduler {
 public:
  // `swap_blocks`: host swap-space blocks (0 disables swapping).
  Scheduler(SchedulerConfig config, KVCacheManager& manager, int swap_blocks);
  ~Scheduler();  // unregisters its pool listener (lazy swap copies)
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  // Queues a new request (status waiting). Its id must be unique among live requests.
  SchedulerRequest& add_request(std::unique_ptr<SchedulerRequest> request);
  // Cancels a request wherever it is; its blocks are freed at once. False if unknown/finished.
  // `with_samples`: its parallel samples (the requests forked from it) are cancelled too.
  bool abort_request(RequestId id, bool with_samples = true);

  SchedulerOutput schedule();
  // Applies a step's results: `sampled[i]` belongs to output.chunks[i] (ignored unless it samples).
  // Returns the requests that finished (including aborted/rejected since the last call).
  std::vector<SchedulerRequest*> update(const SchedulerOutput& output, const std::vector<SampledTokens>& sampled);

  // Beam search (the engine drives it): `from` (running, every token computed) forks a child
  // that shares all its blocks (copy-on-write) and continues with `token`; the child is
  // reported under `root` as `sample_index`, and keeps `from`'s place in the waiting line
  // (arrival_seq) if preempted. Returns the child (finished already if `token` met a stop
  // condition).
  SchedulerRequest* fork_request(SchedulerRequest& from, RequestId root, int sample_index, TokenId token);
  // Appends a token chosen outside update() (a beam's) and checks the stop conditions; true if
  // that finished the request.
  bool append_token(SchedulerRequest& r, TokenId token);
  // Requests finished since the last update() or take_finished() (aborts, append_token, forks).
  std::vector<SchedulerRequest*> take_finished();

  // KV tiers below the device (may be null). With tiers, waiting requests' prefixes continue into
  // the host and disk tiers (a request whose blocks are still loading waits while others are
  // admitted), and swap preemption goes through the tiers instead of the SwapSpace.
  void set_tiers(TieredKVCache* tiers) { tiers_ = tiers; }

  // Finished requests are kept until released (the engine reads their outputs first).
  void release_finished(RequestId id);

  bool has_unfinished() const { return !waiting_.empty() || !running_.empty() || !swapped_.empty(); }
  int num_waiting() const { return static_cast<int>(waiting_.size()); }
  int num_running() const { return static_cast<int>(running_.size()); }
  int num_swapped() const { return static_cast<int>(swapped_.size()); }
  // Blocks of the requests now swapped out (not yet resumed, dropped or loading back).
  uint64_t swapped_blocks() const;
  const std::vector<SchedulerRequest*>& running() const { return running_; }
  const std::deque<SchedulerRequest*>& waiting() const { return waiting_; }  // in admission order
  const std::deque<SchedulerRequest*>& swapped() const { return swapped_; }
  SchedulerRequest* find(RequestId id);
  const SchedulerStats& stats() const { return stats_; }
  const SwapSpace& swap_space() const { return swap_; }
  const KVCacheManager& manager() const { return manager_; }
  const SchedulerConfig& config() const { return config_; }
  // The request's KV blocks (group 0) in sequence order: the manager's table when paged, its
  // reserved contiguous range otherwise.
  std::span<const BlockId> block_ids(const SchedulerRequest& r) const;
  // Reservation policies: blocks held by reservations (0 when paged), and the allocator of ranges
  // (null when paged).
  int reserved_blocks_in_use() const { return ranges_ ? ranges_->capacity() - ranges_->num_free() : 0; }
  const RangeAllocator* reservations() const { return ranges_.get(); }
  // Where the device pool's slots are now (the paper's Fig. 2 categories). O(blocks in use).
  KVMemoryBreakdown memory_breakdown() const;
  // Deferred swap copies consistent with the swapped requests and the device cache, and (with a
  // reservation policy) the ranges consistent with the running requests; throws InvariantError.
  // (The engine's checker calls it with the manager's.)
  void check_invariants() const;

 private:
  void enqueue_waiting(SchedulerRequest* r);
  // Reservation policies: admits `r` if its whole reservation fits in one free range (false:
  // it waits, and so does everything behind it), or rejects it if it exceeds the pool (true).
  bool admit_reserved(SchedulerRequest* r, int& budget, SchedulerOutput& out);
  // Admits waiting requests in order while they fit (and the budget and max_num_seqs allow).
  void admit_waiting(int& budget, SchedulerOutput& out);
  // Admission's test: the blocks of r's whole current sequence, after its prefix hits (left in
  // hits_ for the allocation that follows), fit in the free blocks now.
  bool whole_sequence_fits(SchedulerRequest* r);
  // When every running request is held (a beam waiting for a sibling's next-token scores): preempts
  // held requests behind the head of the queue in line, youngest first, until the head fits; true
  // if it does (or admission will reject it as too large for the pool). Rejects the head if only
  // requests at its own place in line (its own beam search) hold the memory.
  bool make_way_for_waiting_head(SchedulerOutput& out);
  SchedulerRequest* pick_victim();
  void preempt(SchedulerRequest* victim, SchedulerOutput& out);
  bool try_resume_swapped(SchedulerRequest* r, SchedulerOutput& out);
  bool try_resume_swapped_from_tiers(SchedulerRequest* r, SchedulerOutput& out);
  void finish(SchedulerRequest* r, FinishReason reason);
  bool check_stop(SchedulerRequest* r, TokenId token);
  void remove_running(SchedulerRequest* r);
  // Lazy swap copies (no tiers): the pool is dropping device block `b` from its cache.
  void on_device_uncache(const KVCacheBlock& b);
  // Forgets `r`'s deferred copies: the still-needed ones (index >= first_needed) go into `out`,
  // ahead of their swap-in; the others (all of them when `out` is null) are counted as skipped.
  void settle_deferred_copies(SchedulerRequest* r, int first_needed, SchedulerOutput* out);

  SchedulerConfig config_;
  KVCacheManager& manager_;
  SwapSpace swap_;
  std::unordered_map<RequestId, std::unique_ptr<SchedulerRequest>> requests_;
  std::deque<SchedulerRequest*> waiting_;  // sorted by (priority, arrival_seq)
  std::vector<SchedulerRequest*> running_;
  std::deque<SchedulerRequest*> swapped_;  // FIFO
  std::vector<SchedulerRequest*> newly_finished_;
  uint64_t next_arrival_seq_ = 0;
  uint64_t next_admit_seq_ = 0;
  uint64_t next_child_id_ = 1ull << 62;
  bool admitting_ = true;
  TieredKVCache* tiers_ = nullptr;
  std::unique_ptr<RangeAllocator> ranges_;  // block ids 1..; only with a reservation policy
  struct DeferredSwapCopy {
    SchedulerRequest* owner = nullptr;
    int index = 0;
  };
  // Device block -> the swapped blocks (of one or more victims sharing it) awaiting its copy.
  std::unordered_map<int32_t, std::vector<DeferredSwapCopy>> deferred_swaps_;
  std::vector<std::pair<BlockId, BlockId>> due_swap_copies_;  // made due since the last schedule()
  bool listening_ = false;
  ComputedBlocks hits_;
  SchedulerStats stats_;
};

}  // namespace pagedkv
