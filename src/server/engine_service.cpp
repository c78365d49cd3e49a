#include "pagedkv/server/engine_service.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "pagedkv/api/peer_connection.h"
#include "pagedkv/core/error.h"

namespace pagedkv::server {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

std::string metric_reason(FinishReason r) {
  switch (r) {
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kAborted:
      return "abort";
    default:
      return std::string(finish_reason_name(r));
  }
}

}  // namespace

EngineService::EngineService(LLMEngine& engine, ServerMetrics& metrics, EngineServiceOptions options)
    : engine_(engine), metrics_(metrics), options_(options) {
  metrics_.on_step(engine_);
  if (options_.kv_events) {
    if (!engine_.config().enable_kv_events)
      throw UsageError("EngineService: a KV event log needs an engine with EngineConfig::enable_kv_events");
    engine_.take_kv_events();  // what happened before now is in the census
    const std::vector<KVEvent> census = engine_.cached_blocks();
    options_.kv_events->append(census);
  }
  thread_ = std::thread([this] { run(); });
}

int auto_stream_interval(int running, double step_seconds) {
  if (running <= kAutoPerTokenStreams || !(step_seconds > 0)) return 1;
  const double tokens = std::ceil(running * kHandOverSeconds / (kAutoHandOverShare * step_seconds));
  return static_cast<int>(std::clamp(tokens, 1.0, static_cast<double>(kMaxAutoStreamInterval)));
}

EngineService::~EngineService() { stop(); }

std::shared_ptr<RequestStream> EngineService::submit(std::vector<GenerationRequest> prompts, int client_socket) {
  if (prompts.empty()) throw UsageError("EngineService::submit: no prompts");
  int choices = 0;
  for (const GenerationRequest& g : prompts) choices += g.num_outputs();
  auto stream = std::make_shared<RequestStream>(choices);
  {
    std::lock_guard lock(mutex_);
    if (draining_ || stop_)
      throw api::ApiError(503, "the server is shutting down and accepts no new requests", "", "shutting_down");
    const int queued = inbox_prompts_ + engine_waiting_.load();
    if (queued + static_cast<int>(prompts.size()) > options_.max_waiting)
      throw api::ApiError(503,
                          fmt::format("the server is overloaded: {} requests are waiting (limit {}); retry later",
                                      queued, options_.max_waiting),
                          "", "server_overloaded");
    inbox_prompts_ += static_cast<int>(prompts.size());
    submissions_.push_back({stream, std::move(prompts), Clock::now(), client_socket});
  }
  wake_.notify_one();
  return stream;
}

void EngineService::cancel(const std::shared_ptr<RequestStream>& stream) {
  {
    std::lock_guard lock(mutex_);
    cancels_.push_back(stream);
  }
  wake_.notify_one();
}

void EngineService::stop_choice(RequestId engine_id) {
  {
    std::lock_guard lock(mutex_);
    stopped_choices_.push_back(engine_id);
  }
  wake_.notify_one();
}

void EngineService::begin_drain() { draining_ = true; }

bool EngineService::idle() const {
  std::lock_guard lock(mutex_);
  return submissions_.empty() && running_ == 0 && engine_waiting_ == 0 && swapped_ == 0;
}

void EngineService::abort_all() {
  {
    std::lock_guard lock(mutex_);
    abort_all_ = true;
  }
  wake_.notify_one();
}

void EngineService::stop() {
  {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) return;
    stop_ = true;
  }
  wake_.notify_one();
  thread_.join();
}

EngineLoad EngineService::load() const {
  EngineLoad l;
  l.running = running_;
  {
    std::lock_guard lock(mutex_);
    l.waiting = engine_waiting_ + inbox_prompts_;
  }
  l.swapped = swapped_;
  l.steps = steps_;
  l.kv_blocks_used = kv_blocks_used_;
  l.kv_blocks_total = kv_blocks_total_;
  l.waiting_blocks = waiting_blocks_;
  return l;
}

