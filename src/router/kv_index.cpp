#include "pagedkv/router/kv_index.h"

#include <fmt/format.h>

#include "pagedkv/core/error.h"

namespace pagedkv::router {

KVIndex::KVIndex(int num_backends) {
  if (num_backends < 0) throw ConfigError("KVIndex: a negative number of backends");
  backends_.resize(static_cast<size_t>(num_backends));
}

KVIndex::Backend& KVIndex::at(int backend) {
  if (backend < 0 || backend >= num_backends())
    throw UsageError(fmt::format("KVIndex: backend {} out of range [0, {})", backend, num_backends()));
  return backends_[static_cast<size_t>(backend)];
}

const KVIndex::Backend& KVIndex::at(int backend) const { return const_cast<KVIndex*>(this)->at(backend); }

void KVIndex::clear(int backend) { at(backend) = Backend{}; }

void KVIndex::replace(int backend, std::span<const std::pair<BlockHash, MediumMask>> blocks) {
  Backend& b = at(backend);
  b = Backend{};
  b.blocks.reserve(blocks.size());
  for (const auto& [hash, mask] : blocks)
    for (int m = 0; m < kNumMedia; ++m)
      if (mask & medium_bit(static_cast<Medium>(m))) apply(backend, hash, static_cast<Medium>(m), true);
}

void KVIndex::apply(int backend, const BlockHash& hash, Medium medium, bool present) {
  Backend& b = at(backend);
  const MediumMask bit = medium_bit(medium);
  const size_t m = static_cast<size_t>(medium);
  if (present) {
    MediumMask& mask = b.blocks[hash];
    if (!(mask & bit)) ++b.per_medium[m];
    mask |= bit;
    return;
  }
  auto it = b.blocks.find(hash);
  if (it == b.blocks.end() || !(it->second & bit)) return;
  --b.per_medium[m];
  it->second = static_cast<MediumMask>(it->second & ~bit);
  if (it->second == 0) b.blocks.erase(it);
}

PrefixOverlap KVIndex::overlap(int backend, std::span<const BlockHash> hashes) const {
  const Backend& b = at(backend);
  PrefixOverlap o;
  for (const BlockHash& h : hashes) {
    auto it = b.blocks.find(h);
    if (it == b.blocks.end()) break;
    const MediumMask mask = it->second;
    if (mask & medium_bit(Medium::kDevice)) ++o.device;
    else if (mask & medium_bit(Medium::kHost)) ++o.host;
    else ++o.disk;
  }
  return o;
}

size_t KVIndex::size(int backend, Medium medium) const { return at(backend).per_medium[static_cast<size_t>(medium)]; }

MediumMask KVIndex::find(int backend, const BlockHash& hash) const {
  const Backend& b = at(backend);
  auto it = b.blocks.find(hash);
  return it == b.blocks.end() ? MediumMask{0} : it->second;
}

}  // namespace pagedkv::router
