// The router in one process with two in-process `pagedkv serve` backends (EngineService and
// OpenAIServer on loopback): many client threads through the router at once — whole and streamed
// greedy completions, clients that leave mid-stream, readers of /router/state, /metrics and
// /kv_events — while the pool's monitor threads poll /health and /kv_events. Every golden comes
// back byte for byte, every backend's pool empties, and the router's index agrees with what the
// backends cache. scripts/test.sh runs it under TSan: the router's threads (monitors, one per
// upstream call, the HTTP workers) and the backends' engine threads all meet here.
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "golden_engine_test.h"
#include "pagedkv/api/kv_event_log.h"
#include "pagedkv/router/backend_pool.h"
#include "pagedkv/router/router_metrics.h"
#include "pagedkv/router/router_server.h"
#include "pagedkv/server/engine_service.h"
#include "pagedkv/server/openai_server.h"
#include "pagedkv/server/server_metrics.h"

namespace pagedkv::router {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// One `pagedkv serve`, in this process, on a free loopback port.
class InProcessBackend {
 public:
  InProcessBackend(const Model& model, const TextTokenizer& tokenizer) {
    EngineConfig config;
    config.check_invariants = true;
    config.record_block_usage = false;
    config.enable_kv_events = true;
    engine_ = std::make_unique<LLMEngine>(model, config);
    metrics_ = std::make_unique<server::ServerMetrics>("stories260K", engine_->max_model_len());
    service_ =
        std::make_unique<server::EngineService>(*engine_, *metrics_, server::EngineServiceOptions{512, 1, &events_});
    server::ServerOptions options;
    options.port = 0;
    options.http_threads = 16;
    options.kv_events = &events_;
    options.prefix_hashing = api::prefix_hashing_for(
        engine_->manager().cache_config(), std::string(hash_algorithm_name(config.hash_algorithm)), config.hash_seed);
    server::ServedModel served;
    served.limits = {"stories260K", engine_->max_model_len(), model.config().vocab_size};
    served.eos_token_id = Tokenizer::kBos;
    http_ = std::make_unique<server::OpenAIServer>(options, *service_, tokenizer, served, *metrics_);
    port_ = http_->bind();
    thread_ = std::thread([this] { http_->serve(); });
  }
  ~InProcessBackend() {
    http_->stop();
    thread_.join();
    service_->stop();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int used_blocks() {
    return service_->call(
        [](LLMEngine& e) { return e.manager().pool().num_usable_blocks() - e.manager().num_free_blocks(); });
  }
  size_t cached_device_blocks() { return events_.num_present(); }

 private:
  api::KVEventLog events_;
  std::unique_ptr<LLMEngine> engine_;
  std::unique_ptr<server::ServerMetrics> metrics_;
  std::unique_ptr<server::EngineService> service_;
  std::unique_ptr<server::OpenAIServer> http_;
  int port_ = 0;
  std::thread thread_;
};

class RouterServerTest : public testing::GoldenEngineTest {
 protected:
  void SetUp() override {
    GoldenEngineTest::SetUp();
    if (IsSkipped()) return;
    for (int i = 0; i < 2; ++i) backends_.push_back(std::make_unique<InProcessBackend>(*model_, *tokenizer_));
    std::vector<BackendAddress> addresses;
    for (const auto& b : backends_) addresses.push_back(BackendAddress::parse(b->url()));
    BackendPoolOptions pool_options;
    pool_options.events_interval = 10ms;
    pool_options.health_interval = 50ms;
    pool_ = std::make_unique<BackendPool>(addresses, pool_options);
    pool_->start();
    ASSERT_TRUE(pool_->wait_until_checked(5s));
    metrics_ = std::make_unique<RouterMetrics>(*pool_, "kv");
    RouterOptions options;
    options.port = 0;
    options.http_threads = 32;
    RoutedModel routed{tokenizer_.get(), model_->config().vocab_size, model_->config().seq_len};
    router_ = std::make_unique<RouterServer>(options, *pool_, BackendChooser(RoutingPolicy::kKv), routed, *metrics_);
    port_ = router_->bind();
    serve_thread_ = std::thread([this] { router_->serve(); });
  }
  void TearDown() override {
    if (router_) {
      router_->stop();
      serve_thread_.join();
    }
    if (pool_) pool_->stop();
    router_.reset();
    metrics_.reset();
    pool_.reset();
    backends_.clear();
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(120s);
    return c;
  }
  // The golden's whole text (prompt echoed), as the soak's canaries compare it.
  static std::string golden_text(const testing::Golden& g) {
    std::ifstream in(testing::models_dir() / "golden" / (g.name + ".txt"));
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  json golden_body(const testing::Golden& g, bool stream) const {
    const int prompt_tokens = static_cast<int>(tokenizer_->encode(g.prompt, true, false).size());
    return {{"prompt", g.prompt},
            {"max_tokens", g.steps - prompt_tokens + 1},
            {"temperature", 0},
            {"echo", true},
            {"stream", stream}};
  }

  std::vector<std::unique_ptr<InProcessBackend>> backends_;
  std::unique_ptr<BackendPool> pool_;
  std::unique_ptr<RouterMetrics> metrics_;
  std::unique_ptr<RouterServer> router_;
  int port_ = 0;
  std::thread serve_thread_;
};

// Concatenates the text of a streamed completion's events; false if it did not end in [DONE].
bool streamed_text(const std::string& body, std::string& text) {
  std::istringstream lines(body);
  bool done = false;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      done = true;
      continue;
    }
    const json event = json::parse(data);
    if (event.contains("choices") && !event["choices"].empty()) text += event["choices"][0].value("text", "");
  }
  return done;
}

TEST_F(RouterServerTest, ManyClientsThroughTheRouterGetTheGoldens) {
  std::atomic<int> mismatches{0}, failures{0}, answered{0};
  std::atomic<bool> stop_readers{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      httplib::Client c = client();
      for (int round = 0; round < 3; ++round) {
        const testing::Golden& g = goldens_[static_cast<size_t>((t + round) % 3)];
        const bool stream = (t + round) % 2 == 0;
        const auto r = c.Post("/v1/completions", golden_body(g, stream).dump(), "application/json");
        if (!r || r->status != 200) {
          ++failures;
          continue;
        }
        std::string text;
        if (stream) {
          if (!streamed_text(r->body, text)) ++failures;
        } else {
          text = json::parse(r->body)["choices"][0]["text"].get<std::string>();
        }
        if (text + "\n" != golden_text(g)) ++mismatches;
        ++answered;
      }
    });
  }
  // Clients that leave in the middle of a long stream: the router must cancel upstream.
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {
      httplib::Client c = client();
      for (int k = 0; k < 3; ++k) {
        int chunks = 0;
        httplib::Request req;
        req.method = "POST";
        req.path = "/v1/completions";
        req.body =
            json{{"prompt", "Once upon a time"}, {"max_tokens", 200}, {"ignore_eos", true}, {"stream", true}}.dump();
        req.set_header("Content-Type", "application/json");
        req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 5; };
        httplib::Response res;
        httplib::Error error;
        c.send(req, res, error);  // cancelled by us: an error is expected
      }
    });
  }
  std::thread reader([&] {
    httplib::Client c = client();
    while (!stop_readers) {
      for (const char* path : {"/router/state", "/metrics", "/health", "/v1/models"}) {
        const auto r = c.Get(path);
        if (!r || r->status != 200) ++failures;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  for (std::thread& t : threads) t.join();
  stop_readers = true;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_EQ(answered.load(), 18);

  // Everything returns: no request holds a block anywhere, and the router's index catches up
  // with what each backend caches.
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  auto settled = [&] {
    const std::vector<BackendState> states = pool_->states();
    for (size_t i = 0; i < backends_.size(); ++i)
      if (backends_[i]->used_blocks() != 0 || states[i].in_flight != 0 ||
          states[i].index_blocks[static_cast<int>(Medium::kDevice)] != backends_[i]->cached_device_blocks())
        return false;
    return true;
  };
  while (!settled() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(20ms);
  EXPECT_TRUE(settled());
  size_t routed = 0;
  for (const BackendState& s : pool_->states()) {
    EXPECT_TRUE(s.healthy) << s.address.url << ": " << s.last_error;
    EXPECT_EQ(s.hashing_mismatch, false);
    routed += s.routed;
  }
  EXPECT_EQ(routed, 18u + 6u);
}

TEST_F(RouterServerTest, ResetPrefixCacheReachesEveryBackend) {
  httplib::Client c = client();
  const auto first = c.Post("/v1/completions", golden_body(goldens_[0], false).dump(), "application/json");
  ASSERT_TRUE(first && first->status == 200);
  const auto reset = c.Post("/reset_prefix_cache", "", "application/json");
  ASSERT_TRUE(reset && reset->status == 200) << (reset ? reset->body : "no answer");
  // The engine thread publishes the removals with its next events.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  auto cleared = [&] { return backends_[0]->cached_device_blocks() == 0 && backends_[1]->cached_device_blocks() == 0; };
  while (!cleared() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(cleared());
}

}  // namespace
}  // namespace pagedkv::router
