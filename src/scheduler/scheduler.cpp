#include "pagedkv/scheduler/scheduler.h"

#include <fmt/format.h>

#include <algorithm>

#include "pagedkv/core/ceil_div.h"
#include "pagedkv/core/error.h"

namespace pagedkv {
std::string_view preemption_mode_name(PreemptionMode m) {
  switch (m) {
    case PreemptionMode::kRecompute:
      return "recompute";
    case PreemptionMode::kSwap:
      return "swap";
    case PreemptionMode::kAuto:
      return "auto";
  }
  return "?";
}

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAborted:
      return "abort";
    case FinishReason::kRejected:
      return "rejected";
  }
  return "?";
}

void SchedulerConfig::validate() const {
  if (max_num_seqs <= 0) throw ConfigError(fmt::format("max_num_seqs must be positive, got {}", max_num_seqs));
  if (max_num_batched_tokens <= 0)
    throw ConfigError(fmt::format("max_num_batched_tokens must be positive, got {}", max_num_batched_tokens));
  if (swap_threshold_tokens < 0) throw ConfigError("swap_threshold_tokens must not be negative");
  if (!(admit_low_watermark >= 0 && admit_low_watermark <= admit_high_watermark && admit_high_watermark <= 1.0))
    throw ConfigError(fmt::format("admission watermarks must satisfy 0 <= low ({}) <= high ({}) <= 1",
                                  admit_low_watermark, admit_high_watermark));
}

Scheduler::Scheduler(SchedulerConfig config, KVCacheManager& manager, int swap_blocks)
    : config_(config), manager_(manager), swap_(swap_blocks) {
  config_.validate();
  running_.reserve(static_cast<size_t>(config_.max_num_seqs) * 2);
  if (config_.kv_reservation != KVReservation::kPaged) {
    if (manager_.num_groups() != 1)
      throw ConfigError(
          fmt::format("the {} KV reservation supports one KV-cache group (full attention), the model has {}",
                      kv_reservation_name(config_.kv_reservation), manager_.num_groups()));
    ranges_ = make_range_allocator(config_.range_allocation, 1,
                                   manager_.pool().num_usable_blocks());  // block 0: the null block
  }
}

Scheduler::~Scheduler() {
  if (listening_) manager_.pool().set_uncache_listener({});
}

void Scheduler::on_device_uncache(const KVCacheBlock& b) {
  auto it = deferred_swaps_.find(b.id.value);
  if (it == deferred_swaps_.end()) return;
  // Its bytes are intact until the block is allocated again; the copies run before the next forward.
  for (const DeferredSwapCopy& d : it->second) {
    const auto i = static_cast<size_t>(d.index);
    due_swap_copies_.emplace_back(b.id, d.owner->host_blocks[i]);
    d.owner->deferred_swap_sources[i] = -1;
  }
  deferred_swaps_.erase(it);
}

void Scheduler::settle_deferred_copies(SchedulerRequest* r, int first_needed, SchedulerOutput* out) {
  for (size_t i = 0; i < r->deferred_swap_sources.size(); ++i) {
    const int32_t block = r->deferred_swap_sources[i];
    if (block < 0) continue;
    auto it = deferred_swaps_.find(block);
    std::erase_if(it->second, [&](const DeferredSwapCopy& d) { return d.owner == r; });
    if (it->second.empty()) deferred_swaps_.erase(it);
    if (out != nullptr && static_cast<int>(i) >= first_needed) {
      out->swap_out.emplace_back(BlockId{block}, r->host_blocks[i]);  // runs before the swap-in
    } else {
      ++stats_.blocks_swap_copies_skipped;
    }
  }
  r->deferred_swap_sources.clear();
}

