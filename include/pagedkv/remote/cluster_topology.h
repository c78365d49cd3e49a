// A Redis Cluster's slot map, as a client sees it: which node serves each of the 16384 slots
// (its master, and the replicas that may answer reads), read from a node's CLUSTER SHARDS reply
// (Redis 7) or CLUSTER SLOTS reply (older servers), and corrected one slot at a time by MOVED
// redirections until the next full read.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "pagedkv/remote/cluster_slots.h"

struct redisReply;

namespace pagedkv::remote {

struct ClusterNodeAddress {
  std::string host;
  int port = 0;
  std::string name() const;  // host:port, [v6]:port
  bool operator==(const ClusterNodeAddress&) const = default;
};

class ClusterTopology {
 public:
  static constexpr int kNoNode = -1;

  // Parses a CLUSTER SLOTS reply from the node at `answered_by` (an endpoint given as "" or nil
  // means that node's host; "?" is an unknown endpoint and skipped). nullopt with `error` saying
  // what was wrong when the reply is not a slot map (an error reply, a malformed entry).
  static std::optional<ClusterTopology> from_cluster_slots(const redisReply& reply, const std::string& answered_by,
                                                           std::string& error);

  // Parses a CLUSTER SHARDS reply (Redis 7: per shard its slot ranges and its nodes, with role
  // and health); replicas not "online" are left out. Endpoints and errors as above.
  static std::optional<ClusterTopology> from_cluster_shards(const redisReply& reply, const std::string& answered_by,
                                                            std::string& error);

  // Every node the map names, masters and replicas; indexes are stable for this map's lifetime.
  const std::vector<ClusterNodeAddress>& nodes() const { return nodes_; }
  int master_of(int slot) const { return master_[static_cast<size_t>(slot)]; }
  std::span<const int> replicas_of(int slot) const;
  // The index of `address` in nodes(), adding it when new.
  int node_index(const ClusterNodeAddress& address);
  // A MOVED redirection: `slot` is now served by `address` (its replicas unknown until a refresh).
  void move_slot(int slot, const ClusterNodeAddress& address);
  // Slots with a master; a healthy cluster covers all 16384.
  int covered_slots() const;
  // The masters, once each, in node order (kept, not recounted over the slots: the store asks on
  // every call).
  const std::vector<int>& masters() const { return masters_; }

 private:
  ClusterTopology();
  // Gives slots [first, last] to `master` with `replicas`.
  void assign(int first, int last, int master, std::vector<int> replicas);
  void find_masters();
  std::vector<ClusterNodeAddress> nodes_;
  std::vector<int16_t> master_;  // per slot: node index or kNoNode
  std::vector<int16_t> shard_;  // per slot: index into replicas_, or kNoNode
  std::vector<std::vector<int>> replicas_;  // per slot range of the reply
  std::vector<int> masters_;
};

}  // namespace pagedkv::remote
