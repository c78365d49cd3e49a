// How the router picks a backend for a request: the policies and the cost rule of `kv`.
//
// kv: each backend's cost is what the request would add to it,
//       cost = prefill_scale * max(0, prompt_blocks - credit) + load_blocks,
//     where credit weighs the leading blocks it already holds by medium (device 1.0, host 0.75,
//     disk 0.25 by default: a block loaded from a lower tier still costs a copy) and load_blocks
//     is the KV its in-flight requests will hold (Dynamo's rule, with the weights as options).
//     Lowest cost wins. With an empty index every credit is 0 and kv is least-load.
// round-robin: the next healthy backend in turn. least-load: the lowest load_blocks.
// random: uniform over the healthy backends (seeded: runs repeat).
// Ties go to the session's backend (the one its previous request went to: session affinity),
// then to the backend with fewer requests in flight, then to the next in rotation (so an idle
// cluster is not all sent to the first backend). Unhealthy backends are never chosen.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <span>
#include <string_view>

#include "pagedkv/router/kv_index.h"

namespace pagedkv::router {

enum class RoutingPolicy { kKv, kRoundRobin, kLeastLoad, kRandom };
std::string_view routing_policy_name(RoutingPolicy p);
std::optional<RoutingPolicy> parse_routing_policy(std::string_view s);

struct RoutingWeights {
  // Cost of one block to prefill, in units of one block of load. Dynamo's default is 1; 2 gave the
  // most hits and the lowest TTFT of 0.5, 1 and 2 on the Mooncake slice (docs/router.md, "Figures").
  double prefill_scale = 2.0;
  double device_credit = 1.0;
  double host_credit = 0.75;
  double disk_credit = 0.25;
};

// What the router knows of one backend when a request arrives.
struct BackendView {
  bool healthy = true;
  PrefixOverlap overlap;  // the request's leading blocks it holds
  int64_t load_blocks = 0;  // KV blocks its in-flight requests will hold
  int in_flight = 0;
};

double overlap_credit(const PrefixOverlap& o, const RoutingWeights& w);
double kv_cost(int prompt_blocks, const BackendView& b, const RoutingWeights& w);

class BackendChooser {
 public:
  BackendChooser(RoutingPolicy policy, RoutingWeights weights = {}, uint64_t seed = 0);
  RoutingPolicy policy() const { return policy_; }
  const RoutingWeights& weights() const { return weights_; }
  // The chosen backend's index in `backends`, or -1 if none is healthy. `session_backend`: where
  // the request's session went last (-1: none), preferred among equal costs. Not thread-safe.
  int choose(std::span<const BackendView> backends, int prompt_blocks, int session_backend = -1);

 private:
  RoutingPolicy policy_;
  RoutingWeights weights_;
  std::mt19937_64 rng_;
  uint64_t turn_ = 0;  // rotation: round-robin's next backend, and where tie-breaking starts
};

}  // namespace pagedkv::router
