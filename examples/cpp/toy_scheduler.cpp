// A toy inference engine around pagedkv's KVCacheManager: the calls a real engine makes each step
// (docs/embedding.md), with a fake model. Requests share a system prompt, so admission finds it
// in the prefix cache; the pool is small, so some requests are preempted and recomputed.
//
// The "KV cache" is one int per slot holding the token written there: writes go through the
// step's slot mapping and reads through the block table, as a paged-attention kernel's would,
// so a wrong table or a wrong prefix hit shows up as a token read back wrong.
//
// examples/python/toy_scheduler.py is the same loop in Python; both print the same lines.
#include <pagedkv/manager/kv_cache_manager.h>
#include <pagedkv/storage/block_table.h>
#include <pagedkv/version.h>

#include <cstdint>
#include <cstdio>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace {

constexpr int kBlockSize = 16;
constexpr int kNumBlocks = 14;  // including the reserved null block 0
constexpr int kMaxModelLen = 256;
constexpr int kMaxRunning = 4;
constexpr int kNumRequests = 8;
constexpr int kSystemPromptLen = 40;

struct Sequence {
  pagedkv::Request request;
  int max_tokens = 0;
  int row = -1;  // its row in the block table while running
};

// The fake model: the next token follows from the last one and the position.
pagedkv::TokenId next_token(const pagedkv::Request& r) { return (r.tokens.back() * 31 + r.num_tokens()) % 1000 + 3000; }

std::string join(std::span<const pagedkv::BlockId> blocks) {
  std::string s;
  for (auto b : blocks) s += (s.empty() ? "" : " ") + std::to_string(b.value);
  return s;
}

}  // namespace

