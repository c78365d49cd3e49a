#include "pagedkv/engine/llm_engine.h"

#include <fmt/format.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <limits>

#include "pagedkv/core/error.h"
#include "pagedkv/engine/beam_search.h"
#include "pagedkv/engine/grammar_mask_worker.h"
#include "pagedkv/grammar/token_bitmask.h"
#include "pagedkv/memory/kv_memory.h"
#include "pagedkv/model/logits_processing.h"
#include "pagedkv/storage/kv_ops.h"

namespace pagedkv {
namespace {

using Clock = std::chrono::steady_clock;

// Whether `token` ends request `s` (Scheduler::check_stop's test).
bool is_stop_token(const StopConditions& s, TokenId token) {
  return (!s.ignore_eos && token == s.eos_token_id) ||
         std::find(s.stop_token_ids.begin(), s.stop_token_ids.end(), token) != s.stop_token_ids.end();
}

void allow_token(std::vector<uint32_t>& mask, TokenId id) {
  if (id >= 0 && static_cast<size_t>(id) / 32 < mask.size())
    mask[static_cast<size_t>(id) / 32] |= 1u << (static_cast<uint32_t>(id) % 32);
}

bool any_finite(std::span<const float> values) {
  return std::any_of(values.begin(), values.end(), [](float v) { return v > -std::numeric_limits<float>::infinity(); });
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

size_t bytes_per_block(const ModelConfig& m, const EngineConfig& c) {
  // One physical block holds a page for every arena layer (kv_arena_layers: a group's layers).
  return m.kv_cache_spec(c.block_size, c.kv_dtype).bytes_per_block_per_layer() *
         static_cast<size_t>(m.kv_arena_layers());
}

int blocks_for(const ModelConfig& m, const EngineConfig& c) {
  if (c.block_size <= 0) throw ConfigError(fmt::format("block_size must be positive, got {}", c.block_size));
  if (c.num_blocks > 0) {
    if (c.num_blocks < 2) throw ConfigError("num_blocks must be at least 2 (block 0 is reserved)");
    return c.num_blocks;
  }
  const size_t n = c.kv_cache_bytes / bytes_per_block(m, c);
  if (n < 2)
    throw ConfigError(fmt::format("a KV budget of {} bytes holds {} blocks of {} bytes; at least 2 are needed",
                                  c.kv_cache_bytes, n, bytes_per_block(m, c)));
  return static_cast<int>(std::min<size_t>(n, 1u << 30));
}

KVCacheManagerConfig manager_config(const ModelConfig& m, const EngineConfig& c, int num_blocks, int max_model_len) {
  KVCacheManagerConfig mc;
  mc.cache.num_blocks = num_blocks;
  mc.cache.groups = m.kv_cache_groups(c.block_size, c.kv_dtype);  // full attention, then sliding layers
  mc.max_model_len = max_model_len;
  mc.enable_caching = c.enable_prefix_caching;
  mc.hash_algorithm = c.hash_algorithm;
  mc.hash_seed = c.hash_seed;
  mc.enable_events = c.enable_kv_events;
  return mc;
}

}  // namespace

LLMEngine::LLMEngine(const Model& model, EngineConfig config)
    : config_(std::move(config)),
      runner_(model),
      num_blocks_(blocks_for(model.config(), config_)),
      swap_blocks_(static_cast<int>(config_.swap_space_bytes / bytes_per_block(model.config(), config_))),
      max_model_len_(config_.max_model_len > 0 ? std::min(config_.max_model_len, model.config().seq_len)
                                               : model.config().seq_len),
      manager_(manager_config(model.config(), config_, num_blocks_, max_model_len_)),
      scheduler_(config_.scheduler, manager_, swap_blocks_),
      arena_(model.config().kv_cache_spec(config_.block_size, config_.kv_dtype), model.config().kv_arena_layers(),
             num_blocks_),
      block_table_(config_.scheduler.max_num_seqs * 4, (max_model_len_ + config_.block_size - 1) / config_.block_size) {
  if (config_.tiers.enabled()) {
    // The tiers take over swap: the swap space becomes part of the host tier.
    tiers_ = std::make_unique<TieredKVCache>(config_.tiers, manager_, arena_, model_weights_digest(model),
                                             config_.swap_space_bytes);
    scheduler_.set_tiers(tiers_.get());
    if (config_.enable_kv_events) tiers_->enable_events();
  } else if (swap_blocks_ > 0) {
    host_arena_.emplace(model.config().kv_cache_spec(config_.block_size, config_.kv_dtype),
                        model.config().kv_arena_layers(), swap_blocks_);
  }
  for (int r = block_table_.max_requests() - 1; r >= 0; --r) free_rows_.push_back(r);
  const int groups = model.config().num_kv_cache_groups();
  group_tables_.resize(static_cast<size_t>(groups));
  group_slots_.resize(static_cast<size_t>(groups));
  group_batches_.resize(static_cast<size_t>(groups - 1));
}

LLMEngine::~LLMEngine() {
  mask_worker_.reset();  // joins its thread before the matchers it may read go
  if (!tiers_) return;
  try {
    tiers_->shutdown();
  } catch (const std::exception& e) {
    fmt::print(stderr, "pagedkv: writing the KV tiers down at shutdown failed: {}\n", e.what());
  }
}

uint64_t model_weights_digest(const Model& model) {
  const ModelConfig& c = model.config();
  const ModelWeights& w = model.weights();
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  const int32_t shape[] = {c.dim,        c.hidden_dim, c.n_layers, c.n_heads,
                           c.n_kv_heads, c.vocab_size, c.seq_len,  c.shared_classifier ? 1 : 0};
  XXH3_64bits_update(state, shape, sizeof(shape));
  // Every weight in file order (not the legacy RoPE tables; wcls only when not shared).
  for_each_llama2c_tensor(c, [&](WeightField field, std::initializer_list<uint64_t> factors) {
    if (field != nullptr && w.*field != nullptr)
      XXH3_64bits_update(state, w.*field, tensor_floats(factors) * sizeof(float));
  });
  if (w.token_embedding == nullptr) {
    // Not a llama2.c model (GGUF): the architecture, then every tensor in its stored type.
    XXH3_64bits_update(state, c.architecture.data(), c.architecture.size());
    const int32_t extra[] = {c.head_dim(), c.sliding_window, c.sliding_window_period,
                             static_cast<int32_t>(c.rope_style)};
    XXH3_64bits_update(state, extra, sizeof(extra));
    model.tensors().for_each_tensor([&](const WeightTensor& t) {
      const int64_t desc[] = {static_cast<int64_t>(t.type), t.rows, t.cols};
      XXH3_64bits_update(state, desc, sizeof(desc));
      if (t.present())
        XXH3_64bits_update(state, t.data, static_cast<size_t>(t.rows) * tensor_row_bytes(t.type, t.cols));
    });
  }
  const uint64_t digest = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return digest;
}

std::string LLMEngine::describe() const {
  const ModelConfig& m = runner_.config();
  const size_t bpb = bytes_per_block(m, config_);
  const int usable = num_blocks_ - 1;
  // Blocks one request of max_model_len tokens holds at its largest, in every group (decoding:
  // chunks of one token, the manager's footprint).
  int64_t per_request = 0;
  std::string groups;
  for (const KVCacheGroupSpec& g : m.kv_cache_groups(config_.block_size, config_.kv_dtype)) {
    const bool sliding = g.spec.kind == AttentionKind::kSlidingWindow;
    per_request += blocks_per_request(g.spec, max_model_len_, 1);
    groups += fmt::format("{}{} x {}", groups.empty() ? "" : ", ", g.num_layers,
                          sliding ? fmt::format("sliding({})", g.spec.sliding_window) : std::string("full"));
  }
  const int num_groups = m.num_kv_cache_groups();
  const std::string group_line =
      num_groups == 1
          ? std::string()
          : fmt::format("\nKV-cache groups: {} of {} layers each [{}]; {} padding layers ({:.1f}% of the pool)",
                        num_groups, m.kv_arena_layers(), groups, m.kv_padding_layers(),
                        100.0 * m.kv_padding_layers() / (num_groups * m.kv_arena_layers()));
  return fmt::format(
             "KV cache: {} blocks x {} tokens ({} {} bytes per block, {:.2f} MiB), {} usable tokens{}\n"
             "Maximum concurrency for {} tokens per request: {:.2f}x\n"
             "Swap space: {} host blocks ({:.2f} MiB); prefix caching {}; preemption {}",
             num_blocks_, config_.block_size, bpb, dtype_name(config_.kv_dtype),
             static_cast<double>(bpb) * num_blocks_ / (1 << 20), usable * config_.block_size, group_line,
             max_model_len_, static_cast<double>(usable) / static_cast<double>(per_request), swap_blocks_,
             static_cast<double>(bpb) * swap_blocks_ / (1 << 20), config_.enable_prefix_caching ? "on" : "off",
             preemption_mode_name(config_.scheduler.preemption_mode)) +
         (tiers_ ? "\nKV tiers: " + tiers_->describe() : std::string());
}

RequestId LLMEngine::add_request(GenerationRequest g) {
  const int vocab = runner_.config().vocab_size;
  if (g.prompt.empty()) throw UsageError("a request needs at least one prompt token");
  for (size_t i = 0; i < g.prompt.size(); ++i)
    if (g.prompt[i] < 0 || g.prompt[i] >= vocab)
      throw UsageError(
          fmt::format("prompt token {} at index {} is outside the vocabulary [0, {})", g.prompt[i], i, vocab));
  if (g.n < 1) throw UsageError(fmt::format("n must be at least 1, got {}", g.n));
  if (g.n > 1 && config_.scheduler.kv_reservation != KVReservation::kPaged)
    throw UsageError(fmt::format("parallel sampling (n = {}) needs the paged KV reservation, not {}", g.n,
                                 kv_reservation_name(config_.scheduler.kv_reservation)));
  if (g.logprobs < -1) throw UsageError(fmt::format("logprobs must be -1 (none) or at least 0, got {}", g.logprobs));
  if (g.beam_width < 1) throw UsageError(fmt::format("beam_width must be at least 1, got {}", g.beam_width));
  if (g.prompt_logprobs < -1)
    throw UsageError(fmt::format("prompt_logprobs must be -1 (none) or at least 0, got {}", g.prompt_logprobs));
  if (g.beam_width > 1 && g.prompt_logprobs >= 0)
    throw UsageError(fmt::format("beam search (beam_width = {}) takes no prompt logprobs", g.beam_width));
  if (g.beam_width > 1 && (g.n > 1 || g.logprobs >= 0))
    throw UsageError(fmt::format("beam search (beam_width = {}) takes n = 1 and no logprobs", g.beam_width));
  if (g.beam_width > 1 && config_.scheduler.kv_reservation != KVReservation::kPaged)
    throw UsageError(fmt::format("beam search (beam_width = {}) needs the paged KV reservation, not {}", g.beam_width,
                                 kv_reservation_name(config_.scheduler.kv_reservation)));
  g.sampling.validate();
  for (const auto& [token, bias] : g.sampling.logit_bias)
    if (token >= vocab)
      throw UsageError(fmt::format("logit_bias names token {}, outside the vocabulary [0, {})", token, vocab));
  if (g.stop.min_tokens < 0) throw UsageError(fmt::format("min_tokens must be at least 0, got {}", g.stop.min_tokens));
  if (g.grammar) {
    if (g.beam_width > 1)
      throw UsageError(
          fmt::format("structured output (a grammar) does not work with beam search (beam_width = {})", g.beam_width));
    if (g.grammar->vocabulary().size() > vocab)
      throw UsageError(fmt::format("the grammar was compiled for a vocabulary of {} tokens; this model has {}",
                                   g.grammar->vocabulary().size(), vocab));
    // The grammar ends only with its vocabulary's stop ids: they end this request (ignore_eos too).
    for (int32_t id : g.grammar->vocabulary().stop_ids())
      if (!is_stop_token(g.stop, id)) g.stop.stop_token_ids.push_back(id);
  }
  auto r = std::make_unique<SchedulerRequest>();
  r->kv = Request(RequestId{next_id_++}, std::move(g.prompt));
  r->kv.cache_salt = std::move(g.cache_salt);
  r->kv.lora_id = g.lora_id;
  // Prompt logprobs need the logits of every prompt position: nothing may come from the cache.
  r->kv.skip_prefix_cache = g.prompt_logprobs >= 0;
  r->kv.tokens.reserve(static_cast<size_t>(max_model_len_) + 1);
  r->priority = g.priority;
  r->stop = std::move(g.stop);
  r->n = g.n;
  const RequestId id = r->kv.id;
  if (g.beam_width > 1) {
    BeamGroup& b = beams_[id.value];
    b.width = g.beam_width;
    b.live.push_back(id);
    b.cumulative[id] = 0;
    beam_root_[id] = id.value;
    timing_[id].arrival = Clock::now();
    scheduler_.add_request(std::move(r));
    return id;
  }
  samplers_.emplace(std::pair(id.value, 0), Sampler(vocab, g.sampling));
  if (g.grammar) matchers_.emplace(std::pair(id.value, 0), grammar::GrammarMatcher(std::move(g.grammar)));
  // Children draw from their own generators: seed + sample index.
  for (int k = 1; k < g.n; ++k) {
    SamplingParams p = g.sampling;
    p.seed += static_cast<uint64_t>(k);
    samplers_.emplace(std::pair(id.value, k), Sampler(vocab, p));
  }
  if (g.logprobs >= 0) logprobs_[id.value] = g.logprobs;
  if (g.prompt_logprobs >= 0) prompt_logprobs_[id.value].top_k = g.prompt_logprobs;
  timing_[id].arrival = Clock::now();
  scheduler_.add_request(std::move(r));
  return id;
}

bool LLMEngine::abort_request(RequestId id, bool with_samples) {
  auto g = beams_.find(id.value);
  if (g == beams_.end()) return scheduler_.abort_request(id, with_samples);
  bool any = false;  // a beam search ends as a whole: every live beam
  for (RequestId b : g->second.live) any = scheduler_.abort_request(b, false) || any;
  return any;
}

void LLMEngine::sync_block_table_row(const SchedulerRequest& r, bool rewritten) {
  auto [it, inserted] = rows_.try_emplace(r.kv.id, -1);
  if (inserted) {
    if (free_rows_.empty()) throw InvariantError("engine: out of block-table rows");
    it->second = free_rows_.back();
    free_rows_.pop_back();
    rewritten = true;
  }
  auto blocks = scheduler_.block_ids(r);  // the manager's table, or a reserved range
  // A buddy reservation may round past the longest sequence; blocks there are never addressed.
  if (blocks.size() > static_cast<size_t>(block_table_.stride()))
    blocks = blocks.first(static_cast<size_t>(block_table_.stride()));
  const int row = it->second;
  const int have = block_table_.num_blocks(row);
  if (rewritten || have > static_cast<int>(blocks.size())) block_table_.set_row(row, blocks);
  else if (have < static_cast<int>(blocks.size()))
    block_table_.append_row(row, blocks.subspan(static_cast<size_t>(have)));
}

std::span<const float> LLMEngine::adjusted_logits(const SchedulerRequest& r, const SamplingParams& params,
                                                  std::span<const float> row) {
  const std::span<const TokenId> tokens(r.kv.tokens);
  const auto prompt = tokens.first(static_cast<size_t>(r.kv.num_prompt_tokens));
  const auto output = tokens.subspan(static_cast<size_t>(r.kv.num_prompt_tokens));
  banned_tokens_.clear();
  if (static_cast<int>(output.size()) < r.stop.min_tokens) {
    banned_tokens_ = r.stop.stop_token_ids;
    if (!r.stop.ignore_eos && r.stop.eos_token_id >= 0) banned_tokens_.push_back(r.stop.eos_token_id);
  }
  if (banned_tokens_.empty() && !params.adjusts_logits()) return row;
  adjusted_logits_.assign(row.begin(), row.end());
  adjust_logits(adjusted_logits_, params, prompt, output, banned_tokens_);
  return adjusted_logits_;
}

std::span<const float> LLMEngine::grammar_logits(const SchedulerRequest& r, const SamplingParams& params,
                                                 std::span<const float> row, grammar::GrammarMatcher& matcher,
                                                 GrammarMaskJob* precomputed) {
  const std::span<const TokenId> tokens(r.kv.tokens);
  const auto prompt = tokens.first(static_cast<size_t>(r.kv.num_prompt_tokens));
  const auto output = tokens.subspan(static_cast<size_t>(r.kv.num_prompt_tokens));
  bool can_end = false;
  if (precomputed != nullptr) {
    if (precomputed->matcher != &matcher || precomputed->mask.size() != (row.size() + 31) / 32)
      throw InvariantError(fmt::format("request {}: its precomputed grammar mask is not its own", r.kv.id.value));
    grammar_mask_.swap(precomputed->mask);  // the job's storage becomes next step's scratch
    can_end = precomputed->can_terminate;
  } else {
    grammar_mask_.assign((row.size() + 31) / 32, 0);
    matcher.fill_next_token_bitmask(grammar_mask_);
    can_end = matcher.can_terminate();
  }
  if (can_end) {  // the request's own stop tokens end a complete output too
    if (!r.stop.ignore_eos) allow_token(grammar_mask_, r.stop.eos_token_id);
    for (TokenId id : r.stop.stop_token_ids) allow_token(grammar_mask_, id);
  }
  for (const bool with_min_tokens : {true, false}) {
    banned_tokens_.clear();
    if (with_min_tokens && static_cast<int>(output.size()) < r.stop.min_tokens) {
      banned_tokens_ = r.stop.stop_token_ids;
      if (!r.stop.ignore_eos && r.stop.eos_token_id >= 0) banned_tokens_.push_back(r.stop.eos_token_id);
    }
    adjusted_logits_.assign(row.begin(), row.end());
    if (!banned_tokens_.empty() || params.adjusts_logits())
      adjust_logits(adjusted_logits_, params, prompt, output, banned_tokens_);
    grammar::apply_token_bitmask(adjusted_logits_, grammar_mask_);
    if (any_finite(adjusted_logits_)) return adjusted_logits_;
    // Nothing left: min_tokens banned the stop tokens of an output the grammar says is complete.
    // The grammar wins (retry without the ban).
    if (banned_tokens_.empty()) break;
  }
  // The grammar allows nothing: a dead end, where the output cannot go on with this vocabulary's
  // tokens (a character no token spells). A stop token ends the output; make_output reports it
  // aborted.
  adjusted_logits_.assign(row.begin(), row.end());
  grammar_mask_.assign(grammar_mask_.size(), 0);
  for (int32_t id : matcher.grammar().vocabulary().stop_ids()) allow_token(grammar_mask_, id);
  grammar::apply_token_bitmask(adjusted_logits_, grammar_mask_);
  return adjusted_logits_;
}

void LLMEngine::advance_matcher(const SchedulerRequest& r, grammar::GrammarMatcher& matcher, TokenId token) {
  if (is_stop_token(r.stop, token)) {  // ends the request; the matcher is dropped with it
    if (matcher.can_terminate() && matcher.grammar().vocabulary().is_stop(token)) matcher.accept_token(token);
    return;
  }
  if (!matcher.accept_token(token))
    throw InvariantError(fmt::format("request {}: token {} was sampled under a grammar mask that does not allow it",
                                     r.kv.id.value, token));
}

RequestOutput LLMEngine::make_output(const SchedulerRequest& r, bool finished) {
  RequestOutput o;
  o.id = r.kv.id;
  o.parent = r.parent;
  o.sample_index = r.sample_index;
  o.prompt.assign(r.kv.tokens.begin(), r.kv.tokens.begin() + r.kv.num_prompt_tokens);
  auto end = r.kv.tokens.end();
  if (finished && r.stopped_on_stop_token) --end;
  o.output.assign(r.kv.tokens.begin() + r.kv.num_prompt_tokens, end);
  o.finished = finished;
  o.finish_reason = r.finish_reason;
  o.prefix_hit_tokens = std::max(0, r.prefix_hit_tokens);
  o.hit_tokens_by_tier = r.hit_tokens_by_tier;
  o.num_preemptions = r.num_preemptions;
  const uint64_t root = r.sample_index == 0 ? r.kv.id.value : r.parent.value;
  // A structured output that a stop token ended while its grammar could not end is incomplete: the
  // grammar came to a dead end (no token of this vocabulary continues it, grammar_logits) and the
  // output is reported aborted, never as complete.
  if (finished && r.finish_reason == FinishReason::kStop && r.stopped_on_stop_token && !matchers_.empty())
    if (auto m = matchers_.find({root, r.sample_index});
        m != matchers_.end() && !m->second.is_terminated() && !m->second.can_terminate())
      o.finish_reason = FinishReason::kAborted;
  if (auto lp = pending_logprobs_.find({root, r.sample_index}); lp != pending_logprobs_.end()) {
    o.new_logprobs = std::move(lp->second);
    pending_logprobs_.erase(lp);
    if (finished && r.stopped_on_stop_token && !o.new_logprobs.empty()) o.new_logprobs.pop_back();
  }
  if (r.sample_index == 0 && !prompt_logprobs_.empty())
    if (auto p = prompt_logprobs_.find(r.kv.id.value);
        p != prompt_logprobs_.end() && !p->second.reported &&
        static_cast<int>(p->second.entries.size()) >= r.kv.num_prompt_tokens - 1) {
      o.prompt_logprobs = std::move(p->second.entries);
      p->second.reported = true;
    }
  auto t = timing_.find(r.kv.id);
  if (t != timing_.end() && t->second.scheduled) o.queue_ms = ms_between(t->second.arrival, t->second.first_scheduled);
  if (t != timing_.end() && t->second.has_first) {
    o.ttft_ms = ms_between(t->second.arrival, t->second.first_token);
    o.latency_ms = ms_between(t->second.arrival, t->second.last_token);
    const size_t n = o.output.size();
    if (n > 1) o.tpot_ms = ms_between(t->second.first_token, t->second.last_token) / static_cast<double>(n - 1);
  }
  return o;
}

std::vector<RequestOutput> LLMEngine::step() {
  const auto t0 = Clock::now();
  if (tiers_) tiers_->on_step_begin();  // finished transfers; write-through of last step's blocks
  SchedulerOutput out = scheduler_.schedule();
  ++stats_.steps;
  release_stale_rows();
  const double copy_seconds = move_blocks(out);
  count_step_work(out);

  std::vector<SampledTokens> sampled(out.chunks.size());
  if (!out.chunks.empty()) {
    const ForwardBatch batch = flatten_batch(out, t0);
    post_grammar_masks(out);
    const auto f0 = Clock::now();
    stats_.schedule_seconds += std::chrono::duration<double>(f0 - t0).count() - copy_seconds;
    Logits logits;
    try {
      logits = runner_.forward(batch, arena_);
    } catch (...) {
      wait_grammar_masks();  // the worker lets go of the matchers before anyone else may touch them
      throw;
    }
    const auto f1 = Clock::now();
    stats_.forward_seconds += std::chrono::duration<double>(f1 - f0).count();
    record_prompt_logprobs(out, logits);
    sample(out, logits, sampled);
  } else {
    stats_.schedule_seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    // Nothing could run: the waiting requests' blocks are still loading from the disk tier.
    // Sleep until a transfer finishes rather than spin through empty steps.
    if (tiers_ && scheduler_.has_unfinished()) tiers_->wait_for_progress();
  }

  const auto now = Clock::now();
  std::vector<SchedulerRequest*> finished = update_requests(out, sampled);
  std::vector<RequestOutput> results;
  report_sampled(out, sampled, finished, now, results);
  retire_finished(finished, results);
  forget_orphaned_sampling_state();
  record_block_usage();
  if (config_.check_invariants) check_invariants();
  return results;
}

void LLMEngine::release_stale_rows() {
  for (auto it = rows_.begin(); it != rows_.end();) {
    SchedulerRequest* r = scheduler_.find(it->first);
    if (r == nullptr || r->status != RequestStatus::kRunning) {
      block_table_.clear_row(it->second);
      free_rows_.push_back(it->second);
      it = rows_.erase(it);
    } else {
      ++it;
    }
  }
}

double LLMEngine::move_blocks(const SchedulerOutput& out) {
  const auto c0 = Clock::now();
  // Tier copies first: they read blocks that were evicted or swapped out in this schedule.
  if (tiers_) tiers_->before_forward();
  if (!out.swap_out.empty()) copy_blocks_between(arena_, *host_arena_, out.swap_out);
  if (!out.swap_in.empty()) copy_blocks_between(*host_arena_, arena_, out.swap_in);
  if (!out.cow_copies.empty()) copy_blocks(arena_, out.cow_copies);
  stats_.cow_copies += out.cow_copies.size();
  const double seconds = std::chrono::duration<double>(Clock::now() - c0).count();
  stats_.copy_seconds += seconds;
  return seconds;
}

void LLMEngine::count_step_work(const SchedulerOutput& out) {
  EngineStepWork& work = stats_.last_step;
  work = EngineStepWork{};
  work.copied_blocks = static_cast<int64_t>(out.swap_out.size() + out.swap_in.size());
  for (const ScheduledChunk& c : out.chunks) {
    if (c.num_new_tokens == 1) {
      ++work.decode_seqs;
      work.decode_context_tokens += c.first_position + 1;
    } else {
      work.prefill_tokens += c.num_new_tokens;
      work.prefill_token_pairs += c.num_new_tokens * (c.first_position + (c.num_new_tokens + 1) / 2.0);
    }
  }
}

ForwardBatch LLMEngine::flatten_batch(const SchedulerOutput& out, Clock::time_point step_start) {
  const size_t R = out.chunks.size();
  const int stride = block_table_.stride();
  tokens_.clear();
  positions_.clear();
  slots_.clear();
  logits_rows_.clear();
  prompt_rows_.clear();
  sample_rows_.assign(R, -1);
  query_start_.assign(1, 0);
  context_lens_.clear();
  batch_tables_.assign(R * static_cast<size_t>(stride), 0);
  for (size_t g = 1; g < group_tables_.size(); ++g) group_tables_[g].assign(R * static_cast<size_t>(stride), 0);
  for (size_t i = 0; i < R; ++i) {
    const ScheduledChunk& c = out.chunks[i];
    const SchedulerRequest& r = *c.request;
    if (Timing& t = timing_[r.kv.id]; !t.scheduled) {
      t.first_scheduled = step_start;
      t.scheduled = true;
    }
    const bool rewritten =
        std::find(out.rewritten_tables.begin(), out.rewritten_tables.end(), r.kv.id) != out.rewritten_tables.end();
    sync_block_table_row(r, rewritten);
    const int32_t* row = block_table_.row(rows_.at(r.kv.id));
    std::copy(row, row + stride, batch_tables_.begin() + static_cast<ptrdiff_t>(i) * stride);
    const size_t base = tokens_.size();
    for (int k = 0; k < c.num_new_tokens; ++k) {
      tokens_.push_back(r.kv.tokens[static_cast<size_t>(c.first_position + k)]);
      positions_.push_back(c.first_position + k);
    }
    slots_.resize(tokens_.size());
    compute_slot_mapping(row, config_.block_size, c.first_position, c.num_new_tokens, slots_.data() + base);
    // Other KV-cache groups (sliding-window layers): their tables rebuilt from the manager's.
    for (size_t g = 1; g < group_tables_.size(); ++g) {
      std::vector<int32_t>& table = group_tables_[g];
      table.resize((i + 1) * static_cast<size_t>(stride), 0);
      const auto ids = manager_.get_block_ids(r.kv, static_cast<int>(g));
      int32_t* dst = table.data() + i * static_cast<size_t>(stride);
      for (size_t b = 0; b < ids.size() && b < static_cast<size_t>(stride); ++b) dst[b] = ids[b].value;
      group_slots_[g].resize(tokens_.size());
      compute_slot_mapping(dst, config_.block_size, c.first_position, c.num_new_tokens, group_slots_[g].data() + base);
    }
    query_start_.push_back(static_cast<int32_t>(tokens_.size()));
    context_lens_.push_back(c.first_position + c.num_new_tokens);
    // Prompt logprobs: the rows of prompt positions whose next prompt token has no entry yet (a
    // recomputed prefill after a preemption finds them all there).
    if (!prompt_logprobs_.empty() && r.sample_index == 0)
      if (auto p = prompt_logprobs_.find(r.kv.id.value); p != prompt_logprobs_.end() && !p->second.reported) {
        int next = static_cast<int>(p->second.entries.size()) + 1;  // the prompt index lacking an entry
        for (int k = 0; k < c.num_new_tokens; ++k) {
          const int target = c.first_position + k + 1;
          if (target != next || target >= r.kv.num_prompt_tokens) continue;
          prompt_rows_.push_back({i, static_cast<int32_t>(logits_rows_.size()), target});
          logits_rows_.push_back(static_cast<int32_t>(base) + k);
          ++next;
        }
      }
    if (c.samples) {
      sample_rows_[i] = static_cast<int32_t>(logits_rows_.size());
      logits_rows_.push_back(static_cast<int32_t>(tokens_.size() - 1));
    }
  }
  ForwardBatch batch;
  batch.token_ids = tokens_;
  batch.positions = positions_;
  batch.slot_mapping = slots_;
  batch.attention.num_requests = static_cast<int>(R);
  batch.attention.query_start = query_start_.data();
  batch.attention.context_lens = context_lens_.data();
  batch.attention.block_tables = batch_tables_.data();
  batch.attention.block_table_stride = stride;
  batch.attention.cascade = config_.cascade_attention;
  batch.logits_rows = logits_rows_;
  for (size_t g = 1; g < group_tables_.size(); ++g)
    group_batches_[g - 1] = KVGroupTables{group_tables_[g].data(), stride, group_slots_[g]};
  batch.extra_groups = group_batches_;
  return batch;
}

void LLMEngine::record_prompt_logprobs(const SchedulerOutput& out, const Logits& logits) {
  for (const PromptRow& p : prompt_rows_) {
    const SchedulerRequest& r = *out.chunks[p.chunk].request;
    PromptLogprobs& state = prompt_logprobs_.at(r.kv.id.value);
    state.entries.push_back(
        compute_logprobs(logits.row(p.logits_index), r.kv.tokens[static_cast<size_t>(p.target)], state.top_k));
  }
}

void LLMEngine::post_grammar_masks(const SchedulerOutput& out) {
  mask_job_of_chunk_.clear();
  if (!config_.grammar_mask_overlap || matchers_.empty()) return;
  if (mask_worker_) mask_worker_->clear();
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const ScheduledChunk& c = out.chunks[i];
    if (!c.samples) continue;
    const SchedulerRequest& r = *c.request;
    const uint64_t root = r.sample_index == 0 ? r.kv.id.value : r.parent.value;
    auto m = matchers_.find({root, r.sample_index});
    if (m == matchers_.end() || beam_root_.contains(r.kv.id)) continue;
    if (!mask_worker_) mask_worker_ = std::make_unique<GrammarMaskWorker>((runner_.config().vocab_size + 31) / 32);
    if (mask_job_of_chunk_.empty()) mask_job_of_chunk_.assign(out.chunks.size(), -1);
    mask_job_of_chunk_[i] = static_cast<int>(mask_worker_->size());
    mask_worker_->add(i, m->second);
  }
  if (!mask_job_of_chunk_.empty()) mask_worker_->post();
}

void LLMEngine::wait_grammar_masks() {
  if (!mask_job_of_chunk_.empty()) mask_worker_->wait();
}

void LLMEngine::sample(const SchedulerOutput& out, const Logits& logits, std::vector<SampledTokens>& sampled) {
  wait_grammar_masks();
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const ScheduledChunk& c = out.chunks[i];
    // Every token of a chunk but the one that samples is prefill (or re-prefill after a
    // recompute preemption), including the rest of a final prefill chunk.
    stats_.prompt_tokens_computed += static_cast<uint64_t>(c.num_new_tokens - (c.samples ? 1 : 0));
    if (!c.samples) continue;
    const SchedulerRequest& r = *c.request;
    const uint64_t root = r.sample_index == 0 ? r.kv.id.value : r.parent.value;
    auto row = logits.row(sample_rows_[i]);
    if (auto b = beam_root_.find(r.kv.id); b != beam_root_.end()) {
      // A beam: its candidates wait for its siblings' (advance_beams); it appends nothing now.
      log_softmax(row, beams_.at(b->second).pending[r.kv.id]);
      sampled[i].token = -1;
      continue;
    }
    Sampler& sampler = samplers_.at({root, r.sample_index});
    // A structured-output request: its grammar masks the logits (always a copy).
    auto matcher = matchers_.empty() ? matchers_.end() : matchers_.find({root, r.sample_index});
    const bool constrained = matcher != matchers_.end();
    // Penalties, logit bias and min_tokens act on a copy; logprobs below report the model's own.
    const std::span<const float> adjusted =
        constrained ? grammar_logits(r, sampler.params(), row, matcher->second,
                                     mask_job_of_chunk_.empty() || mask_job_of_chunk_[i] < 0
                                         ? nullptr
                                         : &mask_worker_->job(static_cast<size_t>(mask_job_of_chunk_[i])))
                    : adjusted_logits(r, sampler.params(), row);
    sampled[i].token = sampler.sample(adjusted);
    // The forks' first tokens: the same prompt, no output yet, the same parameters (and the
    // same grammar position: each fork starts from a copy of the parent's matcher).
    if (r.n > 1 && !r.forked)
      for (int k = 1; k < r.n; ++k) {
        sampled[i].fork_tokens.push_back(samplers_.at({root, k}).sample(adjusted));
        if (constrained) {
          grammar::GrammarMatcher& fork = matchers_.insert_or_assign({root, k}, matcher->second).first->second;
          advance_matcher(r, fork, sampled[i].fork_tokens.back());
        }
      }
    if (constrained) advance_matcher(r, matcher->second, sampled[i].token);
    if (auto lp = logprobs_.find(root); lp != logprobs_.end()) {
      pending_logprobs_[{root, r.sample_index}].push_back(compute_logprobs(row, sampled[i].token, lp->second));
      for (size_t k = 0; k < sampled[i].fork_tokens.size(); ++k)
        pending_logprobs_[{root, static_cast<int>(k) + 1}].push_back(
            compute_logprobs(row, sampled[i].fork_tokens[k], lp->second));
    }
  }
}

