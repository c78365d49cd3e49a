// The remote tier's part in promotion and offload: probes for a waiting request's blocks,
// their loads' results, and the stores of blocks to keep there.
#include "pagedkv/tiers/tiered_kv_cache.h"

#include <algorithm>
#include <vector>

namespace pagedkv {
namespace {

// A probe asks about at most this many blocks (a 4096-token prefix at block size 16).
constexpr int kMaxProbeBlocks = 256;

}  // namespace

void TieredKVCache::apply_remote(std::vector<RemoteFetchJob> jobs) {
  std::vector<RequestId> finished;
  for (RemoteFetchJob& job : jobs) {
    if (job.kind == RemoteFetchJob::Kind::kProbe) {
      // The request may have been admitted (or aborted) since, or asked again: then it is stale.
      auto it = remote_probes_.find(job.owner);
      if (it != remote_probes_.end() && it->second.hashes == job.probe) {
        it->second.present = std::move(job.present);
        it->second.done = true;
      }
      continue;
    }
    auto probe = remote_probes_.find(job.owner);
    for (const RemoteLoad& l : job.loads) {
      const bool ok = l.result == RemoteLoadResult::kOk;
      // A block that failed (corrupt, vanished, link down) is no longer "present" for this
      // request: the next lookup computes from it instead of loading it again.
      if (!ok && probe != remote_probes_.end())
        for (size_t k = 0; k < probe->second.hashes.size(); ++k)
          if (probe->second.hashes[k] == l.expected.hash) probe->second.present[k] = 0;
      promotion_block_done(job.owner, l.device_block, ok, finished);
    }
  }
  for (RequestId id : finished) finish_promotion(id);
}

void TieredKVCache::queue_remote_put(TierKind source, int32_t source_block, const BlockContentKey& key) {
  if (!remote_->should_store(key.hash)) return;
  pending_.remote_puts.push_back(RemotePut{source, source_block, StoredBlockKey::from(key)});
}

bool TieredKVCache::extend_from_remote(const Request& r, int next, int max_blocks, std::vector<Location>& found) {
  const auto now = std::chrono::steady_clock::now();
  auto it = remote_probes_.find(r.id);
  if (it == remote_probes_.end()) {
    // The cost rule, and no round trip while the link is known down.
    if (max_blocks - next < config_.remote_min_blocks || !remote_->available()) return true;
    RemoteProbe p;
    p.first = next;
    const int n = std::min(max_blocks - next, kMaxProbeBlocks);
    p.hashes.assign(r.block_hashes.begin() + next, r.block_hashes.begin() + next + n);
    p.deadline = now + config_.remote_probe_wait;
    RemoteFetchJob job;
    job.kind = RemoteFetchJob::Kind::kProbe;
    job.owner = r.id;
    job.probe = p.hashes;
    remote_->submit(std::move(job));
    remote_probes_.emplace(r.id, std::move(p));
    return false;
  }
  const RemoteProbe& p = it->second;
  if (!p.done) return now >= p.deadline;  // past the deadline: compute instead of waiting
  for (int i = next; i < max_blocks; ++i) {
    const int k = i - p.first;
    if (k < 0 || k >= static_cast<int>(p.hashes.size()) || !p.present[static_cast<size_t>(k)] ||
        p.hashes[static_cast<size_t>(k)] != r.block_hashes[static_cast<size_t>(i)])
      break;
    found.push_back(Location{TierKind::kRemote, -1});
  }
  return true;
}

}  // namespace pagedkv
