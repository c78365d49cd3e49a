// libFuzzer target, stateful: the fuzzer's bytes are decoded into a sequence of KV-cache manager
// operations as a scheduler issues them — admit with a prefix lookup, prefill chunks, decode,
// free, preempt and re-admit, fork and copy-on-write, can_allocate, uncache, prefix-cache reset —
// on a small pool, with a block hash that the first byte may weaken to 4 bits (so chained hashes
// collide all the time and only the stored-token comparison keeps hits right). After every
// operation:
//   - the manager's and the pool's invariant checkers pass;
//   - every request holds blocks for all its computed tokens;
//   - the KV model agrees: each block remembers the tokens written into it (allocate_slots is
//     followed by the write, copy-on-write copies are applied first), and every block a prefix
//     lookup returns holds exactly the request's tokens at that place — a hit never serves KV
//     of another prefix.
// Built and run by scripts/fuzz.sh (clang, libFuzzer, ASan+UBSan).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <span>
#include <vector>

#include "fuzz_support.h"
#include "pagedkv/manager/kv_cache_manager.h"

namespace {

using namespace pagedkv;

using pagedkv::fuzz::check;

// 4 bits of XXH-free hashing: blocks collide constantly.
BlockHash weak_hash(std::span<const std::byte> bytes, uint64_t seed) {
  uint64_t h = seed;
  for (std::byte b : bytes) h = h * 31 + static_cast<uint8_t>(b);
  return BlockHash{h & 0xF, 0};
}

constexpr int kSlots = 6;
constexpr TokenId kNoToken = -1;

class Harness {
 public:
  Harness(int num_blocks, int block_size, bool weak)
      : block_size_(block_size), written_(static_cast<size_t>(num_blocks)) {
    KVCacheManagerConfig c;
    c.cache.num_blocks = num_blocks;
    KVCacheGroupSpec g;
    g.spec.kind = AttentionKind::kFull;
    g.spec.block_size = block_size;
    c.cache.groups.push_back(g);
    c.max_model_len = 64;
    c.watermark = 0.0;
    if (weak) c.hash_function = &weak_hash;
    manager_.emplace(std::move(c));
    for (auto& w : written_) w.assign(static_cast<size_t>(block_size), kNoToken);
  }

  void run(fuzz::ByteReader& in) {
    const uint8_t op = in.next();
    Slot& s = slots_[op / 16 % kSlots];
    switch (op % 9) {
      case 0:
        admit(s, in);
        break;
      case 1:
        step(s, 1 + in.next() % 8);
        break;
      case 2:
        decode(s, in);
        break;
      case 3:
        release(s, /*preempt=*/false);
        break;
      case 4:
        release(s, /*preempt=*/true);
        break;
      case 5:
        fork(s, slots_[in.next() % kSlots]);
        break;
      case 6:
        if (s.request) (void)manager_->can_allocate(*s.request);
        break;
      case 7:
        uncache_and_free(s);
        break;
      case 8:
        if (in.next() % 4 == 0) (void)manager_->reset_prefix_cache();
        break;
    }
    verify();
  }

  void release_all() {
    for (Slot& s : slots_) release(s, false);
    verify();
    check(manager_->num_free_blocks() == manager_->pool().num_usable_blocks());
  }

 private:
  struct Slot {
    std::optional<Request> request;
    bool admitted = false;  // holds blocks in the manager
  };

  // A new request (or a preempted one coming back): tokens over a 3-letter alphabet, so prompts
  // share prefixes often; the prefix lookup's blocks are checked against what they hold.
  void admit(Slot& s, fuzz::ByteReader& in) {
    if (!s.request) {
      std::vector<TokenId> prompt(static_cast<size_t>(1 + in.next() % 40));
      for (TokenId& t : prompt) t = in.next() % 3;
      s.request.emplace(RequestId{next_id_++}, std::move(prompt));
    }
    if (s.admitted) return;
    Request& r = *s.request;
    r.num_computed_tokens = 0;
    ComputedBlocks hit = manager_->get_computed_blocks(r);
    check(hit.num_computed_tokens % block_size_ == 0 && hit.num_computed_tokens < r.num_tokens());
    for (size_t i = 0; i < hit.blocks[0].size(); ++i) expect_holds(hit.blocks[0][i], r, static_cast<int>(i));
    const int chunk = std::min(r.num_tokens() - hit.num_computed_tokens, 1 + in.next() % 48);
    auto added = manager_->allocate_slots(r, chunk, hit.num_computed_tokens, &hit);
    if (!added) return;
    s.admitted = true;
    r.num_computed_tokens = hit.num_computed_tokens;
    write(s, chunk);
  }