std::vector<SchedulerRequest*> LLMEngine::update_requests(const SchedulerOutput& out,
                                                          const std::vector<SampledTokens>& sampled) {
  std::vector<SchedulerRequest*> finished = scheduler_.update(out, sampled);
  if (!beams_.empty()) {
    advance_beams();
    for (SchedulerRequest* r : scheduler_.take_finished()) finished.push_back(r);
  }
  return finished;
}

void LLMEngine::report_sampled(const SchedulerOutput& out, const std::vector<SampledTokens>& sampled,
                               const std::vector<SchedulerRequest*>& finished, Clock::time_point now,
                               std::vector<RequestOutput>& results) {
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    if (!out.chunks[i].samples) continue;
    SchedulerRequest* r = out.chunks[i].request;
    auto stamp = [&](SchedulerRequest* q) {
      Timing& t = timing_[q->kv.id];
      if (!t.has_first) {
        t.first_token = now;
        t.has_first = true;
      }
      t.last_token = now;
      ++stats_.output_tokens;
    };
    stamp(r);
    if (!sampled[i].fork_tokens.empty()) {
      // Children inherit the parent's arrival time.
      for (SchedulerRequest* q : scheduler_.running())
        if (q->parent == r->kv.id && !timing_.contains(q->kv.id)) {
          timing_[q->kv.id].arrival = timing_[r->kv.id].arrival;
          stamp(q);
        }
      for (SchedulerRequest* q : finished)
        if (q->parent == r->kv.id && !timing_.contains(q->kv.id)) {
          timing_[q->kv.id].arrival = timing_[r->kv.id].arrival;
          stamp(q);
        }
    }
    if (r->status == RequestStatus::kRunning && !beam_root_.contains(r->kv.id))
      results.push_back(make_output(*r, false));
  }
}