void Scheduler::check_invariants() const {
  if (ranges_) {
    ranges_->check_invariants();
    int held = 0;
    for (const SchedulerRequest* r : running_) {
      const auto& b = r->reserved_blocks;
      if (b.empty() || ranges_->allocated_length(b.front().value) != static_cast<int32_t>(b.size()))
        throw InvariantError(fmt::format("request {}: its reserved blocks are not an allocated range", r->kv.id.value));
      for (size_t i = 1; i < b.size(); ++i)
        if (b[i].value != b[0].value + static_cast<int32_t>(i))
          throw InvariantError(fmt::format("request {}: reserved blocks not contiguous", r->kv.id.value));
      if (r->kv.num_computed_tokens > static_cast<int>(b.size()) * manager_.block_size())
        throw InvariantError(fmt::format("request {}: {} tokens computed in a reservation of {} blocks", r->kv.id.value,
                                         r->kv.num_computed_tokens, b.size()));
      held += static_cast<int>(b.size());
    }
    if (held != reserved_blocks_in_use() || ranges_->num_allocated() != static_cast<int>(running_.size()))
      throw InvariantError(
          fmt::format("reservations: running requests hold {} blocks in {} ranges, the allocator {} in {}", held,
                      running_.size(), reserved_blocks_in_use(), ranges_->num_allocated()));
  }
  for (const auto& [block, copies] : deferred_swaps_) {
    if (copies.empty()) throw InvariantError(fmt::format("deferred swap copies of device block {}: none", block));
    for (const DeferredSwapCopy& d : copies) {
      const SchedulerRequest* r = d.owner;
      if (r == nullptr || r->status != RequestStatus::kSwapped || d.index < 0 ||
          d.index >= static_cast<int>(r->deferred_swap_sources.size()) ||
          r->deferred_swap_sources[static_cast<size_t>(d.index)] != block)
        throw InvariantError(fmt::format("deferred swap copy of device block {} has no matching swapped block", block));
    }
    if (!manager_.pool().block(BlockId{block}).has_hash)
      throw InvariantError(
          fmt::format("deferred swap copy of device block {}: the device cache dropped it uncopied", block));
  }
}