void EngineService::publish_load() {
  const Scheduler& s = engine_.scheduler();
  running_ = s.num_running();
  engine_waiting_ = s.num_waiting();
  swapped_ = s.num_swapped();
  steps_ = engine_.stats().steps;
  const BlockPool& pool = engine_.manager().pool();
  kv_blocks_total_ = pool.num_usable_blocks();
  kv_blocks_used_ = pool.num_usable_blocks() - pool.num_free_blocks();
  const int64_t block_size = engine_.manager().block_size();
  int64_t waiting_blocks = 0;
  for (const SchedulerRequest* r : s.waiting())
    waiting_blocks += (std::max(0, r->kv.num_tokens() - r->kv.num_computed_tokens) + block_size - 1) / block_size;
  waiting_blocks_ = waiting_blocks;
  metrics_.on_step(engine_);
}

void EngineService::publish_kv_events() {
  if (!options_.kv_events) return;
  const std::vector<KVEvent> events = engine_.take_kv_events();
  if (!events.empty()) options_.kv_events->append(events);
}

void EngineService::admit(Submission& s) {
  int first_choice = 0;  // prompt i's samples are choices first_choice .. first_choice + n - 1
  int admitted = 0;
  for (size_t i = 0; i < s.prompts.size(); ++i) {
    GenerationRequest& g = s.prompts[i];
    const int n = g.num_outputs();
    const int prompt_tokens = static_cast<int>(g.prompt.size());
    const int max_tokens = g.stop.max_tokens;
    try {
      const RequestId id = engine_.add_request(std::move(g));
      Root root;
      root.stream = s.stream;
      root.first_choice = first_choice;
      root.n = n;
      root.prompt_tokens = prompt_tokens;
      root.arrival = s.arrival;
      root.max_tokens = max_tokens;
      roots_[id.value] = std::move(root);
      samples_[id.value] = Sample{id.value, 0, 0, false, s.arrival, {}};
      ++admitted;
    } catch (const Error& e) {  // validated before submit; anything left is reported per choice
      for (int k = 0; k < n; ++k) {
        ChoiceUpdate u;
        u.choice = first_choice + k;
        u.finished = true;
        u.finish_reason = FinishReason::kRejected;
        u.error = e.what();
        s.stream->push(std::move(u));
      }
    }
    first_choice += n;
  }
  if (s.client_socket >= 0 && admitted > 0) watched_.push_back({s.stream, s.client_socket, admitted});
}

bool EngineService::abort_requests_of(const std::shared_ptr<RequestStream>& stream) {
  bool aborted = false;
  for (const auto& [id, root] : roots_)
    if (root.stream == stream) aborted |= engine_.abort_request(RequestId{id});
  return aborted;
}

void EngineService::root_finished(const std::shared_ptr<RequestStream>& stream) {
  for (size_t i = 0; i < watched_.size(); ++i) {
    if (watched_[i].stream != stream) continue;
    if (--watched_[i].live_roots == 0) {
      watched_[i] = std::move(watched_.back());
      watched_.pop_back();
    }
    return;
  }
}

bool EngineService::abort_disconnected_clients() {
  if (watched_.empty()) return false;
  poll_fds_.resize(watched_.size());
  for (size_t i = 0; i < watched_.size(); ++i) poll_fds_[i] = pollfd{watched_[i].socket, POLLIN | POLLRDHUP, 0};
  if (poll(poll_fds_.data(), poll_fds_.size(), 0) <= 0) return false;
  bool aborted = false;
  // Back to front: a closed client's entry is swapped with the last one and dropped. (Its socket
  // number may by now name another connection if the handler returned; aborting by stream only
  // ever touches this request, so a stale number cannot hurt another.)
  for (size_t i = watched_.size(); i-- > 0;) {
    if (!api::peer_closed(poll_fds_[i].fd, poll_fds_[i].revents)) continue;
    aborted |= abort_requests_of(watched_[i].stream);
    watched_[i] = std::move(watched_.back());
    watched_.pop_back();
  }
  return aborted;
}