void LLMEngine::retire_finished(std::vector<SchedulerRequest*>& finished, std::vector<RequestOutput>& results) {
  for (size_t fi = 0;; ++fi) {
    if (fi == finished.size()) {  // finish_beam may end a group's other beams
      std::vector<SchedulerRequest*> more = scheduler_.take_finished();
      if (more.empty()) break;
      finished.insert(finished.end(), more.begin(), more.end());
    }
    SchedulerRequest* r = finished[fi];
    if (beam_root_.contains(r->kv.id)) finish_beam(*r, results);
    else results.push_back(make_output(*r, true));
    auto row = rows_.find(r->kv.id);
    if (row != rows_.end()) {
      block_table_.clear_row(row->second);
      free_rows_.push_back(row->second);
      rows_.erase(row);
    }
    const uint64_t root = r->sample_index == 0 ? r->kv.id.value : r->parent.value;
    samplers_.erase({root, r->sample_index});
    if (!matchers_.empty()) matchers_.erase({root, r->sample_index});
    pending_logprobs_.erase({root, r->sample_index});
    if (r->sample_index == 0) prompt_logprobs_.erase(r->kv.id.value);
    timing_.erase(r->kv.id);
    scheduler_.release_finished(r->kv.id);
  }
}

void LLMEngine::forget_orphaned_sampling_state() {
  // A fork's matcher made for a child that never came to be (its parent went first).
  if (!matchers_.empty()) std::erase_if(matchers_, [&](const auto& e) { return !samplers_.contains(e.first); });
  // The root's logprobs setting outlives it while its samples run.
  std::erase_if(logprobs_, [&](const auto& e) {
    auto s = samplers_.lower_bound({e.first, 0});
    return s == samplers_.end() || s->first.first != e.first;
  });
}