SchedulerRequest* Scheduler::find(RequestId id) {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

SchedulerRequest& Scheduler::add_request(std::unique_ptr<SchedulerRequest> request) {
  if (!request) throw UsageError("add_request: null request");
  if (requests_.contains(request->kv.id))
    throw UsageError(fmt::format("add_request: request id {} is already in use", request->kv.id.value));
  if (request->kv.num_tokens() == 0) throw UsageError("add_request: a request needs at least one prompt token");
  if (request->n < 1) throw UsageError(fmt::format("add_request: n must be at least 1, got {}", request->n));
  if (request->stop.known_output_tokens < -1 || request->stop.known_output_tokens == 0)
    throw UsageError(fmt::format("add_request: known_output_tokens must be -1 (unknown) or at least 1, got {}",
                                 request->stop.known_output_tokens));
  if (ranges_ && request->n > 1)
    throw UsageError(fmt::format("add_request: parallel sampling (n = {}) needs the paged KV reservation, not {}",
                                 request->n, kv_reservation_name(config_.kv_reservation)));
  SchedulerRequest* r = request.get();
  r->arrival_seq = next_arrival_seq_++;
  r->status = RequestStatus::kWaiting;
  requests_.emplace(r->kv.id, std::move(request));
  enqueue_waiting(r);
  return *r;
}

void Scheduler::enqueue_waiting(SchedulerRequest* r) {
  r->status = RequestStatus::kWaiting;
  auto pos =
      std::upper_bound(waiting_.begin(), waiting_.end(), r, [](const SchedulerRequest* a, const SchedulerRequest* b) {
        return std::pair(a->priority, a->arrival_seq) < std::pair(b->priority, b->arrival_seq);
      });
  waiting_.insert(pos, r);
}

void Scheduler::remove_running(SchedulerRequest* r) {
  auto it = std::find(running_.begin(), running_.end(), r);
  if (it != running_.end()) running_.erase(it);
}

void Scheduler::finish(SchedulerRequest* r, FinishReason reason) {
  if (r->status == RequestStatus::kRunning) {
    if (ranges_) {
      ranges_->free(r->reserved_blocks.front().value);
      r->reserved_blocks.clear();
    } else {
      manager_.free(r->kv);
    }
    remove_running(r);
  } else if (r->status == RequestStatus::kWaiting) {
    waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
    if (tiers_) tiers_->cancel_prefix(r->kv.id);
  } else if (r->status == RequestStatus::kSwapped) {
    if (!r->swap_in_pending)
      stats_.blocks_swap_dropped += static_cast<uint64_t>(ceil_div(r->swapped_tokens, manager_.block_size()));
    if (tiers_) {
      tiers_->drop_swap(r->kv.id);  // waits for loads still writing into its device blocks
      if (r->swap_in_pending) manager_.free(r->kv);
      r->swap_in_pending = false;
    } else {
      settle_deferred_copies(r, 0, nullptr);
      // Copies made due since the last schedule() must not land in host blocks handed out again.
      std::erase_if(due_swap_copies_, [&](const std::pair<BlockId, BlockId>& c) {
        return std::find(r->host_blocks.begin(), r->host_blocks.end(), c.second) != r->host_blocks.end();
      });
      swap_.free(r->host_blocks);
    }
    r->host_blocks.clear();
    swapped_.erase(std::find(swapped_.begin(), swapped_.end(), r));
  }
  r->status = RequestStatus::kFinished;
  r->finish_reason = reason;
  newly_finished_.push_back(r);
}

bool Scheduler::abort_request(RequestId id, bool with_samples) {
  SchedulerRequest* r = find(id);
  if (r == nullptr || r->finished()) return false;
  finish(r, FinishReason::kAborted);
  if (!with_samples) return true;
  // Parallel samples belong to the request that spawned them: cancel them too.
  std::vector<RequestId> children;
  for (const auto& [cid, c] : requests_)
    if (c->parent == id && !c->finished()) children.push_back(cid);
  for (RequestId cid : children) finish(find(cid), FinishReason::kAborted);
  return true;
}

void Scheduler::release_finished(RequestId id) {
  auto it = requests_.find(id);
  if (it != requests_.end() && it->second->finished()) requests_.erase(it);
}

uint64_t Scheduler::swapped_blocks() const {
  uint64_t n = 0;
  for (const SchedulerRequest* r : swapped_)
    if (!r->swap_in_pending) n += static_cast<uint64_t>(ceil_div(r->swapped_tokens, manager_.block_size()));
  return n;
}

SchedulerRequest* Scheduler::pick_victim() {
  // Lowest priority (largest value) first, then the most recently admitted.
  return *std::max_element(running_.begin(), running_.end(), [](const SchedulerRequest* a, const SchedulerRequest* b) {
    return std::pair(a->priority, a->admit_seq) < std::pair(b->priority, b->admit_seq);
  });
}

void Scheduler::preempt(SchedulerRequest* victim, SchedulerOutput& out) {
  const int computed = victim->kv.num_computed_tokens;
  const auto blocks = manager_.get_block_ids(victim->kv);
  const int needed = ceil_div(computed, manager_.block_size());
  bool swap = false;
  if (config_.preemption_mode != PreemptionMode::kRecompute && computed > 0 && manager_.num_groups() == 1 &&
      (config_.preemption_mode == PreemptionMode::kSwap || computed >= config_.swap_threshold_tokens)) {
    if (tiers_) {
      // Device -> host (-> disk when the host tier is full); the tiers copy before the next forward.
      swap = tiers_->swap_out(victim->kv.id, blocks.subspan(0, static_cast<size_t>(needed)));
    } else if (needed <= swap_.num_free()) {
      swap = true;
      victim->host_blocks.clear();
      swap_.allocate(needed, victim->host_blocks);
      victim->deferred_swap_sources.assign(static_cast<size_t>(needed), -1);
      for (int i = 0; i < needed; ++i) {
        const BlockId b = blocks[static_cast<size_t>(i)];
        // A block the device cache keeps after the victim frees it is copied only if dropped there.
        if (config_.lazy_swap_copies && manager_.pool().block(b).has_hash) {
          if (!listening_) {
            manager_.pool().set_uncache_listener(
                [this](const KVCacheBlock& k, RemovalReason) { on_device_uncache(k); });
            listening_ = true;
          }
          deferred_swaps_[b.value].push_back(DeferredSwapCopy{victim, i});
          victim->deferred_swap_sources[static_cast<size_t>(i)] = b.value;
          ++stats_.blocks_swap_copies_deferred;
        } else {
          out.swap_out.emplace_back(b, victim->host_blocks[static_cast<size_t>(i)]);
        }
      }
    }
  }
  if (swap) {
    victim->swapped_tokens = computed;
    stats_.blocks_swapped_out += static_cast<uint64_t>(needed);
    ++stats_.preemptions_swap;
    ++out.num_preempted_swap;
  } else {
    ++stats_.preemptions_recompute;
    ++out.num_preempted_recompute;
  }
  manager_.free(victim->kv);
  remove_running(victim);
  victim->kv.num_computed_tokens = 0;
  ++victim->num_preemptions;
  ++victim->kv.num_preemptions;
  if (swap) {
    victim->status = RequestStatus::kSwapped;
    swapped_.push_back(victim);
  } else {
    enqueue_waiting(victim);
  }
}

bool Scheduler::try_resume_swapped_from_tiers(SchedulerRequest* r, SchedulerOutput& out) {
  using SwapInState = TieredKVCache::SwapInState;
  SwapInState state = SwapInState::kDone;
  if (r->swap_in_pending) {
    state = tiers_->poll_swap_in(r->kv.id);
  } else {
    // As below: blocks still in the prefix cache need no copy; the rest load from the tiers.
    manager_.get_computed_blocks(r->kv, hits_);
    const int hit = hits_.num_computed_tokens;
    const int swapped_blocks = ceil_div(r->swapped_tokens, manager_.block_size());
    if (hit >= r->swapped_tokens) {
      if (!manager_.allocate_slots(r->kv, 1, hit, &hits_)) return false;
      tiers_->drop_swap(r->kv.id);
      stats_.blocks_swap_resumed_from_cache += static_cast<uint64_t>(swapped_blocks);
      r->kv.num_computed_tokens = hit;
    } else {
      if (!manager_.allocate_slots(r->kv, r->swapped_tokens - hit, hit, &hits_)) return false;
      const auto blocks = manager_.get_block_ids(r->kv);
      const int first = hit / manager_.block_size();
      stats_.blocks_swapped_in += static_cast<uint64_t>(swapped_blocks - first);
      stats_.blocks_swap_resumed_from_cache += static_cast<uint64_t>(first);
      r->kv.num_computed_tokens = r->swapped_tokens;
      r->swap_in_pending = true;
      state = tiers_->start_swap_in(
          r->kv.id, first, blocks.subspan(static_cast<size_t>(first), static_cast<size_t>(swapped_blocks - first)));
    }
  }
  if (state == SwapInState::kLoading) return false;  // disk loads in flight: it stays first in line
  r->swap_in_pending = false;
  r->swapped_tokens = 0;
  if (state == SwapInState::kFailed) {
    // A swapped block failed verification: recompute rather than run on damaged KV.
    manager_.free(r->kv);
    r->kv.num_computed_tokens = 0;
    ++stats_.preemptions_recompute;
    enqueue_waiting(r);
    return true;
  }
  r->status = RequestStatus::kRunning;
  r->admit_seq = next_admit_seq_++;
  running_.push_back(r);
  out.rewritten_tables.push_back(r->kv.id);
  return true;
}

bool Scheduler::try_resume_swapped(SchedulerRequest* r, SchedulerOutput& out) {
  if (tiers_) return try_resume_swapped_from_tiers(r, out);
  // Blocks whose content is still in the prefix cache need no copy; the rest come from host.
  manager_.get_computed_blocks(r->kv, hits_);
  const int hit = hits_.num_computed_tokens;
  const auto swapped_blocks = static_cast<uint64_t>(r->host_blocks.size());
  if (hit >= r->swapped_tokens) {
    // The cache alone covers what was computed: resume as a re-admission of the hit prefix.
    if (!manager_.allocate_slots(r->kv, 1, hit, &hits_)) return false;
    settle_deferred_copies(r, static_cast<int>(swapped_blocks), &out);
    stats_.blocks_swap_resumed_from_cache += swapped_blocks;
    r->kv.num_computed_tokens = hit;
  } else {
    if (!manager_.allocate_slots(r->kv, r->swapped_tokens - hit, hit, &hits_)) return false;
    const auto blocks = manager_.get_block_ids(r->kv);
    const auto first = static_cast<uint64_t>(hit / manager_.block_size());
    settle_deferred_copies(r, static_cast<int>(first), &out);
    for (size_t i = first; i < r->host_blocks.size(); ++i) out.swap_in.emplace_back(r->host_blocks[i], blocks[i]);
    stats_.blocks_swapped_in += swapped_blocks - first;
    stats_.blocks_swap_resumed_from_cache += first;
    r->kv.num_computed_tokens = r->swapped_tokens;
  }
  swap_.free(r->host_blocks);  // the copies run before the next schedule() can hand these out
  r->host_blocks.clear();
  r->swapped_tokens = 0;
  r->status = RequestStatus::kRunning;
  r->admit_seq = next_admit_seq_++;
  running_.push_back(r);
  out.rewritten_tables.push_back(r->kv.id);
  return true;
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  ++stats_.steps;
  int budget = config_.max_num_batched_tokens;
  bool preempted = false;

  // 1. Running requests.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SchedulerRequest* r = running_[i];
    const int n = std::min(r->kv.num_tokens() - r->kv.num_computed_tokens, budget);
    if (n <= 0) {
      ++i;
      continue;
    }
    if (ranges_) {
      // Its reservation already covers the whole sequence: nothing to allocate, nothing to preempt.
      out.chunks.push_back(
          ScheduledChunk{r, n, r->kv.num_computed_tokens, r->kv.num_computed_tokens + n == r->kv.num_tokens()});
      out.num_batched_tokens += n;
      budget -= n;
      ++i;
      continue;
    }
    bool self_preempted = false;
    std::optional<NewBlocks> nb;
    while (!(nb = manager_.allocate_slots(r->kv, n))) {
      SchedulerRequest* victim = pick_victim();
      // A victim scheduled earlier in this step gives back its chunk.
      auto sched = std::find_if(out.chunks.begin(), out.chunks.end(),
                                [&](const ScheduledChunk& c) { return c.request == victim; });
      if (sched != out.chunks.end()) {
        // Its chunk will not run: blocks allocate_slots cached for it hold no KV yet.
        manager_.uncache_uncomputed_blocks(victim->kv);
        budget += sched->num_new_tokens;
        out.num_batched_tokens -= sched->num_new_tokens;
        out.chunks.erase(sched);
      }
      const size_t victim_index =
          static_cast<size_t>(std::find(running_.begin(), running_.end(), victim) - running_.begin());
      preempt(victim, out);
      preempted = true;
      if (victim == r) {
        self_preempted = true;
        break;
      }
      if (victim_index < i) --i;
    }
    if (self_preempted) continue;  // running_[i] is now the next request
    if (nb->table_rewritten) out.rewritten_tables.push_back(r->kv.id);
    out.chunks.push_back(
        ScheduledChunk{r, n, r->kv.num_computed_tokens, r->kv.num_computed_tokens + n == r->kv.num_tokens()});
    out.num_batched_tokens += n;
    budget -= n;
    ++i;
  }

  if (!preempted) {
    // 2a. Swapped requests come back before anything new is admitted.
    while (!swapped_.empty() && static_cast<int>(running_.size()) < config_.max_num_seqs) {
      if (!try_resume_swapped(swapped_.front(), out)) break;
      swapped_.pop_front();
    }
    // 2b. Admission, with hysteresis on pool usage.
    const double usage = manager_.usage();
    if (admitting_ && usage >= config_.admit_high_watermark) {
      admitting_ = false;
      ++stats_.admission_pauses;
    } else if (!admitting_ && usage <= config_.admit_low_watermark) {
      admitting_ = true;
    }
    if ((admitting_ || running_.empty()) && swapped_.empty()) admit_waiting(budget, out);
  }
  // 3. Nothing to compute while requests wait: every running request is a beam holding its
  // next-token scores until a preempted sibling catches up, and their blocks (or the watermark,
  // or max_num_seqs) keep that sibling out. Without this the engine would step forever.
  if (out.chunks.empty() && !preempted && !running_.empty() && !waiting_.empty() && swapped_.empty() && !ranges_ &&
      make_way_for_waiting_head(out))
    admit_waiting(budget, out);
  out.cow_copies = manager_.take_pending_copies();
  stats_.cow_copies += out.cow_copies.size();
  // Deferred swap copies made due by this step's evictions (or a reset since the last step).
  out.swap_out.insert(out.swap_out.end(), due_swap_copies_.begin(), due_swap_copies_.end());
  due_swap_copies_.clear();
  return out;
}

