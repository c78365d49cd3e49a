#include "pagedkv/remote/redis_auto_store.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <cstring>

#include "pagedkv/remote/sigpipe_blocked.h"

namespace pagedkv::remote {

RedisAutoStore::RedisAutoStore(RedisStoreOptions single, RedisClusterStoreOptions cluster,
                               std::shared_ptr<std::atomic<RedisServerKind>> kind)
    : single_(std::move(single)), cluster_options_(std::move(cluster)), kind_(std::move(kind)) {
  cluster_options_.seeds = {single_.url};
  if (!kind_) kind_ = std::make_shared<std::atomic<RedisServerKind>>(RedisServerKind::kUnknown);
}

RedisAutoStore::~RedisAutoStore() = default;

void RedisAutoStore::become(RedisServerKind kind) {
  kind_->store(kind);
  if (kind == RedisServerKind::kSingle) {
    store_ = std::make_unique<RedisStore>(single_);
    return;
  }
  auto c = std::make_unique<RedisClusterStore>(cluster_options_);
  cluster_ = c.get();
  store_ = std::move(c);
}

bool RedisAutoStore::detect() {
  if (store_) return true;
  if (const RedisServerKind known = kind_->load(); known != RedisServerKind::kUnknown) {
    become(known);  // a sibling asked already (and the node it asked may be gone since)
    return true;
  }
  const SigpipeBlockedInThisThread no_sigpipe;
  RedisConnection probe(single_.url, {single_.connect_timeout, single_.io_timeout, false});
  if (!probe.connect()) {
    error_ = probe.error();
    return false;
  }
  RedisReply r = probe.command({"CLUSTER", "INFO"});
  if (!r) {
    error_ = probe.error();
    return false;
  }
  // A server with cluster support disabled (or one that does not know the command) is a single
  // node; a cluster node answers its state.
  if (r->type != REDIS_REPLY_STRING) {
    become(RedisServerKind::kSingle);
    return true;
  }
  if (single_.url.db != 0) {
    error_ = fmt::format("{} is a Redis Cluster node, and a cluster has only database 0", single_.url.redacted());
    return false;
  }
  become(RedisServerKind::kCluster);
  return true;
}

RemoteStatus RedisAutoStore::exists(std::span<const std::string> keys, std::vector<uint8_t>& present) {
  if (!detect()) {
    present.assign(keys.size(), 0);
    return RemoteStatus::kUnavailable;
  }
  return store_->exists(keys, present);
}

RemoteStatus RedisAutoStore::get(std::span<const std::string> keys,
                                 const std::function<void(size_t, std::span<const std::byte>)>& on_value) {
  return detect() ? store_->get(keys, on_value) : RemoteStatus::kUnavailable;
}

RemoteStatus RedisAutoStore::set(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                                 std::vector<uint8_t>& stored) {
  if (!detect()) {
    stored.assign(keys.size(), 0);
    return RemoteStatus::kUnavailable;
  }
  return store_->set(keys, values, stored);
}

RemoteStatus RedisAutoStore::ping() { return detect() ? store_->ping() : RemoteStatus::kUnavailable; }

RemoteStoreFactory redis_auto_store_factory(RedisStoreOptions single, RedisClusterStoreOptions cluster) {
  if (!cluster.learned) cluster.learned = std::make_shared<LearnedClusterNodes>();
  auto kind = std::make_shared<std::atomic<RedisServerKind>>(RedisServerKind::kUnknown);
  return [single, cluster, kind] { return std::make_unique<RedisAutoStore>(single, cluster, kind); };
}

}  // namespace pagedkv::remote