void LLMEngine::record_block_usage() {
  const int in_use =
      manager_.pool().num_usable_blocks() - manager_.num_free_blocks() + scheduler_.reserved_blocks_in_use();
  if (config_.record_block_usage) stats_.blocks_in_use.push_back(in_use);
  stats_.peak_blocks_in_use = std::max(stats_.peak_blocks_in_use, in_use);
}

void LLMEngine::advance_beams() {
  std::vector<double> cumulative;
  std::vector<std::vector<double>> rows;
  for (auto& [root, g] : beams_) {
    if (g.live.empty()) continue;
    bool ready = true;
    for (RequestId b : g.live) {
      const SchedulerRequest* r = scheduler_.find(b);
      ready = ready && r != nullptr && r->status == RequestStatus::kRunning && g.pending.contains(b);
    }
    if (!ready) continue;
    cumulative.clear();
    rows.clear();
    for (RequestId b : g.live) {
      cumulative.push_back(g.cumulative.at(b));
      rows.push_back(std::move(g.pending.at(b)));
    }
    g.pending.clear();
    const int width = g.width - static_cast<int>(g.hypotheses.size());
    const std::vector<BeamCandidate> chosen = select_beams(cumulative, rows, width);
    std::vector<std::vector<const BeamCandidate*>> per_beam(g.live.size());
    for (const BeamCandidate& c : chosen) per_beam[static_cast<size_t>(c.beam)].push_back(&c);
    // Drop the beams nobody continues first, so their blocks are free for the forks.
    const std::vector<RequestId> old_live = std::move(g.live);
    g.live.clear();
    for (size_t b = 0; b < old_live.size(); ++b)
      if (per_beam[b].empty()) {
        pruned_.insert(old_live[b]);
        g.cumulative.erase(old_live[b]);
        scheduler_.abort_request(old_live[b], false);
      }
    for (size_t b = 0; b < old_live.size(); ++b) {
      if (per_beam[b].empty()) continue;
      SchedulerRequest& r = *scheduler_.find(old_live[b]);
      // Children fork before the beam appends its own token: they share its blocks up to here.
      std::vector<RequestId> children;
      for (size_t k = 1; k < per_beam[b].size(); ++k) {
        SchedulerRequest* child = scheduler_.fork_request(r, RequestId{root}, g.next_index++, per_beam[b][k]->token);
        beam_root_[child->kv.id] = root;
        g.cumulative[child->kv.id] = per_beam[b][k]->score;
        timing_[child->kv.id] = timing_[r.kv.id];
        children.push_back(child->kv.id);
      }
      g.cumulative[r.kv.id] = per_beam[b][0]->score;
      scheduler_.append_token(r, per_beam[b][0]->token);
      g.live.push_back(r.kv.id);
      g.live.insert(g.live.end(), children.begin(), children.end());
    }
    // Beams that met a stop condition leave `live` in finish_beam.
  }
}