void EngineService::run() {
  for (;;) {
    std::vector<Submission> submissions;
    std::vector<std::shared_ptr<RequestStream>> cancels;
    std::vector<RequestId> stopped;
    std::vector<std::function<void()>> calls;
    bool abort_everything = false, stopping = false;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] {
        return stop_ || abort_all_ || !submissions_.empty() || !cancels_.empty() || !stopped_choices_.empty() ||
               !calls_.empty() || engine_.has_unfinished();
      });
      submissions.swap(submissions_);
      cancels.swap(cancels_);
      stopped.swap(stopped_choices_);
      calls.swap(calls_);
      abort_everything = abort_all_ || stop_;
      abort_all_ = false;
      stopping = stop_;
      // Counted as waiting until the engine holds them: publish_load() below takes over.
      inbox_prompts_ = 0;
      for (Submission& s : submissions) engine_waiting_ += static_cast<int>(s.prompts.size());
    }
    for (Submission& s : submissions) admit(s);
    for (const auto& stream : cancels) abort_requests_of(stream);
    for (RequestId id : stopped)
      if (engine_.abort_request(id, /*with_samples=*/false)) ended_by_stop_string_.insert(id.value);
    for (auto& f : calls) f();
    if (abort_everything)
      for (const auto& [id, root] : roots_) engine_.abort_request(RequestId{id});
    const bool disconnected = abort_disconnected_clients();
    if (engine_.has_unfinished() || abort_everything || !cancels.empty() || !stopped.empty() || disconnected) {
      const auto t0 = Clock::now();
      std::vector<RequestOutput> outputs = engine_.step();
      const double step = seconds_between(t0, Clock::now());
      const EngineStepWork& work = engine_.stats().last_step;
      if (const int64_t tokens = work.prefill_tokens + work.decode_seqs; tokens > 0)
        metrics_.observe_step_tokens(static_cast<int>(tokens));
      step_seconds_ = step_seconds_ == 0 ? step : 0.875 * step_seconds_ + 0.125 * step;
      dispatch(outputs);
    }
    publish_kv_events();
    publish_load();
    if (stopping && !engine_.has_unfinished()) {
      end_remaining_choices();
      // Anything still in calls_ must not wait forever.
      std::lock_guard lock(mutex_);
      for (auto& f : calls_) f();
      calls_.clear();
      return;
    }
  }
}

void EngineService::end_remaining_choices() {
  // Every accepted request gets a final answer, even one whose samples the engine never reported.
  for (auto& [id, root] : roots_) {
    for (int k = 0; k < root.n; ++k) {
      ChoiceUpdate c;
      c.choice = root.first_choice + k;
      c.finished = true;
      c.finish_reason = FinishReason::kAborted;
      root.stream->push(std::move(c));
    }
  }
  roots_.clear();
  samples_.clear();
}

