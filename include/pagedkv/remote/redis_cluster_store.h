// RedisClusterStore: the remote tier's RemoteStore on a Redis Cluster (one connection per node).
// Each key goes to the master serving its slot (cluster_slots.h) in the slot map read from the
// cluster (cluster_topology.h); a call's keys are grouped per node and pipelined to all of them
// from one thread, every node's socket written and read as it is ready (poll()), values written
// from the caller's memory and read in place (RedisConnection's pipeline). MOVED updates the map and resends there
// (the whole map is reread after the call); ASK resends once to the importing node, after
// ASKING. Every node has its own circuit breaker: a node that fails is skipped while it is open,
// so a dead master turns only its slots into misses and skipped stores; the map is reread while
// it stays failed, until a replica takes its slots over. Values are not interpreted here: the
// tier verifies every one (remote_value_format.h), so a node that lost or changed data only
// causes misses.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pagedkv/remote/cluster_topology.h"
#include "pagedkv/remote/learned_cluster_nodes.h"
#include "pagedkv/remote/redis_connection.h"
#include "pagedkv/remote/redis_url.h"
#include "pagedkv/tiers/circuit_breaker.h"
#include "pagedkv/tiers/remote_store.h"

namespace pagedkv::remote {

struct RedisClusterStoreOptions {
  std::vector<RedisUrl> seeds;  // where the slot map is first read; credentials apply to every node
  std::chrono::milliseconds connect_timeout{200};
  std::chrono::milliseconds io_timeout{200};
  // GETs and SETs go out in pieces of this many per node, so many pieces ahead of the replies:
  // 32 commands in flight per node either way, as many as one server's pipeline of 32. Pieces of
  // 32 (64 in flight) measured 0.7x the GETs/s and 0.9x the SETs/s of 16 x 2 with 20 KiB values
  // on 3 masters; GETs refilled 8 at a time (8 x 4) 1.13-1.48x the loads/s of 16 x 2 (medians of
  // three alternated runs), 8 x 8 and 4 x 8 no better; SETs the same at 16 x 2, 8 x 4 and 4 x 8
  // (docs/tiers.md, "How keys are spread").
  size_t get_pipeline_depth = 8;
  size_t get_pieces_ahead = 4;
  size_t set_pipeline_depth = 16;
  size_t set_pieces_ahead = 2;
  // GET and EXISTS go to a replica of the slot (after READONLY; the master when none answers):
  // spreads reads, may miss what was written a moment ago (a miss, never a wrong value).
  bool read_from_replicas = false;
  std::chrono::milliseconds node_backoff_initial{100};
  std::chrono::milliseconds node_backoff_max{1000};
  // While a node of the map is failing, the map is reread at most this often (a replica takes
  // over its slots within the cluster's cluster-node-timeout plus an election).
  std::chrono::milliseconds refresh_interval{200};
  int max_redirections = 5;  // per key and call
  // Nodes learned by sibling stores, asked after the seeds (redis_cluster_store_factory shares one).
  std::shared_ptr<LearnedClusterNodes> learned;
};

struct RedisClusterStats {
  uint64_t moved = 0;  // MOVED redirections followed
  uint64_t asked = 0;  // ASK redirections followed
  uint64_t map_reads = 0;  // slot maps read (CLUSTER SHARDS or SLOTS)
  uint64_t node_failures = 0;  // connect, write or read failures of a node
  uint64_t skipped_keys = 0;  // keys answered "absent"/"not stored" because their node was failing
};

class RedisClusterStore final : public RemoteStore {
 public:
  explicit RedisClusterStore(RedisClusterStoreOptions options);
  ~RedisClusterStore() override;
  RedisClusterStore(const RedisClusterStore&) = delete;
  RedisClusterStore& operator=(const RedisClusterStore&) = delete;

  // kOk when every key's node answered or was skipped for failing while others work;
  // kUnavailable when no map can be read or every master fails.
  RemoteStatus exists(std::span<const std::string> keys, std::vector<uint8_t>& present) override;
  RemoteStatus get(std::span<const std::string> keys,
                   const std::function<void(size_t, std::span<const std::byte>)>& on_value) override;
  RemoteStatus set(std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                   std::vector<uint8_t>& stored) override;
  RemoteStatus ping() override;
  std::string last_error() const override { return error_; }
  // 128 keys per master of the current map: every call waits for its slowest node (twice for a
  // store: EXISTS, then SET), and on CPUs the servers share some node is often waiting for one;
  // fewer, larger calls measured 1.35x the tier's stores/s of 32 per master (docs/benchmarks.md).
  size_t preferred_batch() const override;

  RedisClusterStats stats() const { return stats_; }
  // The master serving `key` in the current map ("" when none is known): for reports and tests.
  std::string master_of(std::string_view key) const;
  // The current map's masters by address.
  std::vector<std::string> masters() const;

 private:
  enum class Op : uint8_t { kExists, kGet, kSet };
  struct Node;
  using OnReply = std::function<void(size_t, const RespReply&)>;

  RemoteStatus run(Op op, std::span<const std::string> keys, std::span<const std::span<const std::byte>> values,
                   const OnReply& on_reply);
  void refresh_if_due();
  bool read_map();
  Node& node(int index);
  Node& node(const ClusterNodeAddress& address);
  bool connect(Node& n);
  void node_failed(Node& n);
  int route(Op op, int slot);
  bool some_master_up();

  RedisClusterStoreOptions options_;
  std::optional<ClusterTopology> map_;
  std::map<std::string, std::unique_ptr<Node>> nodes_;  // by host:port
  bool map_stale_ = false;
  bool no_cluster_shards_ = false;  // the servers predate CLUSTER SHARDS: CLUSTER SLOTS
  std::chrono::steady_clock::time_point next_map_read_{};
  std::string error_;
  RedisClusterStats stats_;
  uint64_t rotation_ = 0;  // spreads replica reads
};

// Connections for the remote tier on a cluster; each call opens a new, unconnected store. The
// stores share what they learn of the cluster's nodes.
RemoteStoreFactory redis_cluster_store_factory(RedisClusterStoreOptions options);

}  // namespace pagedkv::remote
