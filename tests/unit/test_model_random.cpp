// Model-based randomized test of the KV-cache manager.
//
// A reference model built from plain std containers (a std::list LRU free list, a std::map from
// the *whole token prefix* of a block to the blocks caching it, ref counts per block, block
// tables per request) states the semantics the manager must have: vLLM v1's allocate_slots /
// get_computed_blocks / free, plus fork and copy-on-write. The model never hashes: its cache is
// keyed by the exact prefix, which is what hashing approximates. Random operations (admission
// with prefix lookup and chunked prefill, decode, lookahead, free, preempt-and-readmit, fork,
// copy-on-write writes, can_allocate, reset) run on a small pool so that eviction is constant,
// and after every operation the observable results must agree: success of each call, hit
// lengths, the exact block tables (so, which requests share which blocks), the free blocks in
// eviction order, the cached-block count, the pending copies; and the manager's own invariant
// checker must pass.
//
// Seeds: PAGEDKV_SEED=<n> replays one; otherwise a random seed is drawn. It is always printed,
// and a failure prints it again with the last operations. Length: PAGEDKV_MODEL_TEST_OPS=<n>
// operations per run (default 10^6; 2x10^5 when built with AddressSanitizer).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <string_view>

#include "core_test_support.h"

#if defined(__SANITIZE_ADDRESS__)
#define PAGEDKV_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define PAGEDKV_TEST_UNDER_ASAN 1
#endif
#endif

namespace pagedkv {
namespace {

int cdiv(int a, int b) { return (a + b - 1) / b; }

uint64_t env_u64(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 0) : fallback;
}

uint64_t default_ops() {
#ifdef PAGEDKV_TEST_UNDER_ASAN
  return 200'000;
#else
  return 1'000'000;
#endif
}

// ---- the reference model -----------------------------------------------------------------------

// What a block's KV depends on: the adapter and every token up to the end of the block.
using PrefixKey = std::pair<uint64_t, std::vector<TokenId>>;

class Model {
 public:
  struct Req {
    std::vector<TokenId> tokens;
    uint64_t lora = 0;
    int num_computed = 0;
    std::vector<int> table;
    int num_cached = 0;
  };

  Model(int num_blocks, int block_size, int max_model_len)
      : bs_(block_size),
        max_len_(max_model_len),
        ref_(static_cast<size_t>(num_blocks), 0),
        key_of_(static_cast<size_t>(num_blocks)) {
    for (int b = 1; b < num_blocks; ++b) free_.push_back(b);
  }

  // Cached blocks covering the longest cached prefix, at most (n - 1) tokens.
  std::vector<int> lookup(const std::vector<TokenId>& tokens, uint64_t lora) const {
    std::vector<int> hits;
    const int max_blocks = tokens.empty() ? 0 : (static_cast<int>(tokens.size()) - 1) / bs_;
    for (int i = 0; i < max_blocks; ++i) {
      auto it = cache_.find(key(tokens, lora, i));
      if (it == cache_.end() || it->second.empty()) break;
      hits.push_back(it->second.front());  // the earliest cached copy
    }
    return hits;
  }

  // vLLM v1 allocate_slots. Returns the new blocks, or nullopt with nothing changed.
  std::optional<std::vector<int>> allocate(uint64_t id, const Req& caller, int num_new, int num_new_computed,
                                           const std::vector<int>& hits, int lookahead) {
    auto it = reqs_.find(id);
    const int num_computed = caller.num_computed + num_new_computed;
    const int slots = std::min(num_computed + num_new + lookahead, max_len_);
    const int held = it == reqs_.end() ? 0 : static_cast<int>(it->second.table.size());
    int needed = std::max(0, cdiv(slots, bs_) - static_cast<int>(hits.size()) - held);
    for (int h : hits) needed += ref_[static_cast<size_t>(h)] == 0;
    if (it != reqs_.end())
      for (int i = num_computed / bs_; i < held; ++i)
        needed += ref_[static_cast<size_t>(it->second.table[static_cast<size_t>(i)])] > 1;
    if (needed > static_cast<int>(free_.size())) return std::nullopt;

    Req& r = reqs_[id];
    r.tokens = caller.tokens;
    r.lora = caller.lora;
    r.num_computed = caller.num_computed;
    for (int h : hits) {
      if (ref_[static_cast<size_t>(h)]++ == 0) free_.remove(h);
      r.table.push_back(h);
    }
    if (!hits.empty()) r.num_cached = static_cast<int>(hits.size());
    for (size_t i = static_cast<size_t>(num_computed / bs_); i < r.table.size(); ++i) {  // copy-on-write
      const int old = r.table[i];
      if (ref_[static_cast<size_t>(old)] <= 1) continue;
      const int fresh = pop_free();
      if (static_cast<int>(i) * bs_ < num_computed) copies_.emplace_back(old, fresh);
      r.table[i] = fresh;
      --ref_[static_cast<size_t>(old)];
    }
    const size_t first_new = r.table.size();
    for (int want = cdiv(slots, bs_) - static_cast<int>(r.table.size()); want > 0; --want)
      r.table.push_back(pop_free());
    const int num_full = std::min(num_computed + num_new, static_cast<int>(r.tokens.size())) / bs_;
    for (int i = r.num_cached; i < num_full; ++i) {
      const int b = r.table[static_cast<size_t>(i)];
      if (key_of_[static_cast<size_t>(b)]) continue;  // already cached (a shared block)
      PrefixKey k = key(r.tokens, r.lora, i);
      cache_[k].push_back(b);
      key_of_[static_cast<size_t>(b)] = std::move(k);
    }
    r.num_cached = std::max(r.num_cached, num_full);
    return std::vector<int>(r.table.begin() + static_cast<ptrdiff_t>(first_new), r.table.end());
  }

