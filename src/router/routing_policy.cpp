#include "pagedkv/router/routing_policy.h"

#include <algorithm>
#include <vector>

namespace pagedkv::router {

std::string_view routing_policy_name(RoutingPolicy p) {
  switch (p) {
    case RoutingPolicy::kKv:
      return "kv";
    case RoutingPolicy::kRoundRobin:
      return "round-robin";
    case RoutingPolicy::kLeastLoad:
      return "least-load";
    case RoutingPolicy::kRandom:
      return "random";
  }
  return "?";
}

std::optional<RoutingPolicy> parse_routing_policy(std::string_view s) {
  for (RoutingPolicy p :
       {RoutingPolicy::kKv, RoutingPolicy::kRoundRobin, RoutingPolicy::kLeastLoad, RoutingPolicy::kRandom})
    if (s == routing_policy_name(p)) return p;
  return std::nullopt;
}

double overlap_credit(const PrefixOverlap& o, const RoutingWeights& w) {
  return w.device_credit * o.device + w.host_credit * o.host + w.disk_credit * o.disk;
}

double kv_cost(int prompt_blocks, const BackendView& b, const RoutingWeights& w) {
  const double to_prefill = std::max(0.0, static_cast<double>(prompt_blocks) - overlap_credit(b.overlap, w));
  return w.prefill_scale * to_prefill + static_cast<double>(b.load_blocks);
}

BackendChooser::BackendChooser(RoutingPolicy policy, RoutingWeights weights, uint64_t seed)
    : policy_(policy), weights_(weights), rng_(seed) {}

int BackendChooser::choose(std::span<const BackendView> backends, int prompt_blocks, int session_backend) {
  const int n = static_cast<int>(backends.size());
  std::vector<int> healthy;
  for (int i = 0; i < n; ++i)
    if (backends[static_cast<size_t>(i)].healthy) healthy.push_back(i);
  if (healthy.empty()) return -1;
  const uint64_t turn = turn_++;

  switch (policy_) {
    case RoutingPolicy::kRoundRobin:
      return healthy[static_cast<size_t>(turn % healthy.size())];
    case RoutingPolicy::kRandom:
      return healthy[std::uniform_int_distribution<size_t>(0, healthy.size() - 1)(rng_)];
    case RoutingPolicy::kKv:
    case RoutingPolicy::kLeastLoad:
      break;
  }
  auto cost = [&](int i) {
    const BackendView& b = backends[static_cast<size_t>(i)];
    return policy_ == RoutingPolicy::kKv ? kv_cost(prompt_blocks, b, weights_) : static_cast<double>(b.load_blocks);
  };
  // Scan from the rotating start so that the first of several equal backends changes each time.
  int best = -1;
  double best_cost = 0;
  const size_t start = static_cast<size_t>(turn % healthy.size());
  for (size_t k = 0; k < healthy.size(); ++k) {
    const int i = healthy[(start + k) % healthy.size()];
    const double c = cost(i);
    const bool tie = best >= 0 && c == best_cost;
    const bool better_tie = tie && best != session_backend &&
                            (i == session_backend || backends[static_cast<size_t>(i)].in_flight <
                                                         backends[static_cast<size_t>(best)].in_flight);
    if (best < 0 || c < best_cost || better_tie) {
      best = i;
      best_cost = c;
    }
  }
  return best;
}

}  // namespace pagedkv::router
