#include "pagedkv/workload/kvcache_peer.h"

#include <fmt/format.h>
#include <x86intrin.h>

#include <algorithm>
#include <chrono>
#include <deque>

#include "pagedkv/core/cpu_clock.h"
#include "pagedkv/core/error.h"
#include "pagedkv/manager/kv_cache_manager.h"

namespace pagedkv {

PeerWorkload PeerWorkload::generate() {
  PeerWorkload w;
  SplitMix64 rng(kSeed);
  w.system_prompt.resize(kSystemPromptLen);
  for (auto& t : w.system_prompt) t = static_cast<TokenId>(rng.next() % kVocab);
  w.prompts.resize(kNumRequests);
  for (int i = 0; i < kNumRequests; ++i) {
    auto& p = w.prompts[static_cast<size_t>(i)];
    if (i % 2 == 0) {
      const auto len = rng.uniform_int(16, 976);
      p = w.system_prompt;
      for (uint64_t k = 0; k < len; ++k) p.push_back(static_cast<TokenId>(rng.next() % kVocab));
    } else {
      const auto len = rng.uniform_int(200, 2000);
      for (uint64_t k = 0; k < len; ++k) p.push_back(static_cast<TokenId>(rng.next() % kVocab));
    }
  }
  return w;
}

uint64_t PeerWorkload::total_prompt_tokens() const {
  uint64_t n = 0;
  for (const auto& p : prompts) n += p.size();
  return n;
}

uint64_t PeerWorkload::rolling_checksum() const {
  uint64_t h = 0;
  for (const auto& p : prompts)
    for (TokenId t : p) h = h * 1000003ull + static_cast<uint64_t>(t) + 1;
  return h;
}

PeerScenario PeerScenario::by_name(const std::string& name) {
  if (name == "A" || name == "a") return PeerScenario{"A", 4096, 64, 2048};
  if (name == "B" || name == "b") return PeerScenario{"B", 2048, 128, 2048};
  throw ConfigError(fmt::format("unknown peer scenario '{}' (expected A or B)", name));
}

PeerCounters peer_reference_counters_a() {
  PeerCounters c;
  c.steps = 4113;
  c.preemptions = 4;
  c.finished = 2000;
  c.admissions_ok = 2004;
  c.admissions_failed = 80;
  c.decode_calls = 254000;
  c.prefill_chunk_calls = 435;
  c.evictions = 110313;
  c.first_admission_hits = 1022976;
  c.first_admission_queries = 2608990;
  c.lookup_hits = 1028096;
  c.lookup_queries = 2626982;
  c.peak_running = 64;
  c.free_blocks_at_end = 4095;
  return c;
}

namespace {

// TSC-based timer: a read costs a few ns, so per-operation timing barely perturbs a 30 ns op.
class TscClock {
 public:
  TscClock() {
    auto t0 = std::chrono::steady_clock::now();
    uint64_t c0 = __rdtsc();
    while (std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(20)) {
    }
    uint64_t c1 = __rdtsc();
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    ns_per_tick_ = ns / static_cast<double>(c1 - c0);
  }
  double ns(uint64_t ticks) const { return static_cast<double>(ticks) * ns_per_tick_; }

