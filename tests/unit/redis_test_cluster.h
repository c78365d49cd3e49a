// A Redis Cluster of the test's own: N masters with R replicas each, every node a RedisTestServer
// (127.0.0.1, free ports whose bus ports are free too, a temporary directory each, no
// persistence), joined by `redis-cli --cluster create`, with a short cluster-node-timeout so a
// killed master's replica takes over within seconds. Stopped with the object; waits are bounded.
#pragma once

#include <fmt/format.h>
#include <hiredis/hiredis.h>

#include <cstdlib>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "pagedkv/remote/redis_connection.h"
#include "redis_test_server.h"

namespace pagedkv::testing {

class RedisTestCluster {
 public:
  RedisTestCluster(int masters = 3, int replicas_per_master = 1, int node_timeout_ms = 1000) {
    const int n = masters * (1 + replicas_per_master);
    for (int i = 0; i < n; ++i)
      nodes_.push_back(std::make_unique<RedisTestServer>(
          std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                   "--cluster-node-timeout", std::to_string(node_timeout_ms),
                                   // A dead master's slots fail; the others keep serving.
                                   "--cluster-require-full-coverage", "no",
                                   // A node back from a kill syncs from its new master at once.
                                   "--repl-diskless-sync-delay", "0"},
          free_cluster_port));
    std::string cmd = "timeout 60 redis-cli --cluster create";
    for (const auto& s : nodes_) cmd += fmt::format(" 127.0.0.1:{}", s->port());
    cmd += fmt::format(" --cluster-replicas {} --cluster-yes > {}/create.log 2>&1", replicas_per_master,
                       nodes_[0]->dir().string());
    if (std::system(cmd.c_str()) != 0) throw std::runtime_error("redis-cli --cluster create failed: " + cmd);
    if (!wait_healthy(std::chrono::seconds(30))) throw std::runtime_error("the test cluster did not become healthy");
  }

  int size() const { return static_cast<int>(nodes_.size()); }
  RedisTestServer& node(int i) { return *nodes_[static_cast<size_t>(i)]; }
  int index_of_port(int port) const {
    for (size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i]->port() == port) return static_cast<int>(i);
    return -1;
  }
  std::string url() const { return fmt::format("redis-cluster://127.0.0.1:{}", nodes_[0]->port()); }
  std::string seed_url(int i) const {
    return fmt::format("redis://127.0.0.1:{}", nodes_[static_cast<size_t>(i)]->port());
  }

  // One command on node i; the reply as text (an error reply's message, an integer in decimal).
  std::string command(int i, std::initializer_list<std::string_view> args) {
    remote::RedisConnection c(remote::parse_redis_url(seed_url(i)),
                              {std::chrono::milliseconds(500), std::chrono::milliseconds(5000), false});
    if (!c.connect()) return "(down) " + c.error();
    remote::RedisReply r = c.command(args);
    if (!r) return "(failed) " + c.error();
    if (r->type == REDIS_REPLY_INTEGER) return std::to_string(r->integer);
    if (r->str) return std::string(r->str, r->len);
    return "";
  }

  // Every running node sees the cluster ok with all slots served, and every running replica's
  // link to its master is up (so what the masters held is on their replicas).
  bool healthy() {
    for (int i = 0; i < size(); ++i) {
      if (!node(i).running()) continue;
      const std::string info = command(i, {"CLUSTER", "INFO"});
      if (info.find("cluster_state:ok") == std::string::npos ||
          info.find("cluster_slots_ok:16384") == std::string::npos)
        return false;
      const std::string repl = command(i, {"INFO", "replication"});
      if (repl.find("role:slave") != std::string::npos && repl.find("master_link_status:up") == std::string::npos)
        return false;
    }
    return true;
  }
  bool wait_healthy(std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (healthy()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // The node ids of masters that have a replica, by node index, from node i's CLUSTER NODES.
  struct NodeInfo {
    std::string id;
    int port = 0;
    bool master = false;
    std::string master_id;  // a replica's master
  };
  std::vector<NodeInfo> cluster_nodes(int i) {
    std::vector<NodeInfo> out;
    std::istringstream lines(command(i, {"CLUSTER", "NODES"}));
    for (std::string line; std::getline(lines, line);) {
      std::istringstream f(line);
      std::string id, addr, flags, master;
      f >> id >> addr >> flags >> master;
      if (id.empty() || flags.find("fail") != std::string::npos) continue;
      NodeInfo n;
      n.id = id;
      n.port = std::atoi(addr.substr(addr.rfind(':') + 1).c_str());
      n.master = flags.find("master") != std::string::npos;
      if (!n.master) n.master_id = master;
      out.push_back(n);
    }
    return out;
  }

 private:
  std::vector<std::unique_ptr<RedisTestServer>> nodes_;
};

}  // namespace pagedkv::testing