  void free(uint64_t id) {
    auto it = reqs_.find(id);
    for (auto b = it->second.table.rbegin(); b != it->second.table.rend(); ++b)
      if (--ref_[static_cast<size_t>(*b)] == 0) free_.push_back(*b);
    reqs_.erase(it);
  }

  void fork(uint64_t parent, uint64_t child) {
    Req copy = reqs_.at(parent);
    for (int b : copy.table) ++ref_[static_cast<size_t>(b)];
    reqs_.emplace(child, std::move(copy));
  }

  std::pair<int, int> reset() {  // (removed, kept in use)
    int removed = 0, kept = 0;
    for (size_t b = 0; b < key_of_.size(); ++b) {
      if (!key_of_[b]) continue;
      if (ref_[b] > 0) {
        ++kept;
        continue;
      }
      uncache(static_cast<int>(b));
      ++removed;
    }
    return {removed, kept};
  }

  AllocStatus can_allocate(const std::vector<TokenId>& tokens, uint64_t lora, int watermark_blocks) const {
    const int n = static_cast<int>(tokens.size());
    if (n > max_len_) return AllocStatus::kNever;
    const int required = cdiv(n, bs_);
    if (static_cast<int>(ref_.size()) - 1 - required < watermark_blocks) return AllocStatus::kNever;
    const auto hits = lookup(tokens, lora);
    int need = required - static_cast<int>(hits.size());
    for (int h : hits) need += ref_[static_cast<size_t>(h)] == 0;
    return static_cast<int>(free_.size()) - need >= watermark_blocks ? AllocStatus::kOk : AllocStatus::kLater;
  }

  std::vector<std::pair<BlockId, BlockId>> take_copies() {
    std::vector<std::pair<BlockId, BlockId>> out;
    for (auto [s, d] : copies_) out.emplace_back(BlockId{s}, BlockId{d});
    copies_.clear();
    return out;
  }

  const std::list<int>& free_list() const { return free_; }
  int num_cached() const {
    int n = 0;
    for (const auto& k : key_of_) n += k.has_value();
    return n;
  }
  const std::map<uint64_t, Req>& requests() const { return reqs_; }
  bool has(uint64_t id) const { return reqs_.contains(id); }

 private:
  PrefixKey key(const std::vector<TokenId>& tokens, uint64_t lora, int block) const {
    return {lora, std::vector<TokenId>(tokens.begin(), tokens.begin() + (block + 1) * bs_)};
  }
  int pop_free() {
    const int b = free_.front();
    free_.pop_front();
    if (key_of_[static_cast<size_t>(b)]) uncache(b);  // eviction on reuse
    ref_[static_cast<size_t>(b)] = 1;
    return b;
  }
  void uncache(int b) {
    auto it = cache_.find(*key_of_[static_cast<size_t>(b)]);
    it->second.remove(b);
    if (it->second.empty()) cache_.erase(it);
    key_of_[static_cast<size_t>(b)].reset();
  }