void EngineService::dispatch(std::vector<RequestOutput>& outputs) {
  const auto now = Clock::now();
  const int stream_interval = options_.stream_interval != EngineServiceOptions::kAutoStreamInterval
                                  ? options_.stream_interval
                                  : auto_stream_interval(static_cast<int>(outputs.size()), step_seconds_);
  for (RequestOutput& o : outputs) {
    const uint64_t root_id = o.sample_index == 0 ? o.id.value : o.parent.value;
    auto rit = roots_.find(root_id);
    if (rit == roots_.end()) continue;
    Root& root = rit->second;
    Sample& sample = samples_.try_emplace(o.id.value, Sample{root_id, 0, 0, false, root.arrival, {}}).first->second;
    if (o.sample_index > 0) root.child_seen = true;

    // Latency metrics follow the engine's steps, whatever the hand-over interval.
    const size_t produced = o.output.size();
    if (produced > sample.seen) {
      const int fresh = static_cast<int>(produced - sample.seen);
      if (sample.seen == 0 && o.sample_index == 0) {
        metrics_.observe_first_token(o.ttft_ms / 1e3, o.queue_ms >= 0 ? o.queue_ms / 1e3 : -1.0);
        root.prefill_seconds = std::max(0.0, (o.ttft_ms - std::max(0.0, o.queue_ms)) / 1e3);
        root.first_token = now;
        metrics_.count_prompt(static_cast<int>(o.prompt.size()), o.hit_tokens_by_tier);
      } else if (sample.seen > 0) {
        metrics_.observe_inter_token(seconds_between(sample.last_token, now), fresh);
      }
      sample.last_token = now;
      sample.seen = produced;
      root.generated_tokens += fresh;
    }
    for (TokenLogprobs& lp : o.new_logprobs) sample.held_logprobs.push_back(std::move(lp));

    // Hand over: a choice's first tokens and its end at once, otherwise every stream_interval tokens.
    const size_t pending = produced - std::min(sample.delivered, produced);
    const bool hand_over =
        o.finished || (pending > 0 && (!sample.announced || static_cast<int>(pending) >= stream_interval));
    if (!hand_over) continue;
    ChoiceUpdate u;
    u.choice = root.first_choice + o.sample_index;
    u.engine_id = o.id;
    u.tokens.assign(o.output.begin() + static_cast<ptrdiff_t>(produced - pending), o.output.end());
    u.logprobs = std::move(sample.held_logprobs);
    sample.held_logprobs.clear();
    sample.delivered = produced;
    if (!sample.announced) {
      u.first = true;
      u.prompt = o.prompt;
      u.cached_tokens = o.prefix_hit_tokens;
      u.prompt_logprobs = std::move(o.prompt_logprobs);
      sample.announced = true;
    }
    if (o.finished) {
      u.finished = true;
      u.finish_reason = o.finish_reason;
      if (o.finish_reason == FinishReason::kRejected)
        u.error = "the request needs more KV-cache blocks than the whole cache holds";
      if (ended_by_stop_string_.erase(o.id.value) > 0) u.finish_reason = FinishReason::kStop;
      metrics_.observe_finished_sample(metric_reason(u.finish_reason), static_cast<int>(produced));
      samples_.erase(o.id.value);
      ++root.finished_samples;
    }
    // A stop string ends a choice only after its first token, when its siblings exist already.
    // The samples fork at the root's first token: a root aborted with tokens out (a grammar's dead
    // end) has forked them, and they report their own ends.
    const bool ended_before_fork =
        o.finished && o.sample_index == 0 && root.n > 1 && !root.child_seen && produced == 0 &&
        u.finish_reason != FinishReason::kStop &&
        (o.finish_reason == FinishReason::kAborted || o.finish_reason == FinishReason::kRejected);
    std::shared_ptr<RequestStream> stream = root.stream;
    stream->push(std::move(u));
    if (ended_before_fork) {  // its samples were never forked: they end with it
      for (int k = 1; k < root.n; ++k) {
        ChoiceUpdate c;
        c.choice = root.first_choice + k;
        c.first = true;
        c.prompt = o.prompt;
        c.finished = true;
        c.finish_reason = o.finish_reason;
        stream->push(std::move(c));
        metrics_.observe_finished_sample(metric_reason(o.finish_reason), 0);
      }
      root.finished_samples = root.n;
    }
    if (root.finished_samples >= root.n) {
      // A request that ended before its first token (aborted, rejected) completed no phase: 0 and 0.
      const double decode = root.first_token ? seconds_between(*root.first_token, now) : 0.0;
      const double prefill = root.first_token ? root.prefill_seconds : 0.0;
      metrics_.observe_finished_request(seconds_between(root.arrival, now), root.prompt_tokens, root.generated_tokens,
                                        prefill, decode, root.max_tokens);
      const std::shared_ptr<RequestStream> finished_stream = root.stream;
      roots_.erase(rit);
      root_finished(finished_stream);
    }
  }
}

}  // namespace pagedkv::server
