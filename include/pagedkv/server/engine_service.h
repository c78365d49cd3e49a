// EngineService: the one thread that owns an LLMEngine and steps it, for many HTTP threads.
//
// HTTP threads submit requests, cancel them and run small commands (reset the prefix cache)
// through an inbox guarded by one mutex, held only to move items in or out; the engine thread
// takes the inbox between steps, runs a step without holding any lock HTTP threads need, and
// hands each request's new tokens to its RequestStream. So no HTTP thread ever waits on a
// forward pass, and the engine never waits on a socket.
#pragma once

#include <poll.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "pagedkv/api/api_error.h"
#include "pagedkv/api/instance_load.h"
#include "pagedkv/api/kv_event_log.h"
#include "pagedkv/engine/llm_engine.h"
#include "pagedkv/server/request_stream.h"
#include "pagedkv/server/server_metrics.h"

namespace pagedkv::server {

struct EngineServiceOptions {
  int max_waiting = 512;  // queued (not yet running) prompts beyond which submit() answers 503
  // Tokens a choice gathers before they are handed to its stream (vLLM's --stream-interval): 1
  // sends every token as it comes; more wake the HTTP threads less often. A choice's first token
  // and its end are always handed over at once. kAutoStreamInterval: auto_stream_interval()
  // below, from the running choices and the engine's recent step time.
  static constexpr int kAutoStreamInterval = 0;
  int stream_interval = 1;
  // Where the engine's KV events go after every step (the engine must record them:
  // EngineConfig::enable_kv_events); null: nowhere. It starts with the blocks cached at start.
  api::KVEventLog* kv_events = nullptr;
};

// The stream interval `auto` picks: as few tokens per chunk as keep the hand-over to the HTTP
// threads under kAutoHandOverShare of an engine step. Each chunk wakes its stream's thread,
// which costs the engine about kHandOverSeconds of a step on a machine whose cores the HTTP
// threads share (measured on two cores: docs/benchmarks.md, "stream interval"), so
//   interval = ceil(running x kHandOverSeconds / (kAutoHandOverShare x step_seconds)),
// 1 while at most kAutoPerTokenStreams choices run (a lone request streams token by token), at
// most kMaxAutoStreamInterval. A model whose steps take milliseconds streams every token even
// at large batches; stories260K at 64 running (1.3 ms steps) gets about 9 tokens a chunk.
inline constexpr double kHandOverSeconds = 5e-6;
inline constexpr double kAutoHandOverShare = 0.03;
inline constexpr int kAutoPerTokenStreams = 8;
inline constexpr int kMaxAutoStreamInterval = 16;
int auto_stream_interval(int running, double step_seconds);

// A snapshot of the engine's load, updated after every step (read from any thread): what the
// instance reports to routers (waiting: queued in the engine plus submitted but not yet taken by
// the engine thread; waiting_blocks: the engine's waiting prompts only), and more.
struct EngineLoad : api::InstanceLoad {
  int swapped = 0;
  uint64_t steps = 0;
};

class EngineService {
 public:
  // `engine` and `metrics` must outlive the service. Starts the engine thread.
  EngineService(LLMEngine& engine, ServerMetrics& metrics, EngineServiceOptions options = {});
  ~EngineService();  // stop()
  EngineService(const EngineService&) = delete;
  EngineService& operator=(const EngineService&) = delete;

  // Queues one API request: each prompt becomes one engine request with its `n` samples; the
  // stream's choices number the samples of the first prompt, then the second's, and so on. Throws ApiError 503
  // (draining, or more than max_waiting prompts queued). `client_socket`, when known (>= 0; PeerConnection): the
  // connection the answer goes to. The engine thread polls it before every step and aborts the request within that step
  // once the client has closed it (a waiting handler may notice only later).
  std::shared_ptr<RequestStream> submit(std::vector<GenerationRequest> prompts, int client_socket = -1);
  // The client is gone: every engine request of `stream` is aborted before the next step.
  void cancel(const std::shared_ptr<RequestStream>& stream);
  // A stop string ended one choice: abort just that sample (its siblings go on).
  void stop_choice(RequestId engine_id);
  // Runs `f` on the engine thread between two steps and returns its result.
  template <class F>
  auto call(F f) -> decltype(f(std::declval<LLMEngine&>()));