void LLMEngine::finish_beam(SchedulerRequest& r, std::vector<RequestOutput>& results) {
  const uint64_t root = beam_root_.at(r.kv.id);
  beam_root_.erase(r.kv.id);
  if (pruned_.erase(r.kv.id) > 0) return;  // dropped: nothing to report
  BeamGroup& g = beams_.at(root);
  std::erase(g.live, r.kv.id);
  g.pending.erase(r.kv.id);
  RequestOutput o = make_output(r, true);
  if (r.finish_reason == FinishReason::kStop || r.finish_reason == FinishReason::kLength) {
    o.cumulative_logprob = g.cumulative.at(r.kv.id);
    g.hypotheses.push_back(std::move(o));
  } else if (!g.failed) {
    g.failed = std::move(o);
    for (RequestId b : g.live) {  // the rest of it goes too (or finished already, unreported)
      scheduler_.abort_request(b, false);
      pruned_.insert(b);
    }
    g.live.clear();
  }
  g.cumulative.erase(r.kv.id);
  if (!g.live.empty()) return;
  if (g.failed) {
    g.failed->id = RequestId{root};
    g.failed->parent = RequestId{~0ull};
    g.failed->sample_index = 0;
    results.push_back(std::move(*g.failed));
  } else {
    std::stable_sort(g.hypotheses.begin(), g.hypotheses.end(), [](const RequestOutput& a, const RequestOutput& b) {
      return a.cumulative_logprob > b.cumulative_logprob;
    });
    for (size_t i = 0; i < g.hypotheses.size(); ++i) {
      RequestOutput& h = g.hypotheses[i];
      h.sample_index = static_cast<int>(i);
      h.parent = i == 0 ? RequestId{~0ull} : RequestId{root};
      if (i == 0) h.id = RequestId{root};
      results.push_back(std::move(h));
    }
  }
  beams_.erase(root);
}