int main() {
  pagedkv::KVCacheManagerConfig config;
  config.cache.num_blocks = kNumBlocks;
  config.cache.groups = {pagedkv::KVCacheGroupSpec{pagedkv::KVCacheSpec{.block_size = kBlockSize}}};
  config.max_model_len = kMaxModelLen;
  pagedkv::KVCacheManager manager(std::move(config));
  pagedkv::BlockTable table(kMaxRunning, kMaxModelLen / kBlockSize);
  std::vector<int32_t> kv(kNumBlocks * kBlockSize, -1);  // token stored in each slot
  std::printf("pagedkv %s: %d requests, %d blocks of %d tokens\n", PAGEDKV_VERSION_STRING, kNumRequests, kNumBlocks - 1,
              kBlockSize);

  std::vector<std::unique_ptr<Sequence>> all;
  std::deque<Sequence*> waiting;
  for (int r = 0; r < kNumRequests; ++r) {
    std::vector<pagedkv::TokenId> prompt;
    for (int i = 0; i < kSystemPromptLen; ++i) prompt.push_back(1 + i);
    for (int i = 0; i < 6 + r; ++i) prompt.push_back(1000 + 100 * r + i);
    all.push_back(
        std::make_unique<Sequence>(Sequence{pagedkv::Request(pagedkv::RequestId(r), std::move(prompt)), 20 + 6 * r}));
    waiting.push_back(all.back().get());
  }
  std::vector<Sequence*> running;
  std::vector<int> free_rows;
  for (int row = kMaxRunning - 1; row >= 0; --row) free_rows.push_back(row);

  int step = 0;
  int finished = 0;
  while (!waiting.empty() || !running.empty()) {
    ++step;
    struct Scheduled {
      Sequence* seq;
      int num_tokens;
    };
    std::vector<Scheduled> scheduled;

    // Running requests first: a slot for the token each sampled last step. When the pool is
    // dry, the newest running request is preempted (recompute: it will be admitted again).
    bool preempted = false;
    for (size_t i = 0; i < running.size();) {
      Sequence* seq = running[i];
      auto added = manager.allocate_slots(seq->request, 1);
      if (!added) {
        Sequence* victim = running.back();
        running.pop_back();
        manager.free(victim->request);
        table.clear_row(victim->row);
        free_rows.push_back(victim->row);
        victim->request.num_computed_tokens = 0;
        victim->request.num_preemptions += 1;
        waiting.push_front(victim);
        preempted = true;
        std::printf("step %d: preempt request %llu\n", step, static_cast<unsigned long long>(victim->request.id.value));
        continue;  // retry seq, unless it was the victim (then the loop ends)
      }
      if (added->table_rewritten) {
        table.set_row(seq->row, manager.get_block_ids(seq->request));
      } else {
        table.append_row(seq->row, added->blocks[0]);
      }
      scheduled.push_back({seq, 1});
      ++i;
    }

    // Then admissions: the prefix lookup gives the cached blocks; the rest is prefilled now.
    while (!preempted && !waiting.empty() && static_cast<int>(running.size()) < kMaxRunning) {
      Sequence* seq = waiting.front();
      pagedkv::ComputedBlocks hit = manager.get_computed_blocks(seq->request);
      const int num_new = seq->request.num_tokens() - hit.num_computed_tokens;
      auto added = manager.allocate_slots(seq->request, num_new, hit.num_computed_tokens, &hit);
      if (!added) break;  // not enough free blocks: try again next step
      seq->request.num_computed_tokens = hit.num_computed_tokens;
      seq->row = free_rows.back();
      free_rows.pop_back();
      table.set_row(seq->row, manager.get_block_ids(seq->request));
      waiting.pop_front();
      running.push_back(seq);
      scheduled.push_back({seq, num_new});
      std::printf("step %d: admit request %llu, %d of %d tokens cached\n", step,
                  static_cast<unsigned long long>(seq->request.id.value), hit.num_computed_tokens,
                  seq->request.num_tokens());
    }

    // The model step: check what the KV cache holds for each request's computed tokens, write
    // the scheduled tokens' KV through the slot mapping, then sample one token each.
    for (auto [seq, n] : scheduled) {
      pagedkv::Request& r = seq->request;
      const int32_t* row = table.row(seq->row);
      for (int pos = 0; pos < r.num_computed_tokens; ++pos) {
        const int32_t slot = row[pos / kBlockSize] * kBlockSize + pos % kBlockSize;
        if (kv[static_cast<size_t>(slot)] != r.tokens[static_cast<size_t>(pos)]) {
          std::printf("request %llu: position %d reads a wrong token\n", static_cast<unsigned long long>(r.id.value),
                      pos);
          return 1;
        }
      }
      std::vector<int64_t> slots(static_cast<size_t>(n));
      pagedkv::compute_slot_mapping(row, kBlockSize, r.num_computed_tokens, n, slots.data());
      for (int j = 0; j < n; ++j) {
        kv[static_cast<size_t>(slots[static_cast<size_t>(j)])] =
            r.tokens[static_cast<size_t>(r.num_computed_tokens + j)];
      }
      r.num_computed_tokens += n;
      r.append_token(next_token(r));
    }

    // Finished requests give their blocks back (they stay cached until evicted).
    for (size_t i = 0; i < running.size();) {
      Sequence* seq = running[i];
      if (seq->request.num_tokens() - seq->request.num_prompt_tokens < seq->max_tokens) {
        ++i;
        continue;
      }
      std::printf("step %d: finish request %llu, %d tokens, blocks %s\n", step,
                  static_cast<unsigned long long>(seq->request.id.value), seq->request.num_tokens(),
                  join(manager.get_block_ids(seq->request)).c_str());
      manager.free(seq->request);
      table.clear_row(seq->row);
      free_rows.push_back(seq->row);
      running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
      ++finished;
    }
  }

  const auto& stats = manager.prefix_cache_stats();
  std::printf(
      "finished %d of %d requests in %d steps; prefix cache hits %llu of %llu tokens; "
      "free blocks %d of %d\n",
      finished, kNumRequests, step, static_cast<unsigned long long>(stats.hits + stats.preempted_hits),
      static_cast<unsigned long long>(stats.queries + stats.preempted_queries), manager.num_free_blocks(),
      kNumBlocks - 1);
  manager.check_invariants();
  return finished == kNumRequests && manager.num_free_blocks() == kNumBlocks - 1 ? 0 : 1;
}