  // One more prefill chunk of a request still in its prompt.
  void step(Slot& s, int chunk) {
    if (!s.admitted) return;
    Request& r = *s.request;
    chunk = std::min(chunk, r.num_tokens() - r.num_computed_tokens);
    if (chunk <= 0) return;
    if (manager_->allocate_slots(r, chunk)) write(s, chunk);
  }

  // A sampled token appended and its slot reserved (one decode step). A token, once sampled,
  // stays: if the pool has no room now, a later step() computes it.
  void decode(Slot& s, fuzz::ByteReader& in) {
    if (!s.admitted) return;
    Request& r = *s.request;
    if (r.num_computed_tokens < r.num_tokens() || r.num_tokens() >= 64) return;
    r.append_token(in.next() % 3);
    step(s, 1);
  }

  // The step ran: apply copy-on-write copies, then record the chunk's tokens in their blocks.
  void write(Slot& s, int chunk) {
    for (const auto& [src, dst] : manager_->take_pending_copies())
      written_[static_cast<size_t>(dst.value)] = written_[static_cast<size_t>(src.value)];
    Request& r = *s.request;
    const std::span<const BlockId> table = manager_->get_block_ids(r);
    for (int pos = r.num_computed_tokens; pos < r.num_computed_tokens + chunk; ++pos) {
      const BlockId b = table[static_cast<size_t>(pos / block_size_)];
      written_[static_cast<size_t>(b.value)][static_cast<size_t>(pos % block_size_)] =
          r.tokens[static_cast<size_t>(pos)];
    }
    r.num_computed_tokens += chunk;
  }

  void release(Slot& s, bool preempt) {
    if (!s.request) return;
    if (s.admitted) check(manager_->free(*s.request));
    s.admitted = false;
    if (preempt) {
      s.request->num_preemptions += 1;  // comes back through admit with its tokens
    } else {
      s.request.reset();
    }
  }

  void uncache_and_free(Slot& s) {
    if (!s.admitted) return;
    manager_->uncache_uncomputed_blocks(*s.request);
    release(s, false);
  }

  // Parallel sampling: the child shares every block of the parent.
  void fork(Slot& parent, Slot& child) {
    if (!parent.admitted || child.request || &parent == &child) return;
    Request copy = *parent.request;
    copy.id = RequestId{next_id_++};
    copy.manager_slot = ~uint32_t{0};
    child.request.emplace(std::move(copy));
    manager_->fork(*parent.request, *child.request);
    child.admitted = true;
  }

  void expect_holds(BlockId b, const Request& r, int block_index) {
    const std::vector<TokenId>& held = written_[static_cast<size_t>(b.value)];
    for (int k = 0; k < block_size_; ++k)
      check(held[static_cast<size_t>(k)] == r.tokens[static_cast<size_t>(block_index * block_size_ + k)]);
  }

  void verify() {
    manager_->check_invariants();
    for (const Slot& s : slots_) {
      if (!s.admitted) continue;
      const Request& r = *s.request;
      check(manager_->has_request(r.id));
      const size_t needed = static_cast<size_t>((r.num_computed_tokens + block_size_ - 1) / block_size_);
      check(manager_->get_block_ids(r).size() >= needed);
    }
  }

  int block_size_;
  std::optional<KVCacheManager> manager_;
  std::vector<std::vector<TokenId>> written_;  // per block: the token written at each slot
  Slot slots_[kSlots];
  uint64_t next_id_ = 1;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  static constexpr int kBlockSizes[] = {1, 2, 4, 16};
  const int block_size = kBlockSizes[data[0] % 4];
  const bool weak = data[0] & 0x80;
  const int num_blocks = 4 + data[1] % 60;
  Harness h(num_blocks, block_size, weak);
  fuzz::ByteReader in{data + 2, size - 2};
  for (int ops = 0; !in.empty() && ops < 2000; ++ops) h.run(in);
  h.release_all();
  return 0;
}
