// RouterMetrics: the router's Prometheus metrics (GET /metrics of pagedkv router).
//
// Per backend: requests routed, failed (by reason), in flight, healthy, the blocks the router's
// index holds for it (by medium) and the prefix blocks it was credited with when chosen. For the
// router itself: the time a routing decision takes (parse, tokenize, hash, score), which is the
// router's added latency before the backend sees the request, and the latencies its clients saw
// (time to first token, inter-token latency, end to end).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>
#include <vector>

#include "pagedkv/router/backend_pool.h"

namespace pagedkv::router {

class RouterMetrics {
 public:
  RouterMetrics(const BackendPool& pool, std::string policy);

  void routed(int backend, const PrefixOverlap& overlap, int prompt_blocks, double decision_seconds);
  void failed(int backend, const std::string& reason);  // connect, upstream_error, client_gone
  void no_backend();  // 503: nothing healthy
  // A stream whose instance died: continued elsewhere, or not (limit, not_continuable, no_backend).
  void migration(const std::string& result);
  void rejected(const std::string& reason);  // 429: queue_full, queue_timeout
  // What the router's clients saw, timed at the router from the request's arrival: the first body
  // bytes of a streamed answer (TTFT), each later chunk's gap from the one before (ITL, per
  // relayed chunk: an instance may send several tokens a chunk), and the whole answer (E2E),
  // streamed or not. Only answers that ended well are counted.
  void first_chunk(double seconds);
  void chunk_gap(double seconds);
  void answered(double seconds);
  // Refreshes the gauges from the pool and renders the text format.
  std::string render();

 private:
  const BackendPool& pool_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Counter>& failures_;
  prometheus::Family<prometheus::Counter>& credited_blocks_;
  prometheus::Family<prometheus::Counter>& prompt_blocks_;
  prometheus::Family<prometheus::Gauge>& in_flight_;
  prometheus::Family<prometheus::Gauge>& healthy_;
  prometheus::Family<prometheus::Gauge>& reported_load_blocks_;
  prometheus::Family<prometheus::Gauge>& index_blocks_;
  prometheus::Counter& no_backend_;
  prometheus::Family<prometheus::Counter>& migrations_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Histogram& decision_seconds_;
  prometheus::Histogram& ttft_seconds_;
  prometheus::Histogram& itl_seconds_;
  prometheus::Histogram& e2e_seconds_;
  std::string policy_;
};

}  // namespace pagedkv::router