  // Drain: refuse new requests (503) while the accepted ones finish.
  void begin_drain();
  bool draining() const { return draining_.load(); }
  // True when nothing is queued, running or swapped.
  bool idle() const;
  // Aborts everything accepted; each stream gets its final (aborted) updates.
  void abort_all();
  // Aborts what is left, delivers the final updates and joins the engine thread. Idempotent.
  void stop();

  EngineLoad load() const;

 private:
  struct Root {  // one prompt of one API request
    std::shared_ptr<RequestStream> stream;
    int first_choice = 0;  // its sample k is choice first_choice + k of the stream
    int n = 1;
    int prompt_tokens = 0;
    int finished_samples = 0;
    int generated_tokens = 0;
    bool child_seen = false;
    std::chrono::steady_clock::time_point arrival;
    int max_tokens = 0;
    // Set with the first token: the prefill's time (first scheduled to first token), and when.
    double prefill_seconds = 0;
    std::optional<std::chrono::steady_clock::time_point> first_token;
  };
  struct Sample {
    uint64_t root = 0;
    size_t seen = 0;  // output tokens the engine has reported
    size_t delivered = 0;  // of those, handed to the stream
    bool announced = false;  // its first update (prompt, cached tokens) was handed over
    std::chrono::steady_clock::time_point last_token;
    std::vector<TokenLogprobs> held_logprobs;  // of tokens not yet handed over (stream_interval)
  };
  struct Submission {
    std::shared_ptr<RequestStream> stream;
    std::vector<GenerationRequest> prompts;
    std::chrono::steady_clock::time_point arrival;
    int client_socket = -1;
  };
  // A request whose client connection the engine thread polls before each step.
  struct WatchedClient {
    std::shared_ptr<RequestStream> stream;
    int socket = -1;
    int live_roots = 0;  // its prompts still in the engine; unwatched at 0
  };

  void run();
  void admit(Submission& s);
  void dispatch(std::vector<RequestOutput>& outputs);
  // Aborts the requests whose clients closed their connections (one poll() for all of them);
  // true if it aborted any (their final outputs come with the next step).
  bool abort_disconnected_clients();
  void root_finished(const std::shared_ptr<RequestStream>& stream);
  // Aborts every engine request of `stream` (its final outputs come with the next step); true
  // if there was one to abort.
  bool abort_requests_of(const std::shared_ptr<RequestStream>& stream);
  void end_remaining_choices();
  void publish_load();
  void publish_kv_events();

  LLMEngine& engine_;
  ServerMetrics& metrics_;
  EngineServiceOptions options_;

  // Inbox (guarded by mutex_).
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Submission> submissions_;
  std::vector<std::shared_ptr<RequestStream>> cancels_;
  std::vector<RequestId> stopped_choices_;
  std::vector<std::function<void()>> calls_;
  bool abort_all_ = false;
  bool stop_ = false;
  int inbox_prompts_ = 0;

  // Engine-thread state.
  std::unordered_map<uint64_t, Root> roots_;
  std::unordered_map<uint64_t, Sample> samples_;
  std::unordered_set<uint64_t> ended_by_stop_string_;
  std::vector<WatchedClient> watched_;
  std::vector<pollfd> poll_fds_;  // scratch for abort_disconnected_clients
  double step_seconds_ = 0;  // recent engine step time (a moving average), for the auto interval

  std::atomic<bool> draining_{false};
  std::atomic<int> running_{0}, engine_waiting_{0}, swapped_{0};
  std::atomic<uint64_t> steps_{0};
  std::atomic<int64_t> kv_blocks_used_{0}, kv_blocks_total_{0}, waiting_blocks_{0};
  std::thread thread_;
};

template <class F>
auto EngineService::call(F f) -> decltype(f(std::declval<LLMEngine&>())) {
  using R = decltype(f(std::declval<LLMEngine&>()));
  auto task = std::make_shared<std::packaged_task<R()>>([this, f = std::move(f)]() mutable { return f(engine_); });
  std::future<R> result = task->get_future();
  {
    std::lock_guard lock(mutex_);
    if (stop_) throw api::ApiError(503, "the server is shutting down", "", "shutting_down");
    calls_.push_back([task] { (*task)(); });
  }
  wake_.notify_one();
  return result.get();
}

}  // namespace pagedkv::server