void Scheduler::admit_waiting(int& budget, SchedulerOutput& out) {
  size_t next = 0;  // waiting requests whose prefix is still loading from the tiers are skipped
  while (next < waiting_.size() && budget > 0 && static_cast<int>(running_.size()) < config_.max_num_seqs) {
    SchedulerRequest* r = waiting_[next];
    if (ranges_) {
      if (!admit_reserved(r, budget, out)) break;  // FCFS: the head waits for a range, so does the rest
      continue;
    }
    if (manager_.can_allocate(r->kv) == AllocStatus::kNever) {
      finish(r, FinishReason::kRejected);  // larger than the whole cache: it can never run
      continue;
    }
    if (tiers_ && tiers_->prepare_prefix(r->kv) == TieredKVCache::PrefixState::kLoading) {
      ++next;
      continue;
    }
    if (!whole_sequence_fits(r)) break;
    const int hit = hits_.num_computed_tokens;
    const int n = std::min(r->kv.num_tokens() - hit, budget);
    if (!manager_.allocate_slots(r->kv, n, hit, &hits_)) break;
    waiting_.erase(waiting_.begin() + static_cast<ptrdiff_t>(next));
    r->kv.num_computed_tokens = hit;
    const TierHitTokens by_tier = tiers_ ? tiers_->take_hit_tokens(r->kv, hit) : TierHitTokens{hit, 0, 0};
    if (r->prefix_hit_tokens < 0) {
      r->prefix_hit_tokens = hit;
      r->hit_tokens_by_tier = by_tier;
    }
    r->status = RequestStatus::kRunning;
    r->admit_seq = next_admit_seq_++;
    running_.push_back(r);
    ++stats_.admissions;
    out.rewritten_tables.push_back(r->kv.id);
    out.chunks.push_back(ScheduledChunk{r, n, hit, hit + n == r->kv.num_tokens()});
    out.num_batched_tokens += n;
    budget -= n;
  }
}

