// The nodes of a Redis Cluster that one store learned from a slot map, shared with the other
// stores the same factory made (a tier's lanes): a store that connects first after the seed node
// of the URL died starts from the nodes its siblings saw instead of failing. Thread-safe.
#pragma once

#include <mutex>
#include <vector>

#include "pagedkv/remote/cluster_topology.h"

namespace pagedkv::remote {

class LearnedClusterNodes {
 public:
  void remember(const std::vector<ClusterNodeAddress>& nodes) {
    std::lock_guard lock(m_);
    nodes_ = nodes;
  }
  std::vector<ClusterNodeAddress> nodes() const {
    std::lock_guard lock(m_);
    return nodes_;
  }

 private:
  mutable std::mutex m_;
  std::vector<ClusterNodeAddress> nodes_;
};

}  // namespace pagedkv::remote
