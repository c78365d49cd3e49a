// RedisAutoStore: the remote tier's store on a redis:// URL that may name a single Redis server or
// a node of a Redis Cluster. Its first connection asks CLUSTER INFO: a server with cluster support
// disabled answers an error and gets a RedisStore; a cluster node gets a RedisClusterStore
// starting from it. Until a connection succeeds every call is kUnavailable (the tier's breaker
// backs off), and the question is asked again on the next call. The stores one factory makes (a
// tier's lanes) share the answer, and what they learn of a cluster's nodes.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "pagedkv/remote/redis_cluster_store.h"
#include "pagedkv/remote/redis_store.h"
#include "pagedkv/tiers/remote_store.h"

namespace pagedkv::remote {

// What the URL turned out to name, shared by the stores of one factory.
enum class RedisServerKind : uint8_t { kUnknown, kSingle, kCluster };

class RedisAutoStore final : public RemoteStore {
 public:
  // `cluster` supplies the timeouts and cluster knobs; its seeds are `single.url`. `kind` may be
  // shared with sibling stores (null: this store's own).
  RedisAutoStore(RedisStoreOptions single, RedisClusterStoreOptions cluster,
                 std::shared_ptr<std::atomic<RedisServerKind>> kind = nullptr);
  ~RedisAutoStore() override;

  RemoteStatus exists(std::span<const std::string> keys, std::vector<uint8_t>& present) override;
  RemoteStatus get(std::span<const std::string> keys,
                   const std::function<void(size_t, std::span<const std::byte>)>& on_value) override;
  RemoteStatus set(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                   std::vector<uint8_t>& stored) override;
  RemoteStatus ping() override;
  std::string last_error() const override { return store_ ? store_->last_error() : error_; }
  size_t preferred_batch() const override { return store_ ? store_->preferred_batch() : 0; }

  // Which store the URL turned out to need (false until known).
  bool is_cluster() const { return cluster_ != nullptr; }

 private:
  bool detect();
  void become(RedisServerKind kind);

  RedisStoreOptions single_;
  RedisClusterStoreOptions cluster_options_;
  std::shared_ptr<std::atomic<RedisServerKind>> kind_;
  std::unique_ptr<RemoteStore> store_;
  RedisClusterStore* cluster_ = nullptr;  // store_, when it is a cluster's
  std::string error_;
};

RemoteStoreFactory redis_auto_store_factory(RedisStoreOptions single, RedisClusterStoreOptions cluster);

}  // namespace pagedkv::remote