bool Scheduler::whole_sequence_fits(SchedulerRequest* r) {
  // The whole sequence, not only this step's chunk: a long prompt admitted in chunks would
  // otherwise force preemptions later.
  manager_.get_computed_blocks(r->kv, hits_);
  return manager_.get_num_blocks_to_allocate(r->kv, r->kv.num_tokens(), &hits_) <= manager_.num_free_blocks();
}

bool Scheduler::make_way_for_waiting_head(SchedulerOutput& out) {
  for (const SchedulerRequest* r : running_)
    if (r->kv.num_tokens() > r->kv.num_computed_tokens) return false;  // not held: it will compute
  SchedulerRequest* head = waiting_.front();
  if (tiers_ && tiers_->prepare_prefix(head->kv) == TieredKVCache::PrefixState::kLoading) return false;
  const auto place = [](const SchedulerRequest* r) { return std::pair(r->priority, r->arrival_seq); };
  for (;;) {
    if (manager_.can_allocate(head->kv) == AllocStatus::kNever) return true;  // admission rejects it
    if (static_cast<int>(running_.size()) < config_.max_num_seqs && whole_sequence_fits(head)) return true;
    // The held beam furthest back in line makes way (forks share their request's place in line,
    // so the oldest beam search left waiting is never the one pushed back, and it completes).
    SchedulerRequest* victim = nullptr;
    for (SchedulerRequest* r : running_)
      if (place(r) > place(head) &&
          (victim == nullptr || std::pair(place(r), r->admit_seq) > std::pair(place(victim), victim->admit_seq)))
        victim = r;
    if (victim == nullptr) {
      // Only its own beam search (and nothing behind it) holds memory: its beams cannot all be
      // in the pool at once.
      finish(head, FinishReason::kRejected);
      ++stats_.held_beams_rejected;
      return false;
    }
    preempt(victim, out);
    ++stats_.held_preemptions;
  }
}

