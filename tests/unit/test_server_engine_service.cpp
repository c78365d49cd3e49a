// EngineService: many threads submitting, cancelling and stopping requests against one engine
// thread, on the stories260K model. Also runs under TSan (scripts/test.sh), which checks that
// the inbox and the request streams are the only state the threads share.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include <sys/socket.h>
#include <unistd.h>

#include "golden_engine_test.h"
#include "pagedkv/api/api_error.h"
#include "pagedkv/engine/llama2c_run_request.h"
#include "pagedkv/server/engine_service.h"

namespace pagedkv::server {
namespace {

using namespace std::chrono_literals;

// Everything a stream delivers until each of its choices has finished (bounded wait).
struct Collected {
  std::map<int, std::vector<TokenId>> tokens;
  std::map<int, FinishReason> reasons;
  std::map<int, RequestId> ids;
};
Collected collect(RequestStream& s, const std::function<void(const ChoiceUpdate&)>& on_update = {}) {
  Collected c;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (static_cast<int>(c.reasons.size()) < s.num_choices()) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "a stream did not finish";
      break;
    }
    for (const ChoiceUpdate& u : s.wait(50ms)) {
      auto& t = c.tokens[u.choice];
      t.insert(t.end(), u.tokens.begin(), u.tokens.end());
      if (u.engine_id.value != 0) c.ids[u.choice] = u.engine_id;
      if (u.finished) {
        EXPECT_FALSE(c.reasons.contains(u.choice)) << "one final update per choice";
        c.reasons[u.choice] = u.finish_reason;
      }
      if (on_update) on_update(u);
    }
  }
  return c;
}

class EngineServiceTest : public testing::GoldenEngineTest {
 protected:
  void SetUp() override {
    GoldenEngineTest::SetUp();
    if (IsSkipped()) return;
    EngineConfig cfg;
    cfg.check_invariants = true;
    cfg.record_block_usage = false;
    engine_ = std::make_unique<LLMEngine>(*model_, cfg);
    metrics_ = std::make_unique<ServerMetrics>("stories260K", engine_->max_model_len());
  }
  void TearDown() override {
    service_.reset();
    engine_.reset();
  }
  EngineService& start(EngineServiceOptions options = {}) {
    service_ = std::make_unique<EngineService>(*engine_, *metrics_, options);
    return *service_;
  }
  static GenerationRequest long_request(int n, int max_tokens) {
    GenerationRequest g;
    g.prompt = {1, 403, 407, 261, 378};
    g.sampling.seed = 7;
    g.stop.max_tokens = max_tokens;
    g.stop.ignore_eos = true;
    g.n = n;
    return g;
  }
  int used_blocks() {
    return service_->call(
        [](LLMEngine& e) { return e.manager().pool().num_usable_blocks() - e.manager().num_free_blocks(); });
  }

  std::unique_ptr<LLMEngine> engine_;
  std::unique_ptr<ServerMetrics> metrics_;
  std::unique_ptr<EngineService> service_;
};