  int bs_;
  int max_len_;
  std::list<int> free_;  // front: handed out next (least recently freed)
  std::vector<int> ref_;
  std::map<PrefixKey, std::list<int>> cache_;  // exact prefix -> blocks, earliest cached first
  std::vector<std::optional<PrefixKey>> key_of_;
  std::map<uint64_t, Req> reqs_;
  std::vector<std::pair<int, int>> copies_;
};

// ---- the driver ----------------------------------------------------------------------------------

BlockHash constant_hash(std::span<const std::byte>, uint64_t) { return BlockHash{7, 7}; }

struct RunConfig {
  int num_blocks = 24;
  int block_size = 4;
  bool colliding_hash = false;
  uint64_t ops = 0;
  uint64_t seed = 0;
};

class RandomRun {
 public:
  explicit RandomRun(const RunConfig& cfg)
      : cfg_(cfg), rng_(cfg.seed), manager_(make_config(cfg)), model_(cfg.num_blocks, cfg.block_size, max_len()) {
    // A few shared "system prompts" so that lookups hit; a tiny vocabulary so that equal blocks
    // at different positions (and colliding parents) are common.
    for (int p = 0; p < 4; ++p) {
      std::vector<TokenId> prefix;
      const int len = 4 + static_cast<int>(rng_() % 17);
      for (int i = 0; i < len; ++i) prefix.push_back(static_cast<TokenId>(rng_() % 5));
      prefixes_.push_back(prefix);
    }
  }

  void run() {
    for (uint64_t op = 0; op < cfg_.ops; ++op) {
      step(op);
      if (::testing::Test::HasFailure()) {
        report(op);
        return;
      }
    }
  }

  uint64_t admissions = 0, hits = 0, evictions_seen = 0, forks = 0, copies = 0, failures = 0;

 private:
  static KVCacheManagerConfig make_config(const RunConfig& cfg) {
    auto c = testing::full_attention_config(cfg.num_blocks, cfg.block_size, /*watermark=*/0.05);
    c.max_model_len = max_len(cfg);
    if (cfg.colliding_hash) c.hash_function = &constant_hash;
    return c;
  }
  // Lookahead slots are capped here, which the model must reproduce.
  static int max_len(const RunConfig& cfg) { return 10 * cfg.block_size; }
  int max_len() const { return max_len(cfg_); }
  int block_size() const { return cfg_.block_size; }

  struct Live {
    Request request;  // the caller's view: tokens and num_computed_tokens
    bool running = false;
  };

  // The last operations, kept as numbers (formatting every one would dominate the run) and
  // printed on failure.
  struct OpRecord {
    uint64_t op = 0;
    const char* what = "";
    uint64_t id = 0, other = 0;
    int tokens = 0, hit_or_at = 0, chunk = 0, lookahead = 0;
  };
  void log(const OpRecord& r) { history_[history_next_++ % history_.size()] = r; }
  std::string describe(const OpRecord& r) const {
    std::ostringstream s;
    s << "op " << r.op << ": " << r.what << " " << r.id;
    if (std::string_view(r.what) == "admit")
      s << " (" << r.tokens << " tokens, " << r.hit_or_at << " hit, chunk " << r.chunk << ")";
    else if (std::string_view(r.what) == "advance")
      s << " by " << r.chunk << " (+" << r.lookahead << " lookahead) at " << r.hit_or_at;
    else if (std::string_view(r.what) == "fork") s << " -> " << r.other;
    return s.str();
  }

  void report(uint64_t op) {
    std::ostringstream s;
    s << "model test failed at operation " << op << " with PAGEDKV_SEED=" << cfg_.seed
      << (cfg_.colliding_hash ? " (colliding hash)" : "") << "; last operations:\n";
    for (uint64_t i = history_next_ > history_.size() ? history_next_ - history_.size() : 0; i < history_next_; ++i)
      s << "  " << describe(history_[i % history_.size()]) << "\n";
    ADD_FAILURE() << s.str();
  }

  std::vector<TokenId> random_prompt() {
    std::vector<TokenId> t;
    if (rng_() % 4 != 0) t = prefixes_[rng_() % prefixes_.size()];
    const int extra = 1 + static_cast<int>(rng_() % (3 * block_size()));
    for (int i = 0; i < extra; ++i) t.push_back(static_cast<TokenId>(rng_() % 5));
    if (static_cast<int>(t.size()) > max_len() - 4) t.resize(static_cast<size_t>(max_len() - 4));
    return t;
  }

