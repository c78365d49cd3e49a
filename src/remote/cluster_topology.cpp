#include "pagedkv/remote/cluster_topology.h"

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <algorithm>

namespace pagedkv::remote {
namespace {

// A node entry of CLUSTER SLOTS: [endpoint, port, id, (metadata)]. False when malformed.
bool parse_endpoint(const redisReply& r, const std::string& answered_by, ClusterNodeAddress& out, bool& unknown) {
  if (r.type != REDIS_REPLY_ARRAY || r.elements < 2) return false;
  const redisReply& host = *r.element[0];
  const redisReply& port = *r.element[1];
  if (port.type != REDIS_REPLY_INTEGER || port.integer < 1 || port.integer > 65535) return false;
  out.port = static_cast<int>(port.integer);
  if (host.type == REDIS_REPLY_NIL) out.host = answered_by;
  else if (host.type == REDIS_REPLY_STRING) out.host = host.len == 0 ? answered_by : std::string(host.str, host.len);
  else return false;
  unknown = out.host == "?";
  return true;
}

}  // namespace

std::string ClusterNodeAddress::name() const {
  const bool v6 = host.find(':') != std::string::npos;
  return fmt::format("{}{}{}:{}", v6 ? "[" : "", host, v6 ? "]" : "", port);
}

ClusterTopology::ClusterTopology()
    : master_(kClusterSlots, static_cast<int16_t>(kNoNode)), shard_(kClusterSlots, static_cast<int16_t>(kNoNode)) {}

std::optional<ClusterTopology> ClusterTopology::from_cluster_slots(const redisReply& reply,
                                                                   const std::string& answered_by, std::string& error) {
  if (reply.type == REDIS_REPLY_ERROR) {
    error = fmt::format("CLUSTER SLOTS: {}", std::string(reply.str, reply.len));
    return std::nullopt;
  }
  if (reply.type != REDIS_REPLY_ARRAY) {
    error = "CLUSTER SLOTS: the reply is not an array";
    return std::nullopt;
  }
  ClusterTopology t;
  for (size_t i = 0; i < reply.elements; ++i) {
    const redisReply& range = *reply.element[i];
    auto bad = [&](std::string_view why) {
      error = fmt::format("CLUSTER SLOTS: entry {}: {}", i, why);
      return std::nullopt;
    };
    if (range.type != REDIS_REPLY_ARRAY || range.elements < 3) return bad("not [first, last, master, replicas...]");
    const redisReply& first = *range.element[0];
    const redisReply& last = *range.element[1];
    if (first.type != REDIS_REPLY_INTEGER || last.type != REDIS_REPLY_INTEGER || first.integer < 0 ||
        last.integer < first.integer || last.integer >= kClusterSlots)
      return bad("bad slot range");
    ClusterNodeAddress master;
    bool unknown = false;
    if (!parse_endpoint(*range.element[2], answered_by, master, unknown)) return bad("bad master endpoint");
    if (unknown) continue;  // a master whose address its peers do not know yet: its slots stay unserved
    const int m = t.node_index(master);
    std::vector<int> replicas;
    for (size_t k = 3; k < range.elements; ++k) {
      ClusterNodeAddress replica;
      if (!parse_endpoint(*range.element[k], answered_by, replica, unknown)) return bad("bad replica endpoint");
      if (!unknown) replicas.push_back(t.node_index(replica));
    }
    t.assign(static_cast<int>(first.integer), static_cast<int>(last.integer), m, std::move(replicas));
  }
  if (t.nodes_.empty()) {
    error = "CLUSTER SLOTS: no slot is served (the cluster is not set up yet)";
    return std::nullopt;
  }
  t.find_masters();
  return t;
}

std::optional<ClusterTopology> ClusterTopology::from_cluster_shards(const redisReply& reply,
                                                                    const std::string& answered_by,
                                                                    std::string& error) {
  if (reply.type == REDIS_REPLY_ERROR) {
    error = fmt::format("CLUSTER SHARDS: {}", std::string(reply.str, reply.len));
    return std::nullopt;
  }
  if (reply.type != REDIS_REPLY_ARRAY) {
    error = "CLUSTER SHARDS: the reply is not an array";
    return std::nullopt;
  }
  // RESP2 sends a map as a flat array of keys and values.
  auto field = [](const redisReply& map, std::string_view name) -> const redisReply* {
    if (map.type != REDIS_REPLY_ARRAY) return nullptr;
    for (size_t k = 0; k + 1 < map.elements; k += 2) {
      const redisReply& key = *map.element[k];
      if (key.type == REDIS_REPLY_STRING && std::string_view(key.str, key.len) == name) return map.element[k + 1];
    }
    return nullptr;
  };
  auto text = [&](const redisReply& map, std::string_view name) -> std::string {
    const redisReply* v = field(map, name);
    return v && v->type == REDIS_REPLY_STRING ? std::string(v->str, v->len) : std::string();
  };
  ClusterTopology t;
  for (size_t i = 0; i < reply.elements; ++i) {
    auto bad = [&](std::string_view why) {
      error = fmt::format("CLUSTER SHARDS: shard {}: {}", i, why);
      return std::nullopt;
    };
    const redisReply& shard = *reply.element[i];
    const redisReply* slots = field(shard, "slots");
    const redisReply* nodes = field(shard, "nodes");
    if (!slots || !nodes || slots->type != REDIS_REPLY_ARRAY || nodes->type != REDIS_REPLY_ARRAY ||
        slots->elements % 2 != 0)
      return bad("not a map with slots and nodes");
    if (slots->elements == 0) continue;  // a shard that serves nothing (yet)
    int master = kNoNode;
    std::vector<int> replicas;
    for (size_t k = 0; k < nodes->elements; ++k) {
      const redisReply& n = *nodes->element[k];
      const redisReply* port = field(n, "port");
      if (!port || port->type != REDIS_REPLY_INTEGER || port->integer < 1 || port->integer > 65535)
        return bad("a node without a port");
      std::string host = text(n, "endpoint");
      if (host.empty()) host = text(n, "ip");
      if (host.empty()) host = answered_by;
      if (host == "?") continue;
      const ClusterNodeAddress address{host, static_cast<int>(port->integer)};
      const std::string role = text(n, "role");
      if (role == "master") master = t.node_index(address);
      else if (text(n, "health") == "online") replicas.push_back(t.node_index(address));
    }
    if (master == kNoNode) continue;  // its master unknown (or failed and not replaced yet)
    for (size_t k = 0; k < slots->elements; k += 2) {
      const redisReply& first = *slots->element[k];
      const redisReply& last = *slots->element[k + 1];
      if (first.type != REDIS_REPLY_INTEGER || last.type != REDIS_REPLY_INTEGER || first.integer < 0 ||
          last.integer < first.integer || last.integer >= kClusterSlots)
        return bad("bad slot range");
      t.assign(static_cast<int>(first.integer), static_cast<int>(last.integer), master, replicas);
    }
  }
  if (t.nodes_.empty()) {
    error = "CLUSTER SHARDS: no slot is served (the cluster is not set up yet)";
    return std::nullopt;
  }
  t.find_masters();
  return t;
}

void ClusterTopology::assign(int first, int last, int master, std::vector<int> replicas) {
  const auto shard = static_cast<int16_t>(replicas_.size());
  replicas_.push_back(std::move(replicas));
  for (int s = first; s <= last; ++s) {
    master_[static_cast<size_t>(s)] = static_cast<int16_t>(master);
    shard_[static_cast<size_t>(s)] = shard;
  }
}

std::span<const int> ClusterTopology::replicas_of(int slot) const {
  const int shard = shard_[static_cast<size_t>(slot)];
  if (shard == kNoNode) return {};
  return replicas_[static_cast<size_t>(shard)];
}

int ClusterTopology::node_index(const ClusterNodeAddress& address) {
  const auto it = std::find(nodes_.begin(), nodes_.end(), address);
  if (it != nodes_.end()) return static_cast<int>(it - nodes_.begin());
  nodes_.push_back(address);
  return static_cast<int>(nodes_.size()) - 1;
}

void ClusterTopology::move_slot(int slot, const ClusterNodeAddress& address) {
  master_[static_cast<size_t>(slot)] = static_cast<int16_t>(node_index(address));
  shard_[static_cast<size_t>(slot)] = static_cast<int16_t>(kNoNode);
  find_masters();
}

int ClusterTopology::covered_slots() const {
  return static_cast<int>(std::count_if(master_.begin(), master_.end(), [](int16_t m) { return m != kNoNode; }));
}

void ClusterTopology::find_masters() {
  std::vector<uint8_t> is_master(nodes_.size(), 0);
  for (int16_t m : master_)
    if (m != kNoNode) is_master[static_cast<size_t>(m)] = 1;
  masters_.clear();
  for (size_t i = 0; i < is_master.size(); ++i)
    if (is_master[i]) masters_.push_back(static_cast<int>(i));
}

}  // namespace pagedkv::remote