bool Scheduler::admit_reserved(SchedulerRequest* r, int& budget, SchedulerOutput& out) {
  const int bs = manager_.block_size();
  const int tokens = kv_reservation_tokens(config_.kv_reservation, r->kv.num_prompt_tokens, r->stop.max_tokens,
                                           r->stop.known_output_tokens, manager_.max_model_len());
  // At least the prompt and the first output token's slot: a prompt the model cannot hold is rejected.
  const int blocks = ceil_div(std::max(tokens, r->kv.num_tokens()), bs);
  if (blocks > ranges_->max_allocation() || r->kv.num_tokens() > manager_.max_model_len()) {
    finish(r, FinishReason::kRejected);  // larger than the whole cache: it can never run
    return true;
  }
  const std::optional<int32_t> first = ranges_->allocate(blocks);
  if (!first) return false;
  waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  r->reserved_blocks.clear();
  // The whole range, the allocator's rounding (buddy) included: it is this request's to waste.
  const int32_t held = ranges_->allocated_length(*first);
  for (int32_t b = 0; b < held; ++b) r->reserved_blocks.push_back(BlockId{*first + b});
  const int n = std::min(r->kv.num_tokens(), budget);
  r->kv.num_computed_tokens = 0;
  if (r->prefix_hit_tokens < 0) r->prefix_hit_tokens = 0;
  r->status = RequestStatus::kRunning;
  r->admit_seq = next_admit_seq_++;
  running_.push_back(r);
  ++stats_.admissions;
  out.rewritten_tables.push_back(r->kv.id);
  out.chunks.push_back(ScheduledChunk{r, n, 0, n == r->kv.num_tokens()});
  out.num_batched_tokens += n;
  budget -= n;
  return true;
}