  // Admission: lookup, then the first prefill chunk with the hits.
  void admit(Live& l, uint64_t op) {
    Request& r = l.request;
    const std::vector<int> want_hits = model_.lookup(r.tokens, r.lora_id);
    ComputedBlocks hit = manager_.get_computed_blocks(r);
    ASSERT_EQ(testing::ids_of(hit.blocks[0]), want_hits) << "lookup of request " << r.id.value;
    ASSERT_EQ(hit.num_computed_tokens, static_cast<int>(want_hits.size()) * block_size());
    const int remaining = r.num_tokens() - hit.num_computed_tokens;
    const int n = rng_() % 2 ? remaining : std::min(remaining, 1 + static_cast<int>(rng_() % 8));
    log({op, "admit", r.id.value, 0, r.num_tokens(), hit.num_computed_tokens, n, 0});
    Model::Req caller{r.tokens, r.lora_id, r.num_computed_tokens, {}, 0};
    auto want = model_.allocate(r.id.value, caller, n, hit.num_computed_tokens, want_hits, 0);
    auto got = manager_.allocate_slots(r, n, hit.num_computed_tokens, &hit);
    ASSERT_EQ(got.has_value(), want.has_value()) << "admission of request " << r.id.value;
    ++admissions;
    if (!got) {
      ++failures;
      return;
    }
    ASSERT_EQ(testing::ids_of(got->blocks[0]), *want);
    hits += static_cast<uint64_t>(hit.num_computed_tokens);
    r.num_computed_tokens = hit.num_computed_tokens + n;
    l.running = true;
  }

  // A scheduled step of a running request: the next prefill chunk, or one decode token.
  // Returns false when the request is complete (at max_model_len) and should finish instead.
  bool advance(Live& l, uint64_t op) {
    Request& r = l.request;
    if (r.num_computed_tokens == r.num_tokens()) {
      if (r.num_tokens() >= max_len()) return false;
      r.append_token(static_cast<TokenId>(rng_() % 5));
    }
    const int remaining = r.num_tokens() - r.num_computed_tokens;
    const int n = std::min(remaining, 1 + static_cast<int>(rng_() % 6));
    const int lookahead = rng_() % 8 == 0 ? static_cast<int>(rng_() % 5) : 0;
    log({op, "advance", r.id.value, 0, r.num_tokens(), r.num_computed_tokens, n, lookahead});
    Model::Req caller{r.tokens, r.lora_id, r.num_computed_tokens, {}, 0};
    auto want = model_.allocate(r.id.value, caller, n, 0, {}, lookahead);
    auto got = manager_.allocate_slots(r, n, 0, nullptr, lookahead);
    EXPECT_EQ(got.has_value(), want.has_value()) << "step of request " << r.id.value;
    if (!got || !want) {
      ++failures;
      return true;
    }
    EXPECT_EQ(testing::ids_of(got->blocks[0]), *want);
    r.num_computed_tokens += n;
    return true;
  }

  void finish(size_t k, uint64_t op) {
    log({op, "free", live_[k].request.id.value});
    ASSERT_TRUE(manager_.free(live_[k].request));
    model_.free(live_[k].request.id.value);
    live_.erase(live_.begin() + static_cast<ptrdiff_t>(k));
  }

  void compare_state() {
    manager_.check();
    ASSERT_EQ(manager_->num_free_blocks(), static_cast<int>(model_.free_list().size()));
    ASSERT_TRUE(same_free_order()) << "free queue (eviction order)";
    ASSERT_EQ(manager_->pool().num_cached_blocks(), model_.num_cached());
    ASSERT_EQ(manager_->num_requests(), static_cast<int>(model_.requests().size()));
    for (const auto& [id, req] : model_.requests()) {
      auto got = manager_->get_block_ids(RequestId{id});
      if (!std::equal(got.begin(), got.end(), req.table.begin(), req.table.end(),
                      [](BlockId b, int m) { return b.value == m; })) {
        ASSERT_EQ(testing::ids_of(got), req.table) << "table of request " << id;
      }
    }
    ASSERT_EQ(manager_->take_pending_copies(), model_.take_copies());
  }

  // The pool's free queue, front to back, equals the model's LRU list (walked without copies).
  bool same_free_order() const {
    const BlockPool& pool = manager_->pool();
    int32_t head = kNoLink;
    for (const KVCacheBlock& b : pool.blocks())
      if (b.in_free_queue && b.prev_free == kNoLink) head = b.id.value;
    auto want = model_.free_list().begin();
    for (int32_t i = head; i != kNoLink; i = pool.block(BlockId{i}).next_free, ++want)
      if (want == model_.free_list().end() || *want != i) return false;
    return want == model_.free_list().end();
  }