 private:
  double ns_per_tick_ = 1.0;
};

// The replay's own fields first, so that with the request's decode-step fields (Request's first
// 40 bytes) a step touches one cache line per request.
struct alignas(64) LiveRequest {
  int index = 0;
  int outputs = 0;
  bool admitted_once = false;
  bool in_prefill = true;
  Request req;
};

template <bool kTimed>
PeerCounters run(const PeerWorkload& w, const PeerScenario& sc, HashAlgorithm hash, bool check, PeerTimings* t) {
  KVCacheManagerConfig cfg;
  cfg.cache.num_blocks = sc.num_blocks;
  cfg.cache.groups.push_back(
      KVCacheGroupSpec{KVCacheSpec{AttentionKind::kFull, PeerWorkload::kBlockSize, 8, 128, DType::kF16, 0}, 32});
  cfg.max_model_len = 4096;
  cfg.hash_algorithm = hash;
  KVCacheManager mgr(std::move(cfg));

  auto tick = [] { return kTimed ? __rdtsc() : 0ull; };
  uint64_t admit_ticks = 0, decode_ticks = 0, free_ticks = 0, hash_ticks = 0, chunk_ticks = 0;
  uint64_t decode_new_block_ticks = 0, decode_new_block_calls = 0;

  // Requests are created (and their prompts hashed) up front, as they would be on arrival. They
  // all arrive at once; they are hashed in groups (chains of different requests interleave where
  // the hash allows it: 16 SHA-256 lanes want many chains at once), each group right after its
  // prompts were copied, while they are still in cache: up to 128 requests or 512 KiB of tokens
  // (half of a 1 MiB L2; 64 to 128 requests here ran 3-9 % faster than 16, and 256 requests
  // slowed SHA-256 down by 15 % on this machine's 2 MiB L2).
  constexpr size_t kArrivalBatch = 128;
  constexpr size_t kArrivalBatchBytes = 512 * 1024;
  std::vector<LiveRequest> all(w.prompts.size());  // never resized: the queues point into it
  std::vector<Request*> arrivals;
  arrivals.reserve(kArrivalBatch);
  size_t arrival_bytes = 0;
  std::deque<LiveRequest*> waiting;
  for (size_t i = 0; i < w.prompts.size(); ++i) {
    LiveRequest* r = &all[i];
    r->index = static_cast<int>(i);
    r->req.id = RequestId{i};
    r->req.tokens.reserve(w.prompts[i].size() + PeerWorkload::kOutputLen);
    r->req.tokens = w.prompts[i];
    r->req.num_prompt_tokens = static_cast<int>(w.prompts[i].size());
    waiting.push_back(r);
    arrivals.push_back(&r->req);
    arrival_bytes += w.prompts[i].size() * sizeof(TokenId);
    if (arrivals.size() == kArrivalBatch || arrival_bytes >= kArrivalBatchBytes || i + 1 == w.prompts.size()) {
      const uint64_t t0 = tick();
      mgr.hash_requests(arrivals);
      hash_ticks += tick() - t0;
      arrivals.clear();
      arrival_bytes = 0;
    }
  }

  PeerCounters c;
  std::vector<LiveRequest*> running;
  std::vector<std::pair<LiveRequest*, int>> scheduled;
  std::vector<Request*> filled;  // requests whose last token this step filled a block
  const bool batch_step_hashes = mgr.hasher().small_batches_pay();
  ComputedBlocks hits;
  running.reserve(static_cast<size_t>(sc.max_num_seqs));
  while (!waiting.empty() || !running.empty()) {
    ++c.steps;
    int budget = sc.max_num_batched_tokens;
    bool preempted = false;
    scheduled.clear();
    // 1. Running requests first: decode steps and prefill chunks.
    for (size_t i = 0; i < running.size();) {
      LiveRequest* r = running[i];
      const int n = std::min(r->req.num_tokens() - r->req.num_computed_tokens, budget);
      if (n == 0) {
        ++i;
        continue;
      }
      bool ok = false;
      bool self_preempted = false;
      for (;;) {
        const uint64_t t0 = tick();
        const auto got = mgr.allocate_slots(r->req, n);
        const uint64_t dt = tick() - t0;
        ok = got.has_value();
        if (r->in_prefill) {
          ++c.prefill_chunk_calls;
          chunk_ticks += dt;
        } else {
          ++c.decode_calls;
          decode_ticks += dt;
          if (kTimed && ok && !got->blocks[0].empty()) {
            ++decode_new_block_calls;
            decode_new_block_ticks += dt;
          }
        }
        if (check) mgr.check_invariants();
        if (ok) break;
        LiveRequest* victim = running.back();
        running.pop_back();
        const uint64_t f0 = tick();
        mgr.free(victim->req);
        free_ticks += tick() - f0;
        victim->req.num_computed_tokens = 0;
        victim->in_prefill = true;
        ++victim->req.num_preemptions;
        ++c.preemptions;
        waiting.push_front(victim);
        preempted = true;
        if (victim == r) {
          self_preempted = true;
          break;
        }
      }
      if (self_preempted) break;
      scheduled.emplace_back(r, n);
      budget -= n;
      ++i;
    }
    // 2. Admission, only in steps without preemption.
    if (!preempted) {
      while (!waiting.empty() && budget > 0 && static_cast<int>(running.size()) < sc.max_num_seqs) {
        LiveRequest* r = waiting.front();
        const uint64_t t0 = tick();
        mgr.get_computed_blocks(r->req, hits);
        const int hit = hits.num_computed_tokens;
        const int n = std::min(r->req.num_tokens() - hit, budget);
        // The whole current sequence must fit, not just this step's chunk.
        bool ok = mgr.get_num_blocks_to_allocate(r->req, r->req.num_tokens(), &hits) <= mgr.num_free_blocks() &&
                  mgr.allocate_slots(r->req, n, hit, &hits).has_value();
        admit_ticks += tick() - t0;
        if (check) mgr.check_invariants();
        if (!ok) {
          ++c.admissions_failed;
          break;
        }
        ++c.admissions_ok;
        if (!r->admitted_once) {
          r->admitted_once = true;
          c.first_admission_hits += static_cast<uint64_t>(hit);
          c.first_admission_queries += static_cast<uint64_t>(r->req.num_tokens());
        }
        r->req.num_computed_tokens = hit;
        r->in_prefill = true;
        waiting.pop_front();
        running.push_back(r);
        scheduled.emplace_back(r, n);
        budget -= n;
      }
    }
    c.peak_running = std::max<uint64_t>(c.peak_running, running.size());
    // 3. Advance: finished prefills and decodes produce a token; 128 outputs finish a request.
    // Where it pays (SHA-256 lanes), the blocks this step's tokens filled are hashed together
    // afterwards, instead of one at a time by the next step's allocate_slots.
    filled.clear();
    for (auto& [r, n] : scheduled) {
      r->req.num_computed_tokens += n;
      if (r->req.num_computed_tokens != r->req.num_tokens()) continue;
      r->in_prefill = false;
      r->req.append_token(PeerWorkload::output_token(r->index, r->outputs));
      if (batch_step_hashes && r->req.num_tokens() % PeerWorkload::kBlockSize == 0) filled.push_back(&r->req);
      if (++r->outputs == PeerWorkload::kOutputLen) {
        const uint64_t f0 = tick();
        mgr.free(r->req);
        free_ticks += tick() - f0;
        if (check) mgr.check_invariants();
        running.erase(std::find(running.begin(), running.end(), r));
        ++c.finished;
        if (!filled.empty() && filled.back() == &r->req) filled.pop_back();  // freed: nothing to cache
      }
    }
    if (!filled.empty()) {
      const uint64_t t0 = tick();
      mgr.hash_requests(filled);
      const uint64_t dt = tick() - t0;  // counted with the decode steps, whose blocks these are
      decode_ticks += dt;
      decode_new_block_ticks += dt;
    }
  }
  c.evictions = mgr.pool().stats().evictions;
  // vLLM's prefix-cache stats: every lookup by a request that was never preempted.
  c.lookup_hits = mgr.prefix_cache_stats().hits;
  c.lookup_queries = mgr.prefix_cache_stats().queries;
  c.free_blocks_at_end = mgr.num_free_blocks();
  if (t) {
    static const TscClock clock;
    t->admit_ns = clock.ns(admit_ticks);
    t->decode_ns = clock.ns(decode_ticks);
    t->free_ns = clock.ns(free_ticks);
    t->hash_ns = clock.ns(hash_ticks);
    t->prefill_chunk_ns = clock.ns(chunk_ticks);
    t->decode_new_block_ns = clock.ns(decode_new_block_ticks);
    t->decode_new_block_ops = decode_new_block_calls;
    t->admit_ops = c.admissions_ok + c.admissions_failed;
    t->decode_ops = c.decode_calls;
    t->free_ops = c.finished + c.preemptions;
    t->hash_ops = w.prompts.size();
    t->prefill_chunk_ops = c.prefill_chunk_calls;
  }
  return c;
}

}  // namespace

PeerResult replay_peer(const PeerWorkload& workload, const PeerScenario& scenario, HashAlgorithm hash,
                       bool check_invariants, bool per_operation_timers) {
  PeerResult result;
  const double cpu0 = thread_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  result.counters = run<false>(workload, scenario, hash, check_invariants, nullptr);
  result.timings.whole_replay_cpu_ns = (thread_cpu_seconds() - cpu0) * 1e9;
  result.timings.whole_replay_ns =
      std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  if (!per_operation_timers) return result;
  const PeerCounters timed = run<true>(workload, scenario, hash, false, &result.timings);
  if (!(timed == result.counters)) throw InvariantError("peer replay: timed and untimed runs disagree");
  return result;
}

}  // namespace pagedkv