std::span<const BlockId> Scheduler::block_ids(const SchedulerRequest& r) const {
  if (ranges_) return r.reserved_blocks;
  return manager_.get_block_ids(r.kv);
}

KVMemoryBreakdown Scheduler::memory_breakdown() const {
  KVMemoryBreakdown m;
  const int64_t bs = manager_.block_size();
  m.total_slots = static_cast<int64_t>(manager_.pool().num_usable_blocks()) * bs;
  if (ranges_) {
    for (const SchedulerRequest* r : running_) {
      const int64_t slots = static_cast<int64_t>(r->reserved_blocks.size()) * bs;
      const int output = r->stop.known_output_tokens >= 0 ? r->stop.known_output_tokens : r->stop.max_tokens;
      // The slots it will fill: every token but the last sampled one is computed.
      const int64_t will_fill =
          std::min<int64_t>(slots, std::max<int64_t>(r->kv.num_computed_tokens, r->kv.num_prompt_tokens + output - 1));
      m.token_states += r->kv.num_computed_tokens;
      m.reserved += will_fill - r->kv.num_computed_tokens;
      m.internal_fragmentation += slots - will_fill;
    }
    m.free = static_cast<int64_t>(ranges_->largest_free_run()) * bs;
    m.external_fragmentation = static_cast<int64_t>(ranges_->num_free()) * bs - m.free;
    return m;
  }
  // Paged: a block shared by several sequences (forks, prefix hits) holds as many token states
  // as its fullest holder wrote.
  std::unordered_map<int32_t, int> filled;
  for (const SchedulerRequest* r : running_) {
    const auto ids = manager_.get_block_ids(r->kv);
    for (size_t i = 0; i < ids.size(); ++i) {
      const int in_block =
          static_cast<int>(std::clamp<int64_t>(r->kv.num_computed_tokens - static_cast<int64_t>(i) * bs, 0, bs));
      int& f = filled[ids[i].value];
      f = std::max(f, in_block);
    }
  }
  const int64_t used_blocks = manager_.pool().num_usable_blocks() - manager_.num_free_blocks();
  for (const auto& [block, f] : filled) m.token_states += f;
  m.internal_fragmentation = used_blocks * bs - m.token_states;
  m.free = static_cast<int64_t>(manager_.num_free_blocks()) * bs;
  return m;
}