  void step(uint64_t op) {
    const uint64_t evictions_before = manager_->pool().stats().evictions;
    const auto dice = rng_() % 100;
    if (dice < 18 || live_.empty()) {  // a new request arrives and is admitted
      Live l;
      l.request = Request(RequestId{next_id_++}, random_prompt());
      l.request.lora_id = rng_() % 8 == 0 ? 1 : 0;
      admit(l, op);
      if (l.running) live_.push_back(std::move(l));
      else waiting_.push_back(std::move(l));
    } else if (dice < 65) {  // a running request takes a step
      const size_t k = rng_() % live_.size();
      if (!advance(live_[k], op)) finish(k, op);
    } else if (dice < 75) {  // a request finishes
      finish(rng_() % live_.size(), op);
    } else if (dice < 82) {  // preemption by recompute: free now, readmit later with its outputs
      const size_t k = rng_() % live_.size();
      Live l = std::move(live_[k]);
      live_.erase(live_.begin() + static_cast<ptrdiff_t>(k));
      log({op, "preempt", l.request.id.value});
      ASSERT_TRUE(manager_.free(l.request));
      model_.free(l.request.id.value);
      l.request.num_computed_tokens = 0;
      l.running = false;
      waiting_.push_back(std::move(l));
    } else if (dice < 90 && !waiting_.empty()) {  // the head of the waiting queue is retried
      const AllocStatus want = model_.can_allocate(waiting_.front().request.tokens, waiting_.front().request.lora_id,
                                                   manager_->watermark_blocks());
      ASSERT_EQ(manager_.can_allocate(waiting_.front().request), want) << "can_allocate";
      Live l = std::move(waiting_.front());
      waiting_.pop_front();
      admit(l, op);
      if (l.running) live_.push_back(std::move(l));
      else if (rng_() % 4 != 0) waiting_.push_back(std::move(l));  // or it gives up
    } else if (dice < 97) {  // parallel sampling: fork a running request
      const size_t k = rng_() % live_.size();
      if (live_.size() >= 12) return;
      Live child = live_[k];
      child.request.id = RequestId{next_id_++};
      log({op, "fork", live_[k].request.id.value, child.request.id.value});
      manager_.fork(live_[k].request, child.request);
      model_.fork(live_[k].request.id.value, child.request.id.value);
      live_.push_back(std::move(child));
      ++forks;
    } else {  // an operator resets the prefix cache
      log({op, "reset"});
      ResetResult got = manager_.reset_prefix_cache();
      auto [removed, kept] = model_.reset();
      ASSERT_EQ(got.removed, removed);
      ASSERT_EQ(got.kept_in_use, kept);
    }
    compare_state();
    evictions_seen += manager_->pool().stats().evictions - evictions_before;
  }

  RunConfig cfg_;
  std::mt19937_64 rng_;
  testing::CheckedManager manager_;
  Model model_;
  std::vector<std::vector<TokenId>> prefixes_;
  std::vector<Live> live_;
  std::deque<Live> waiting_;
  uint64_t next_id_ = 1;
  std::array<OpRecord, 12> history_{};
  uint64_t history_next_ = 0;
};

uint64_t pick_seed() {
  if (const char* s = std::getenv("PAGEDKV_SEED"); s && *s) return std::strtoull(s, nullptr, 0);
  return (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

void run_and_report(RunConfig cfg, const char* what) {
  std::printf("[ model    ] %s: PAGEDKV_SEED=%llu, %llu operations\n", what, static_cast<unsigned long long>(cfg.seed),
              static_cast<unsigned long long>(cfg.ops));
  std::fflush(stdout);
  RandomRun run(cfg);
  run.run();
  std::printf("[ model    ] %s: %llu admissions (%llu refused), %llu hit tokens, %llu evictions, %llu forks\n", what,
              static_cast<unsigned long long>(run.admissions), static_cast<unsigned long long>(run.failures),
              static_cast<unsigned long long>(run.hits), static_cast<unsigned long long>(run.evictions_seen),
              static_cast<unsigned long long>(run.forks));
  if (!::testing::Test::HasFailure()) {
    // The run must have exercised what it claims to (a vacuous run would pass silently).
    EXPECT_GT(run.hits, 0u);
    EXPECT_GT(run.evictions_seen, 0u);
    EXPECT_GT(run.forks, 0u);
    EXPECT_GT(run.failures, 0u) << "the pool never ran full";
  }
}

TEST(CoreModelRandom, ManagerMatchesTheReferenceModel) {
  RunConfig cfg;
  cfg.seed = pick_seed();
  cfg.ops = env_u64("PAGEDKV_MODEL_TEST_OPS", default_ops());
  run_and_report(cfg, "honest hash (xxh3)");
}

// The same, with every hash equal: content confirmation alone must keep the answers exact.
TEST(CoreModelRandom, ManagerMatchesTheReferenceModelWithCollidingHashes) {
  RunConfig cfg;
  cfg.seed = pick_seed() + 1;
  cfg.ops = env_u64("PAGEDKV_MODEL_TEST_OPS", default_ops()) / 5;
  cfg.colliding_hash = true;
  run_and_report(cfg, "colliding hash");
}

}  // namespace
}  // namespace pagedkv