TEST_F(EngineServiceTest, GoldensFromConcurrentSubmitters) {
  EngineService& service = start();
  std::vector<std::thread> threads;
  std::vector<Collected> results(goldens_.size());
  for (size_t i = 0; i < goldens_.size(); ++i) {
    threads.emplace_back([&, i] {
      const testing::Golden& g = goldens_[i];
      std::vector<GenerationRequest> prompts;
      prompts.push_back(llama2c_run_request(tokenizer_->encode(g.prompt, true, false), g.steps, greedy()));
      results[i] = collect(*service.submit(std::move(prompts)));
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < goldens_.size(); ++i) {
    std::vector<TokenId> ids = tokenizer_->encode(goldens_[i].prompt, true, false);
    ids.insert(ids.end(), results[i].tokens[0].begin(), results[i].tokens[0].end());
    if (results[i].reasons[0] == FinishReason::kStop) ids.push_back(1);
    EXPECT_EQ(ids, goldens_[i].ids) << goldens_[i].name;
  }
  EXPECT_EQ(used_blocks(), 0);
}

TEST_F(EngineServiceTest, CancelReturnsEveryBlock) {
  EngineService& service = start();
  std::vector<GenerationRequest> prompts;
  prompts.push_back(long_request(8, 400));
  prompts.push_back(long_request(1, 400));
  auto stream = service.submit(std::move(prompts));
  bool cancelled = false;
  const Collected c = collect(*stream, [&](const ChoiceUpdate& u) {
    if (!cancelled && !u.tokens.empty()) {
      service.cancel(stream);
      cancelled = true;
    }
  });
  ASSERT_EQ(c.reasons.size(), 9u);
  int aborted = 0;
  for (const auto& [choice, reason] : c.reasons) aborted += reason == FinishReason::kAborted;
  EXPECT_GT(aborted, 0);
  EXPECT_EQ(used_blocks(), 0);
  service.call([](LLMEngine& e) {
    e.check_invariants();
    return 0;
  });
}

// A request submitted with its client's socket is aborted within a step of the client closing
// it, before any handler looks (here nobody calls cancel): a socketpair stands in for the
// connection.
TEST_F(EngineServiceTest, AClosedClientSocketAbortsItsRequestWithinAStep) {
  EngineService& service = start();
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  std::vector<GenerationRequest> prompts;
  prompts.push_back(long_request(1, 400));
  auto stream = service.submit(std::move(prompts), fds[0]);
  uint64_t steps_at_close = 0;
  const Collected c = collect(*stream, [&](const ChoiceUpdate& u) {
    if (fds[1] >= 0 && !u.tokens.empty()) {
      steps_at_close = service.load().steps;
      close(fds[1]);
      fds[1] = -1;
    }
  });
  const uint64_t steps_after = service.load().steps - steps_at_close;
  close(fds[0]);
  ASSERT_EQ(c.reasons.size(), 1u);
  EXPECT_EQ(c.reasons.at(0), FinishReason::kAborted);
  EXPECT_LE(steps_after, 2u) << "the engine kept stepping a request whose client had gone";
  EXPECT_LT(c.tokens.at(0).size(), 400u);
  EXPECT_EQ(used_blocks(), 0);
}

// auto: tokens per chunk keep the hand-over under 3 % of a step.
TEST(AutoStreamInterval, KeepsTheHandOverASmallShareOfAStep) {
  EXPECT_EQ(auto_stream_interval(1, 1e-4), 1);  // a lone request: token by token, however fast
  EXPECT_EQ(auto_stream_interval(8, 1e-5), 1);  // up to 8 running, always
  EXPECT_EQ(auto_stream_interval(64, 0), 1);  // no step measured yet
  EXPECT_EQ(auto_stream_interval(64, 1.28e-3), 9);  // stories260K at 64: ceil(64 x 5 us / 38.4 us)
  EXPECT_EQ(auto_stream_interval(16, 1e-3), 3);  // ceil(80 / 30)
  EXPECT_EQ(auto_stream_interval(64, 0.03), 1);  // a real model's 30 ms steps: every token
  EXPECT_EQ(auto_stream_interval(256, 1e-4), kMaxAutoStreamInterval);
  for (int running = 9; running <= 256; running *= 2)  // more running or shorter steps: never smaller
    EXPECT_LE(auto_stream_interval(running, 2e-3), auto_stream_interval(running, 1e-3)) << running;
}

// kAutoStreamInterval in the service: a lone choice gets every token as it comes; 32 choices
// running together (one request, n = 32) get theirs in chunks of at most kMaxAutoStreamInterval,
// however many the step time asks for (it depends on this machine; exact values are tested above).
// (A forked sample's first update holds the parent's first token and its own.)
TEST_F(EngineServiceTest, AutoStreamIntervalFollowsTheBatch) {
  EngineService& service = start({.stream_interval = EngineServiceOptions::kAutoStreamInterval});
  const auto update_sizes = [&](int n) {
    std::vector<GenerationRequest> prompts;
    prompts.push_back(long_request(n, 24));
    std::map<int, std::vector<size_t>> sizes;
    const Collected c = collect(*service.submit(std::move(prompts)), [&](const ChoiceUpdate& u) {
      if (!u.tokens.empty()) sizes[u.choice].push_back(u.tokens.size());
    });
    for (const auto& [choice, tokens] : c.tokens) EXPECT_EQ(tokens.size(), 24u) << "choice " << choice;
    return sizes;
  };
  for (const auto& [choice, sizes] : update_sizes(1)) EXPECT_EQ(sizes, std::vector<size_t>(24, 1));
  for (const auto& [choice, sizes] : update_sizes(32)) {
    if (choice == 0) {
      EXPECT_EQ(sizes.front(), 1u) << "the first token goes out at once";
    }
    for (size_t s : sizes) EXPECT_LE(s, static_cast<size_t>(kMaxAutoStreamInterval) + 1);
  }
  EXPECT_EQ(used_blocks(), 0);
}

// The stop is asked from this thread when sample 0's first token arrives, while the engine thread
// runs on: on a loaded machine the engine can finish all of sample 0 before the stop lands (a run
// that then reports kLength is a lost race, not a failure), so each run is long and a few runs
// are allowed; one must show the stop.
TEST_F(EngineServiceTest, StopChoiceEndsOneSampleOnly) {
  EngineService& service = start();
  constexpr size_t kMaxTokens = 400;
  bool stop_landed = false;
  for (int attempt = 0; attempt < 5 && !stop_landed; ++attempt) {
    std::vector<GenerationRequest> prompts;
    prompts.push_back(long_request(3, static_cast<int>(kMaxTokens)));
    auto stream = service.submit(std::move(prompts));
    bool stopped = false;
    const Collected c = collect(*stream, [&](const ChoiceUpdate& u) {
      if (!stopped && u.choice == 0 && !u.tokens.empty()) {  // sample 0 is the parent the others forked from
        service.stop_choice(u.engine_id);
        stopped = true;
      }
    });
    ASSERT_EQ(c.reasons.size(), 3u);
    EXPECT_EQ(c.reasons.at(1), FinishReason::kLength);
    EXPECT_EQ(c.reasons.at(2), FinishReason::kLength);
    EXPECT_EQ(c.tokens.at(1).size(), kMaxTokens);
    EXPECT_EQ(used_blocks(), 0);
    if (c.tokens.at(0).size() == kMaxTokens && c.reasons.at(0) == FinishReason::kLength) continue;  // too late
    EXPECT_EQ(c.reasons.at(0), FinishReason::kStop) << "reported as ended by a stop string";
    EXPECT_LT(c.tokens.at(0).size(), kMaxTokens);
    stop_landed = true;
  }
  EXPECT_TRUE(stop_landed) << "the stop never landed before sample 0 ended, in 5 runs";
}

TEST_F(EngineServiceTest, OverloadAndDrainAnswer503) {
  EngineService& service = start({/*max_waiting=*/2});
  std::vector<GenerationRequest> three(3, long_request(1, 4));
  try {
    service.submit(std::move(three));
    ADD_FAILURE() << "three prompts over a limit of two were accepted";
  } catch (const api::ApiError& e) {
    EXPECT_EQ(e.status(), 503);
    EXPECT_EQ(e.code(), "server_overloaded");
  }
  std::vector<GenerationRequest> two(2, long_request(1, 4));
  auto ok = service.submit(std::move(two));
  EXPECT_EQ(collect(*ok).reasons.size(), 2u);
  service.begin_drain();
  EXPECT_TRUE(service.draining());
  EXPECT_THROW(service.submit({long_request(1, 4)}), api::ApiError);
  // The engine thread publishes its load after handing out the last tokens: idle soon after.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!service.idle() && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(service.idle());
}

TEST_F(EngineServiceTest, StopAnswersEverythingInFlight) {
  EngineService& service = start();
  auto a = service.submit({long_request(4, 400)});
  auto b = service.submit({long_request(1, 400)});
  while (a->wait(10ms).empty()) {
  }
  service.stop();
  const Collected ca = collect(*a), cb = collect(*b);
  EXPECT_EQ(ca.reasons.size(), 4u);
  EXPECT_EQ(cb.reasons.size(), 1u);
  EXPECT_EQ(engine_->manager().pool().num_usable_blocks() - engine_->manager().num_free_blocks(), 0);
  engine_->check_invariants();
  EXPECT_THROW(service.call([](LLMEngine&) { return 0; }), api::ApiError) << "a stopped service takes no commands";
}

TEST_F(EngineServiceTest, ManyThreadsSubmitCancelAndStop) {
  EngineService& service = start();
  std::atomic<int> answered{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 12; ++i) {
        GenerationRequest g = long_request(1 + (i % 3), 20 + 7 * i);
        g.sampling.seed = static_cast<uint64_t>(t * 100 + i);
        g.sampling.temperature = 1.0f;
        auto s = service.submit({std::move(g)});
        const int mode = (t + i) % 3;  // 0: run to the end, 1: cancel, 2: stop one choice
        bool acted = false;
        const Collected c = collect(*s, [&](const ChoiceUpdate& u) {
          if (acted || u.tokens.empty()) return;
          if (mode == 1) service.cancel(s);
          if (mode == 2) service.stop_choice(u.engine_id);
          acted = true;
        });
        EXPECT_EQ(static_cast<int>(c.reasons.size()), s->num_choices());
        ++answered;
      }
    });
  }
  std::thread reader([&] {  // metrics and load read while the engine runs
    while (answered < 48) {
      (void)service.load();
      (void)metrics_->render();
      std::this_thread::sleep_for(5ms);
    }
  });
  for (auto& t : threads) t.join();
  reader.join();
  EXPECT_EQ(answered, 48);
  EXPECT_EQ(used_blocks(), 0);
  service.call([](LLMEngine& e) {
    e.check_invariants();
    return 0;
  });
  EXPECT_NE(metrics_->render().find("vllm:request_success_total"), std::string::npos);
}

}  // namespace
}  // namespace pagedkv::server