bool Scheduler::check_stop(SchedulerRequest* r, TokenId token) {
  const StopConditions& s = r->stop;
  if ((!s.ignore_eos && token == s.eos_token_id) ||
      std::find(s.stop_token_ids.begin(), s.stop_token_ids.end(), token) != s.stop_token_ids.end()) {
    r->stopped_on_stop_token = true;
    finish(r, FinishReason::kStop);
    return true;
  }
  if (s.known_output_tokens > 0 && r->num_output_tokens() >= s.known_output_tokens) {
    finish(r, FinishReason::kStop);  // the dataset's end of this output, standing in for EOS
    return true;
  }
  if (r->num_output_tokens() >= s.max_tokens || r->kv.num_tokens() > manager_.max_model_len()) {
    finish(r, FinishReason::kLength);
    return true;
  }
  return false;
}

std::vector<SchedulerRequest*> Scheduler::update(const SchedulerOutput& output,
                                                 const std::vector<SampledTokens>& sampled) {
  if (sampled.size() != output.chunks.size())
    throw UsageError(fmt::format("update: {} sampled entries for {} chunks", sampled.size(), output.chunks.size()));
  for (size_t i = 0; i < output.chunks.size(); ++i) {
    const ScheduledChunk& c = output.chunks[i];
    SchedulerRequest* r = c.request;
    if (r->status != RequestStatus::kRunning) continue;  // aborted meanwhile
    r->kv.num_computed_tokens += c.num_new_tokens;
    if (!c.samples) continue;
    // Parallel sampling: children share every block computed so far and start from their own token.
    if (r->n > 1 && !r->forked) {
      r->forked = true;
      for (size_t k = 0; k < sampled[i].fork_tokens.size(); ++k)
        fork_request(*r, r->kv.id, static_cast<int>(k) + 1, sampled[i].fork_tokens[k]);
    }
    const TokenId t = sampled[i].token;
    if (t < 0) continue;  // held: the engine appends its token later
    r->kv.append_token(t);
    check_stop(r, t);
  }
  return take_finished();
}

std::vector<SchedulerRequest*> Scheduler::take_finished() {
  std::vector<SchedulerRequest*> done;
  done.swap(newly_finished_);
  return done;
}

SchedulerRequest* Scheduler::fork_request(SchedulerRequest& from, RequestId root, int sample_index, TokenId token) {
  if (from.status != RequestStatus::kRunning || from.kv.num_computed_tokens != from.kv.num_tokens() || ranges_)
    throw InvariantError(fmt::format(
        "fork_request: request {} is not a paged, running request with every token computed", from.kv.id.value));
  auto child = std::make_unique<SchedulerRequest>(from);
  child->kv.id = RequestId{next_child_id_++};
  child->parent = root;
  child->sample_index = sample_index;
  child->n = 1;
  child->host_blocks.clear();
  child->deferred_swap_sources.clear();
  manager_.fork(from.kv, child->kv);
  child->admit_seq = next_admit_seq_++;
  child->arrival_seq = from.arrival_seq;  // a fork keeps its request's place in line
  SchedulerRequest* cp = child.get();
  requests_.emplace(cp->kv.id, std::move(child));
  running_.push_back(cp);
  append_token(*cp, token);
  return cp;
}

bool Scheduler::append_token(SchedulerRequest& r, TokenId token) {
  if (r.status != RequestStatus::kRunning || r.kv.num_computed_tokens != r.kv.num_tokens())
    throw InvariantError(
        fmt::format("append_token: request {} is not running with every token computed", r.kv.id.value));
  r.kv.append_token(token);
  return check_stop(&r, token);
}

}  // namespace pagedkv