std::vector<RequestOutput> LLMEngine::run_to_completion() {
  std::vector<RequestOutput> done;
  while (has_unfinished()) {
    for (RequestOutput& o : step())
      if (o.finished) done.push_back(std::move(o));
  }
  return done;
}

std::vector<int> LLMEngine::block_owners() const {
  std::vector<int> owners(static_cast<size_t>(num_blocks_), -1);
  for (const KVCacheBlock& b : manager_.pool().blocks()) {
    if (b.is_null) owners[0] = -3;
    else if (b.ref_cnt > 0) owners[static_cast<size_t>(b.id.value)] = b.ref_cnt;
    else if (b.has_hash) owners[static_cast<size_t>(b.id.value)] = -2;
  }
  return owners;
}

std::vector<KVEvent> LLMEngine::take_kv_events() {
  std::vector<KVEvent> out = manager_.take_events();
  if (tiers_) {
    std::vector<KVEvent> lower = tiers_->take_events();
    out.insert(out.end(), lower.begin(), lower.end());
  }
  return out;
}

std::vector<KVEvent> LLMEngine::cached_blocks() const {
  std::vector<KVEvent> out;
  for (const KVCacheBlock& b : manager_.pool().blocks()) {
    if (b.is_null || !b.has_hash) continue;
    KVEvent e;
    e.kind = KVEventKind::kBlockStored;
    e.hash = b.hash;
    e.token_count = config_.block_size;
    e.block = b.id;
    e.group = b.group;
    out.push_back(e);
  }
  if (tiers_) {
    std::vector<KVEvent> lower = tiers_->cached_blocks();
    out.insert(out.end(), lower.begin(), lower.end());
  }
  return out;
}

}  // namespace pagedkv
