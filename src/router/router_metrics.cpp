#include "pagedkv/router/router_metrics.h"

#include <prometheus/text_serializer.h>

namespace pagedkv::router {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

RouterMetrics::RouterMetrics(const BackendPool& pool, std::string policy)
    : pool_(pool),
      registry_(std::make_shared<prometheus::Registry>()),
      requests_(BuildCounter()
                    .Name("pagedkv_router_requests_total")
                    .Help("Requests routed to each backend.")
                    .Register(*registry_)),
      failures_(
          BuildCounter()
              .Name("pagedkv_router_failures_total")
              .Help("Requests to a backend that failed, by reason (connect: retried elsewhere; busy: a 503 retried "
                    "elsewhere; unanswered: closed without an answer, retried elsewhere once; upstream_error: "
                    "answered 502 or cut; client_gone: the client left).")
              .Register(*registry_)),
      credited_blocks_(BuildCounter()
                           .Name("pagedkv_router_prefix_blocks_total")
                           .Help("Leading prompt blocks the chosen backend held when it was chosen, by medium.")
                           .Register(*registry_)),
      prompt_blocks_(BuildCounter()
                         .Name("pagedkv_router_prompt_blocks_total")
                         .Help("Full prompt blocks routed.")
                         .Register(*registry_)),
      in_flight_(BuildGauge()
                     .Name("pagedkv_router_in_flight")
                     .Help("Requests in flight at each backend.")
                     .Register(*registry_)),
      healthy_(BuildGauge()
                   .Name("pagedkv_router_backend_healthy")
                   .Help("1 while the backend is in the rotation.")
                   .Register(*registry_)),
      reported_load_blocks_(BuildGauge()
                                .Name("pagedkv_router_backend_reported_load_blocks")
                                .Help("KV blocks each backend reported holding or promised to its waiting prompts "
                                      "(every router's requests and direct clients' alike).")
                                .Register(*registry_)),
      index_blocks_(BuildGauge()
                        .Name("pagedkv_router_index_blocks")
                        .Help("Block hashes the router's index holds, by backend and medium.")
                        .Register(*registry_)),
      no_backend_(BuildCounter()
                      .Name("pagedkv_router_no_backend_total")
                      .Help("Requests answered 503: no healthy backend.")
                      .Register(*registry_)
                      .Add({})),
      migrations_(
          BuildCounter()
              .Name("pagedkv_router_stream_migrations_total")
              .Help("Streams whose instance died mid-answer: continued on another instance (continued), sent there "
                    "whole when nothing had been relayed yet (restarted), or "
                    "ended with an error event (limit: --migration-limit reached; not_continuable: "
                    "nothing to continue from; no_backend: no other instance took it).")
              .Register(*registry_)),
      rejected_(BuildCounter()
                    .Name("pagedkv_router_rejected_total")
                    .Help("Requests answered 429 because every instance was saturated: the router's queue was full "
                          "(queue_full) or the wait ran out (queue_timeout).")
                    .Register(*registry_)),
      decision_seconds_(
          BuildHistogram()
              .Name("pagedkv_router_decision_seconds")
              .Help("Time to route one request (parse, tokenize, hash, score), before the backend is called.")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3,
                                                               5e-3, 1e-2, 2.5e-2, 5e-2, 0.1})),
      ttft_seconds_(
          BuildHistogram()
              .Name("pagedkv_router_time_to_first_token_seconds")
              .Help("From a streamed request's arrival at the router to the first bytes of its answer relayed.")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                                               0.75, 1, 2.5, 5, 7.5, 10, 20, 40, 80})),
      itl_seconds_(BuildHistogram()
                       .Name("pagedkv_router_inter_token_latency_seconds")
                       .Help("Gaps between the relayed chunks of streamed answers (a chunk may hold several tokens).")
                       .Register(*registry_)
                       .Add({}, prometheus::Histogram::BucketBoundaries{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
                                                                        0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 2.5, 5})),
      e2e_seconds_(
          BuildHistogram()
              .Name("pagedkv_router_e2e_request_latency_seconds")
              .Help("From a request's arrival at the router to the end of its answer, streamed or not.")
              .Register(*registry_)
              .Add({}, prometheus::Histogram::BucketBoundaries{0.01, 0.03, 0.1, 0.3, 0.5, 0.8, 1,  1.5, 2,   2.5,
                                                               5,    10,   15,  20,  30,  40,  60, 120, 240, 480})),
      policy_(std::move(policy)) {}

void RouterMetrics::first_chunk(double seconds) { ttft_seconds_.Observe(seconds); }
void RouterMetrics::chunk_gap(double seconds) { itl_seconds_.Observe(seconds); }
void RouterMetrics::answered(double seconds) { e2e_seconds_.Observe(seconds); }

void RouterMetrics::routed(int backend, const PrefixOverlap& overlap, int prompt_blocks, double decision_seconds) {
  const std::string& url = pool_.address(backend).url;
  requests_.Add({{"backend", url}, {"policy", policy_}}).Increment();
  credited_blocks_.Add({{"backend", url}, {"medium", "device"}}).Increment(overlap.device);
  credited_blocks_.Add({{"backend", url}, {"medium", "host"}}).Increment(overlap.host);
  credited_blocks_.Add({{"backend", url}, {"medium", "disk"}}).Increment(overlap.disk);
  prompt_blocks_.Add({{"backend", url}}).Increment(prompt_blocks);
  decision_seconds_.Observe(decision_seconds);
}

void RouterMetrics::failed(int backend, const std::string& reason) {
  failures_.Add({{"backend", pool_.address(backend).url}, {"reason", reason}}).Increment();
}

void RouterMetrics::no_backend() { no_backend_.Increment(); }

void RouterMetrics::migration(const std::string& result) { migrations_.Add({{"result", result}}).Increment(); }

void RouterMetrics::rejected(const std::string& reason) { rejected_.Add({{"reason", reason}}).Increment(); }

std::string RouterMetrics::render() {
  for (const BackendState& s : pool_.states()) {
    in_flight_.Add({{"backend", s.address.url}}).Set(s.in_flight);
    healthy_.Add({{"backend", s.address.url}}).Set(s.healthy ? 1 : 0);
    reported_load_blocks_.Add({{"backend", s.address.url}})
        .Set(s.reported ? static_cast<double>(s.reported->load_blocks()) : 0.0);
    for (int m = 0; m < kNumMedia; ++m)
      index_blocks_.Add({{"backend", s.address.url}, {"medium", std::string(medium_name(static_cast<Medium>(m)))}})
          .Set(static_cast<double>(s.index_blocks[m]));
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace pagedkv::router
